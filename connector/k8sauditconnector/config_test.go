package k8sauditconnector

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap/confmaptest"

	"github.com/kubetrail/kubetrail/connector/k8sauditconnector/internal/metadata"
)

func TestConfigFromTestdata(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		id      component.ID
		check   func(*testing.T, *Config)
		wantErr string
	}{
		{id: component.NewID(metadata.Type), check: func(t *testing.T, c *Config) {
			if c.Cluster != "prod-eu" || c.Format != formatAuto || c.DedupWindow != defaultDedupWindow || c.Conversion.DiffCacheSize == 0 {
				t.Fatalf("defaults not kept: %+v", c)
			}
		}},
		{id: component.NewIDWithName(metadata.Type, "eks"), check: func(t *testing.T, c *Config) {
			if c.ClusterAttribute != "aws.log.group.names" || c.Format != formatNative || c.DedupWindow != 30*time.Minute || c.DedupMaxBytes != 32<<20 {
				t.Fatalf("eks: %+v", c)
			}
		}},
		{id: component.NewIDWithName(metadata.Type, "gke"), check: func(t *testing.T, c *Config) {
			if c.Format != formatGKE || !c.Conversion.IncludeReadVerbs || c.Conversion.Window != time.Hour {
				t.Fatalf("gke: %+v", c)
			}
		}},
		{id: component.NewIDWithName(metadata.Type, "bad_cluster"), wantErr: "cluster:"},
		{id: component.NewIDWithName(metadata.Type, "no_cluster"), wantErr: "cluster: required"},
		{id: component.NewIDWithName(metadata.Type, "bad_format"), wantErr: "format:"},
	}
	for _, tt := range tests {
		t.Run(tt.id.String(), func(t *testing.T) {
			cfg := createDefaultConfig()
			sub, err := cm.Sub(tt.id.String())
			if err != nil {
				t.Fatal(err)
			}
			if err := sub.Unmarshal(cfg); err != nil {
				t.Fatal(err)
			}
			err = cfg.(*Config).Validate()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Validate = %v, want an error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, cfg.(*Config))
		})
	}
}

func TestUnknownKeysAreErrors(t *testing.T) {
	cm := confmapOf(map[string]any{"cluster": "c", "dedup_windw": "1m"})
	if err := cm.Unmarshal(createDefaultConfig()); err == nil || !strings.Contains(err.Error(), "dedup_windw") {
		t.Fatalf("unmarshal = %v, want an error naming the unknown key", err)
	}
}

func TestConversionKeysAreValidated(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	cfg.Cluster = "c"
	cfg.Conversion.ExcludeUserAgents = []string{""}
	cfg.DedupMaxBytes = 0
	err := cfg.Validate()
	for _, key := range []string{"exclude_user_agents[0]", "dedup_max_bytes"} {
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Fatalf("Validate = %v, want an error naming %s", err, key)
		}
	}
}
