package k8sobjectlinkprocessor

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"

	"github.com/kubetrail/kubetrail/internal/k8sconfig"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/metadata"
)

func TestLoadConfig(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		check   func(t *testing.T, c *Config)
		wantErr string // a substring naming the bad key
	}{
		{name: "", check: func(t *testing.T, c *Config) {
			if c.Window != 30*time.Minute || c.DuplicateTTL != 10*time.Minute || c.RelationTTL != 24*time.Hour || c.RelationTTLAfterDelete != 10*time.Minute || c.IDMap.Backend != BackendMemory || c.OwnerLookup.HasValue() || c.OwnerWait != 2*time.Second || c.MaxSpansPerTrace != 1500 ||
				c.APIServerJoin != (APIServerJoinConfig{Enabled: false, TTL: 2 * time.Minute, MaxEntries: 50000, MaxBytes: 16 << 20}) ||
				c.TraceContext != (TraceContextConfig{Nest: true, NestFor: time.Hour, FollowTraceState: true, LinkSpans: true}) ||
				!slices.Equal(c.Doors.Identity.Services, []string{"kubelet"}) || c.Doors.Identity.Cluster != "" ||
				c.Doors.Identity.MaxTraces != 10000 || c.Doors.Identity.Wait != 10*time.Second {
				t.Fatalf("defaults: %+v", c)
			}
		}},
		{name: "redis", check: func(t *testing.T, c *Config) {
			r := c.IDMap.Redis
			if c.Window != time.Hour || c.DuplicateTTL != 20*time.Minute || c.RelationTTLAfterDelete != 30*time.Minute || c.IDMap.Backend != BackendRedis || r.Addresses[0] != "redis-0:6379" ||
				r.KeyPrefix != "prod:" || r.Username != "kubetrail" || string(r.Password) != "s3cret" ||
				r.Timeout != 250*time.Millisecond || r.TLS.Insecure || r.TLS.CAFile != "/etc/redis/ca.pem" ||
				c.IDMap.Memory.MaxEntries != 50000 || c.MaxHeldSpans != 500 || c.MaxSpansPerTrace != 4000 ||
				c.Storage == nil || c.Storage.String() != "file_storage/held" ||
				c.APIServerJoin != (APIServerJoinConfig{Enabled: true, TTL: 30 * time.Second, MaxEntries: 1000, MaxBytes: 262144}) {
				t.Fatalf("redis config: %+v", c)
			}
		}},
		{name: "sentinel", check: func(t *testing.T, c *Config) {
			if c.IDMap.Redis.SentinelMasterName != "mymaster" || len(c.IDMap.Redis.Addresses) != 3 {
				t.Fatalf("sentinel config: %+v", c.IDMap.Redis)
			}
		}},
		{name: "cluster", check: func(t *testing.T, c *Config) {
			if c.IDMap.Redis.Mode != RedisModeCluster {
				t.Fatalf("cluster config: %+v", c.IDMap.Redis)
			}
		}},
		{name: "owner_lookup", check: func(t *testing.T, c *Config) {
			l := c.OwnerLookup.Get()
			if l == nil || l.APIConfig.AuthType != k8sconfig.AuthTypeKubeConfig || l.APIConfig.Context != "kind-dev" || l.Cluster != "kind-dev" ||
				l.CacheTTL != time.Minute || l.Timeout != 2*time.Second || !slices.Equal(l.Resources, []string{"pods", "replicasets.apps", "jobs.batch"}) {
				t.Fatalf("owner_lookup present must enable look-ups with defaults filled in: %+v", l)
			}
		}},
		{name: "no_trace_bound", check: func(t *testing.T, c *Config) {
			if c.MaxSpansPerTrace != 0 {
				t.Fatalf("max_spans_per_trace = %d, want 0 (no bound)", c.MaxSpansPerTrace)
			}
		}},
		{name: "trace_context", check: func(t *testing.T, c *Config) {
			if c.TraceContext != (TraceContextConfig{Nest: false, NestFor: time.Hour, FollowTraceState: false, LinkSpans: false}) {
				t.Fatalf("trace_context: %+v", c.TraceContext)
			}
		}},
		{name: "identity", check: func(t *testing.T, c *Config) {
			id := c.Doors.Identity
			if !slices.Equal(id.Services, []string{"kubelet", "containerd"}) || id.Cluster != "prod-eu" || id.MaxTraces != 500 || id.Wait != 20*time.Second {
				t.Fatalf("doors.identity: %+v", id)
			}
		}},
		{name: "identity_off", check: func(t *testing.T, c *Config) {
			if len(c.Doors.Identity.Services) != 0 {
				t.Fatalf("doors.identity.services: %v", c.Doors.Identity.Services)
			}
		}},
		{name: "identity_bad_cluster", wantErr: `doors.identity.cluster: "prod/eu" is not a valid cluster name`},
		{name: "zero_nest_for", wantErr: "trace_context.nest_for must be positive"},
		{name: "small_trace_bound", wantErr: "max_spans_per_trace must be 0 (no bound) or at least 100, got 50"},
		{name: "bad_window", wantErr: "window"},
		{name: "long_relation_ttl_after_delete", wantErr: "relation_ttl_after_delete must be positive and at most relation_ttl (24h0m0s), got 25h0m0s"},
		{name: "bad_backend", wantErr: "id_map.backend"},
		{name: "redis_without_addresses", wantErr: "id_map.redis.addresses"},
		{name: "sentinel_without_master", wantErr: "id_map.redis.sentinel_master_name"},
		{name: "bad_owner_lookup", wantErr: "owner_lookup"},
		{name: "short_duplicate_ttl", wantErr: "duplicate_ttl"},
		{name: "negative_owner_wait", wantErr: "owner_wait"},
		{name: "zero_max_entries", wantErr: "id_map.memory.max_entries"},
		{name: "owner_lookup_without_cluster", wantErr: "owner_lookup.cluster must be set"},
		{name: "owner_lookup_bad_cluster", wantErr: `owner_lookup.cluster: "prod/eu" is not a valid cluster name`},
		{name: "owner_lookup_bad_resource", wantErr: `owner_lookup.resources: "Deployments.apps" is not a resource`},
		{name: "redis_address_without_port", wantErr: "id_map.redis.addresses[0]"},
		{name: "redis_negative_db", wantErr: "id_map.redis.db must not be negative"},
		{name: "zero_join_ttl", wantErr: "apiserver_join.ttl"},
	}
	for _, tt := range tests {
		t.Run("instance "+tt.name, func(t *testing.T) {
			id := component.NewIDWithName(metadata.Type, tt.name)
			sub, err := cm.Sub(id.String())
			if err != nil {
				t.Fatal(err)
			}
			cfg := createDefaultConfig()
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
				t.Fatal(err)
			}
			tt.check(t, cfg)
		})
	}
}

func TestUnknownKeysAreErrorsNamingTheKey(t *testing.T) {
	tests := []struct {
		name string
		conf map[string]any
		key  string
	}{
		{"a misspelled top-level key", map[string]any{"windw": "1h"}, "windw"},
		{"a misspelled key of id_map", map[string]any{"id_map": map[string]any{"backnd": "redis"}}, "backnd"},
		{"a misspelled redis key", map[string]any{"id_map": map[string]any{"redis": map[string]any{"adresses": []string{"r:6379"}}}}, "adresses"},
		{"a misspelled redis tls key", map[string]any{"id_map": map[string]any{"redis": map[string]any{"tls": map[string]any{"ca_fle": "x"}}}}, "ca_fle"},
		{"a misspelled shared client key of owner_lookup (squashed)", map[string]any{"owner_lookup": map[string]any{"auth_tpye": "none"}}, "auth_tpye"},
		{"a misspelled owner_lookup key", map[string]any{"owner_lookup": map[string]any{"clustr": "c"}}, "clustr"},
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
