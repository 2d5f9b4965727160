package k8sauditconnector

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap/confmaptest"

	"github.com/kubetrail/kubetrail/connector/k8sauditconnector/internal/metadata"
	"github.com/kubetrail/kubetrail/internal/auditconv"
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
			if c.Cluster != "prod-eu" || c.Format != formatAuto || c.DedupWindow != defaultDedupWindow || c.OffsetOrder.MaxWait != defaultOffsetOrderMaxWait || c.Conversion.DiffCacheSize == 0 ||
				c.Conversion.RedactEnvNames != auditconv.DefaultRedactEnvNames || len(c.Conversion.RedactAnnotations) != 1 {
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
		{id: component.NewIDWithName(metadata.Type, "redaction"), check: func(t *testing.T, c *Config) {
			if c.Conversion.RedactEnvNames != ".*" || len(c.Conversion.RedactAnnotations) != 2 || len(c.Conversion.RedactResources) != 2 {
				t.Fatalf("redaction: %+v", c.Conversion)
			}
		}},
		{id: component.NewIDWithName(metadata.Type, "no_env_redaction"), check: func(t *testing.T, c *Config) {
			if c.Conversion.RedactEnvNames != "" || len(c.Conversion.RedactAnnotations) != 0 {
				t.Fatalf("an empty pattern and list must replace the defaults: %+v", c.Conversion)
			}
		}},
		{id: component.NewIDWithName(metadata.Type, "bad_env_pattern"), wantErr: "redact_env_names: error parsing regexp"},
		{id: component.NewIDWithName(metadata.Type, "bad_annotation_pattern"), wantErr: "redact_annotations[1]: error parsing regexp"},
		{id: component.NewIDWithName(metadata.Type, "shared_diff_base"), check: func(t *testing.T, c *Config) {
			if sh := c.Conversion.SharedDiffBase.Get(); sh == nil || len(sh.Redis.Addresses) != 3 || sh.Redis.Mode != "cluster" || sh.MaxRecordBytes <= 0 {
				t.Errorf("shared_diff_base = %+v", sh)
			}
		}},
		{id: component.NewIDWithName(metadata.Type, "bad_shared_diff_base"), wantErr: "shared_diff_base.redis.addresses[0]:"},
		{id: component.NewIDWithName(metadata.Type, "bad_cluster"), wantErr: "cluster:"},
		{id: component.NewIDWithName(metadata.Type, "no_cluster"), wantErr: "cluster: required"},
		{id: component.NewIDWithName(metadata.Type, "bad_format"), wantErr: "format:"},
		{id: component.NewIDWithName(metadata.Type, "no_merge"), check: func(t *testing.T, c *Config) {
			if c.Merge.Enabled || c.Merge.MaxBytes != defaultMergeMaxBytes {
				t.Fatalf("merge %+v", c.Merge)
			}
		}},
		{id: component.NewIDWithName(metadata.Type, "bad_merge"), wantErr: "merge.max_bytes: must be positive"},
		{id: component.NewIDWithName(metadata.Type, "bad_in_flight"), wantErr: "max_in_flight_bytes: must be at least"},
		{id: component.NewIDWithName(metadata.Type, "no_offset_order"), check: func(t *testing.T, c *Config) {
			if c.OffsetOrder.MaxWait != 0 {
				t.Fatalf("offset_order %+v", c.OffsetOrder)
			}
		}},
		{id: component.NewIDWithName(metadata.Type, "bad_offset_order"), wantErr: "offset_order.max_wait: must be between 0 (off) and 10s"},
		{id: component.NewIDWithName(metadata.Type, "in_flight"), check: func(t *testing.T, c *Config) {
			if c.MaxInFlightBytes != 32<<20 {
				t.Fatalf("max_in_flight_bytes %d", c.MaxInFlightBytes)
			}
		}},
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

// The managed-cluster examples are complete collector configurations for receivers this
// build cannot contain; their k8s_audit connector sections are checked here.
func TestManagedExamplesConfigureTheConnector(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "distribution", "examples", "managed", "*.yaml"))
	if err != nil || len(files) < 5 {
		t.Fatalf("examples: %v %v", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Setenv("EKS_CLUSTER", "eks-1")
			t.Setenv("AKS_CLUSTER", "aks-1")
			t.Setenv("GKE_CLUSTER", "gke-1")
			t.Setenv("KUBETRAIL_CLUSTER", "c-1")
			cm, err := confmaptest.LoadConf(f)
			if err != nil {
				t.Fatal(err)
			}
			sub, err := cm.Sub("connectors::k8s_audit")
			if err != nil {
				t.Fatal(err)
			}
			raw := sub.ToStringMap()
			for k, v := range raw {
				if s, ok := v.(string); ok {
					raw[k] = os.ExpandEnv(strings.ReplaceAll(strings.ReplaceAll(s, "${env:", "${"), "}", "}"))
				}
			}
			cfg := createDefaultConfig().(*Config)
			if err := confmapOf(raw).Unmarshal(cfg); err != nil {
				t.Fatal(err)
			}
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			pipes, err := cm.Sub("service::pipelines")
			if err != nil || !strings.Contains(fmt.Sprint(pipes.ToStringMap()), "k8s_audit") {
				t.Fatalf("no pipeline uses the connector: %v", err)
			}
		})
	}
}
