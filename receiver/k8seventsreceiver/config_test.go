package k8seventsreceiver

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"

	"github.com/kubetrail/kubetrail/internal/k8sconfig"
	"github.com/kubetrail/kubetrail/receiver/k8seventsreceiver/internal/metadata"
)

func TestLoadConfig(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	storageID := component.MustNewIDWithName("file_storage", "events")
	tests := []struct {
		name    string
		id      component.ID
		want    func(*Config)
		wantErr string
	}{
		{
			name: "cluster alone gives the in-cluster defaults",
			id:   component.NewID(metadata.Type),
			want: func(c *Config) { c.Cluster = "prod-eu-1" },
		},
		{
			name: "every key is read from the receiver's top level",
			id:   component.NewIDWithName(metadata.Type, "all_keys"),
			want: func(c *Config) {
				c.APIConfig = k8sconfig.APIConfig{AuthType: k8sconfig.AuthTypeKubeConfig, Context: "kind-prod", KubeAPIQPS: 20, KubeAPIBurst: 40}
				c.Cluster = "prod-eu-1"
				c.Namespaces = []string{"default", "kube-system"}
				c.LabelSelector = "app=web"
				c.FieldSelector = "type=Warning"
				c.Storage = &storageID
				c.MaxEventAge = 10 * time.Minute
				c.CheckpointTTL = 2 * time.Hour
				c.SeriesQuiet = 20 * time.Minute
				c.SeriesMaxPending = 500
				c.StalledWatchTimeout = 3 * time.Minute
				c.Backoff = BackoffConfig{InitialInterval: 500 * time.Millisecond, MaxInterval: time.Minute}
				le := defaultLeaderElectionConfig()
				le.LeaseName = "events-leader"
				le.LeaseNamespace = "observability"
				c.LeaderElection = configoptional.Some(le)
			},
		},
		{
			name: "an empty leader_election enables the election with defaults",
			id:   component.NewIDWithName(metadata.Type, "leader_defaults"),
			want: func(c *Config) {
				c.Cluster = "prod-eu-1"
				c.LeaderElection = configoptional.Some(defaultLeaderElectionConfig())
			},
		},
		{name: "cluster is required", id: component.NewIDWithName(metadata.Type, "missing_cluster"), wantErr: "cluster must be set"},
		{name: "a cluster name must be one path segment, as for k8s_audit", id: component.NewIDWithName(metadata.Type, "bad_cluster"), wantErr: `cluster: "prod/eu" is not a valid cluster name`},
		{name: "an unknown auth_type is rejected", id: component.NewIDWithName(metadata.Type, "bad_auth_type"), wantErr: `auth_type "password"`},
		{name: "a namespace must be a DNS label", id: component.NewIDWithName(metadata.Type, "bad_namespace"), wantErr: "namespaces[0]"},
		{name: "a label selector must parse", id: component.NewIDWithName(metadata.Type, "bad_label_selector"), wantErr: "label_selector"},
		{name: "max_event_age must not be negative", id: component.NewIDWithName(metadata.Type, "negative_max_event_age"), wantErr: "max_event_age"},
		{name: "series_quiet must be positive", id: component.NewIDWithName(metadata.Type, "zero_series_quiet"), wantErr: "series_quiet"},
		{name: "series_max_pending must be at least 1", id: component.NewIDWithName(metadata.Type, "zero_series_max_pending"), wantErr: "series_max_pending"},
		{name: "the window must be positive", id: component.NewIDWithName(metadata.Type, "zero_window"), wantErr: "window"},
		{name: "the backoff cap must not be below its start", id: component.NewIDWithName(metadata.Type, "bad_backoff"), wantErr: "backoff.max_interval"},
		{name: "the lease must outlast the renew deadline", id: component.NewIDWithName(metadata.Type, "bad_leader_timing"), wantErr: "leader_election.lease_duration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := createDefaultConfig().(*Config)
			sub, err := cm.Sub(tt.id.String())
			if err != nil {
				t.Fatal(err)
			}
			if err := sub.Unmarshal(cfg); err != nil {
				t.Fatal(err)
			}
			err = confmap.Validate(cfg)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Validate() = %v, want an error naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Validate() = %v", err)
			}
			want := createDefaultConfig().(*Config)
			tt.want(want)
			if !equalConfig(cfg, want) {
				t.Fatalf("config\n got %+v\nwant %+v", cfg, want)
			}
		})
	}
}

func TestDefaultConfigDisablesLeaderElection(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	if cfg.LeaderElection.HasValue() {
		t.Fatal("leader election is on by default; it must need leader_election in the config")
	}
	cfg.Cluster = "c"
	if err := confmap.Validate(cfg); err != nil {
		t.Fatalf("default config with a cluster is invalid: %v", err)
	}
}

func equalConfig(a, b *Config) bool {
	if a.APIConfig != b.APIConfig || a.Cluster != b.Cluster || a.LabelSelector != b.LabelSelector ||
		a.FieldSelector != b.FieldSelector || a.MaxEventAge != b.MaxEventAge || a.CheckpointTTL != b.CheckpointTTL ||
		a.StalledWatchTimeout != b.StalledWatchTimeout || a.Backoff != b.Backoff ||
		a.SeriesQuiet != b.SeriesQuiet || a.SeriesMaxPending != b.SeriesMaxPending {
		return false
	}
	if len(a.Namespaces) != len(b.Namespaces) {
		return false
	}
	for i := range a.Namespaces {
		if a.Namespaces[i] != b.Namespaces[i] {
			return false
		}
	}
	if (a.Storage == nil) != (b.Storage == nil) || (a.Storage != nil && *a.Storage != *b.Storage) {
		return false
	}
	if a.LeaderElection.HasValue() != b.LeaderElection.HasValue() {
		return false
	}
	return !a.LeaderElection.HasValue() || *a.LeaderElection.Get() == *b.LeaderElection.Get()
}

func TestTheOldLeaderElectionKeyNamesItsNewName(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"old_leader_key", "old_leader_key_empty"} {
		t.Run(name, func(t *testing.T) {
			sub, err := cm.Sub(component.NewIDWithName(metadata.Type, name).String())
			if err != nil {
				t.Fatal(err)
			}
			cfg := createDefaultConfig().(*Config)
			err = sub.Unmarshal(cfg)
			want := `"k8s_leader_elector" was renamed to "leader_election"`
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("Unmarshal() = %v, want an error containing %s", err, want)
			}
			if cfg.LeaderElection.HasValue() {
				t.Fatal("the old key must not enable leader election")
			}
		})
	}
}

func TestUnknownKeysAreErrorsNamingTheKey(t *testing.T) {
	tests := []struct {
		name string
		conf map[string]any
		key  string
	}{
		{"a misspelled top-level key", map[string]any{"cluster": "c", "namespace": []string{"default"}}, "namespace"},
		{"a misspelled shared client key (squashed)", map[string]any{"cluster": "c", "auth_tpye": "none"}, "auth_tpye"},
		{"a misspelled nested key", map[string]any{"cluster": "c", "backoff": map[string]any{"initial_intervall": "1s"}}, "initial_intervall"},
		{"a misspelled key of an optional section", map[string]any{"cluster": "c", "leader_election": map[string]any{"lease": "x"}}, "lease"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := NewFactory().CreateDefaultConfig()
			err := confmap.NewFromStringMap(tt.conf).Unmarshal(cfg)
			if err == nil || !strings.Contains(err.Error(), tt.key) {
				t.Fatalf("Unmarshal() = %v, want an error naming %q", err, tt.key)
			}
		})
	}
}
