package k8sobjectlinkprocessor

import (
	"path/filepath"
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
			if c.Window != 30*time.Minute || c.IDMap.Backend != BackendMemory || c.OwnerLookup.HasValue() || c.OwnerWait != 2*time.Second {
				t.Fatalf("defaults: %+v", c)
			}
		}},
		{name: "redis", check: func(t *testing.T, c *Config) {
			r := c.IDMap.Redis
			if c.Window != time.Hour || c.IDMap.Backend != BackendRedis || r.Addresses[0] != "redis-0:6379" ||
				r.KeyPrefix != "prod:" || r.Username != "kubetrail" || string(r.Password) != "s3cret" ||
				r.Timeout != 250*time.Millisecond || r.TLS.Insecure || r.TLS.CAFile != "/etc/redis/ca.pem" ||
				c.IDMap.Memory.MaxEntries != 50000 || c.MaxHeldSpans != 500 {
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
			if l == nil || l.APIConfig.AuthType != k8sconfig.AuthTypeKubeConfig || l.APIConfig.Context != "kind-dev" ||
				l.CacheTTL != time.Minute || l.Timeout != 2*time.Second {
				t.Fatalf("owner_lookup present must enable look-ups with defaults filled in: %+v", l)
			}
		}},
		{name: "bad_window", wantErr: "window"},
		{name: "bad_backend", wantErr: "id_map.backend"},
		{name: "redis_without_addresses", wantErr: "id_map.redis.addresses"},
		{name: "sentinel_without_master", wantErr: "id_map.redis.sentinel_master_name"},
		{name: "bad_owner_lookup", wantErr: "owner_lookup"},
		{name: "negative_owner_wait", wantErr: "owner_wait"},
		{name: "zero_max_entries", wantErr: "id_map.memory.max_entries"},
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
