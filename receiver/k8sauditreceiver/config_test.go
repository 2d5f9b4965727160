package k8sauditreceiver

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"

	"github.com/kubetrail/kubetrail/receiver/k8sauditreceiver/internal/metadata"
)

func TestLoadConfig(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	storageID := component.MustNewID("file_storage")
	tests := []struct {
		name    string
		id      component.ID
		check   func(t *testing.T, cfg *Config)
		wantErr string // substring naming the bad key; empty means valid
	}{
		{name: "the defaults listen on localhost:9880 and exclude leases and events", id: component.NewID(metadata.Type), check: func(t *testing.T, cfg *Config) {
			if cfg.ServerConfig.NetAddr.Endpoint != "localhost:9880" {
				t.Errorf("endpoint = %q", cfg.ServerConfig.NetAddr.Endpoint)
			}
			if len(cfg.Conversion.ExcludeResources) != 3 || cfg.Conversion.ExcludeResources[0] != (GroupResource{Group: "coordination.k8s.io", Resource: "leases"}) {
				t.Errorf("exclude_resources = %v", cfg.Conversion.ExcludeResources)
			}
			if len(cfg.Conversion.RedactResources) != 1 || cfg.Conversion.RedactResources[0].Resource != "secrets" {
				t.Errorf("redact_resources = %v", cfg.Conversion.RedactResources)
			}
			if cfg.Conversion.RedactEnvNames != `(?i)(pass|secret|token|key|credential|auth|cert|private)` ||
				len(cfg.Conversion.RedactAnnotations) != 1 || cfg.Conversion.RedactAnnotations[0] != `(?i)(pass|secret|token|key|credential|auth|cert|private)[^/]*$` {
				t.Errorf("redact_env_names = %q, redact_annotations = %q", cfg.Conversion.RedactEnvNames, cfg.Conversion.RedactAnnotations)
			}
			if cfg.MaxHeaderBytes != 16<<10 || cfg.MaxConnections != 2048 || cfg.MinBodyRate != 4096 {
				t.Errorf("max_header_bytes, max_connections, min_body_rate = %d, %d, %d; want 16 KiB, 2048, 4 KiB/s", cfg.MaxHeaderBytes, cfg.MaxConnections, cfg.MinBodyRate)
			}
			if !slices.Equal(cfg.ServerConfig.CompressionAlgorithms, []string{"", "gzip"}) {
				t.Errorf("compression_algorithms = %q, want only none and gzip (the decoders that hold little)", cfg.ServerConfig.CompressionAlgorithms)
			}
			if cfg.Conversion.DiffCacheSize != 100_000 || cfg.Conversion.Window != 30*time.Minute || cfg.StartAt != "end" || cfg.Conversion.IncludeReadVerbs ||
				!slices.Equal(cfg.Conversion.TraceContextAnnotations, []string{"tracing.k8s.io/traceparent", "trace.kubernetes.io/context"}) || cfg.Conversion.TraceContextAnnotation != "" {
				t.Errorf("defaults = %+v", cfg)
			}
		}},
		{name: "every key can be set", id: component.MustNewIDWithName("k8s_audit", "full"), check: func(t *testing.T, cfg *Config) {
			if cfg.ServerConfig.NetAddr.Endpoint != "0.0.0.0:19880" || cfg.ServerConfig.MaxRequestBodySize != 10<<20 || cfg.MaxInFlightBytes != 32<<20 || cfg.MaxEventsPerRequest != 5000 {
				t.Errorf("server = %+v", cfg.ServerConfig)
			}
			if cfg.MaxHeaderBytes != 8192 || cfg.MaxConnections != 64 || cfg.MinBodyRate != 0 {
				t.Errorf("max_header_bytes, max_connections, min_body_rate = %d, %d, %d", cfg.MaxHeaderBytes, cfg.MaxConnections, cfg.MinBodyRate)
			}
			if cfg.Edge.Shards != 24 {
				t.Errorf("edge.shards = %d, want 24", cfg.Edge.Shards)
			}
			if cfg.Cluster != "prod-eu-1" || len(cfg.Files) != 1 || cfg.Storage == nil || *cfg.Storage != storageID {
				t.Errorf("cluster/files/storage = %q %v %v", cfg.Cluster, cfg.Files, cfg.Storage)
			}
			if cfg.PollInterval != time.Second || cfg.StartAt != "beginning" || !cfg.Conversion.IncludeReadVerbs || cfg.Conversion.Window != time.Hour {
				t.Errorf("poll/start/reads/window = %+v", cfg)
			}
			if len(cfg.Conversion.ExcludeResources) != 2 || cfg.Conversion.ExcludeResources[1] != (GroupResource{Resource: "pods/log"}) {
				t.Errorf("exclude_resources = %v", cfg.Conversion.ExcludeResources)
			}
			if len(cfg.Conversion.ExcludeUserAgents) != 1 || cfg.Conversion.DiffCacheSize != 5000 || len(cfg.Conversion.RedactResources) != 2 || !slices.Equal(cfg.Conversion.TraceContextAnnotations, []string{"tracing.k8s.io/traceparent", "example.com/traceparent"}) || cfg.Conversion.TraceContextAnnotation != "example.com/context" ||
				cfg.Conversion.RedactEnvNames != ".*" || len(cfg.Conversion.RedactAnnotations) != 1 || cfg.Conversion.RedactAnnotations[0] != `^vault\.hashicorp\.com/` {
				t.Errorf("user agents/cache/redact = %+v", cfg)
			}
		}},
		{name: "tls settings come from confighttp", id: component.MustNewIDWithName("k8s_audit", "tls"), check: func(t *testing.T, cfg *Config) {
			if !cfg.ServerConfig.TLS.HasValue() || cfg.ServerConfig.TLS.Get().ClientCAFile != "/etc/kubernetes/pki/ca.crt" {
				t.Errorf("tls = %+v", cfg.ServerConfig.TLS)
			}
			if len(cfg.AllowedClientNames) != 1 || cfg.AllowedClientNames[0] != "kube-apiserver-audit" {
				t.Errorf("allowed_client_names = %v", cfg.AllowedClientNames)
			}
		}},
		{name: "zstd is accepted when listed, its decoder charged", id: component.MustNewIDWithName("k8s_audit", "zstd"), check: func(t *testing.T, cfg *Config) {
			if name, n := costliestDecoder(cfg.ServerConfig.CompressionAlgorithms, cfg.bodyLimit()); name != "zstd" || n != 21<<20 {
				t.Errorf("costliest decoder = %s, %d bytes; want zstd, max_request_body_size and 1 MiB", name, n)
			}
		}},
		{name: "an encoding confighttp cannot decode is refused", id: component.MustNewIDWithName("k8s_audit", "unknown_encoding"), wantErr: `compression_algorithms[1]: "br"`},
		{name: "compression_algorithms without none is refused (the apiserver does not compress)", id: component.MustNewIDWithName("k8s_audit", "no_identity"), wantErr: `compression_algorithms: must list ""`},
		{name: "snappy's decoder must fit max_in_flight_bytes beside a largest body", id: component.MustNewIDWithName("k8s_audit", "snappy_without_room"), wantErr: "a snappy decoder, 62914560 bytes: compression_algorithms"},
		{name: "max_header_bytes must be positive", id: component.MustNewIDWithName("k8s_audit", "zero_max_header_bytes"), wantErr: "max_header_bytes: must be positive"},
		{name: "max_connections must be positive", id: component.MustNewIDWithName("k8s_audit", "zero_max_connections"), wantErr: "max_connections: must be positive"},
		{name: "min_body_rate must not be negative", id: component.MustNewIDWithName("k8s_audit", "negative_min_body_rate"), wantErr: "min_body_rate: must not be negative"},
		{name: "edge.shards must not be negative", id: component.MustNewIDWithName("k8s_audit", "negative_edge_shards"), wantErr: "edge.shards: must be between 0"},
		{name: "an empty endpoint means file mode only", id: component.MustNewIDWithName("k8s_audit", "files"), check: func(t *testing.T, cfg *Config) {
			if cfg.webhookEnabled() || len(cfg.Files) != 2 {
				t.Errorf("webhook = %v, files = %v", cfg.webhookEnabled(), cfg.Files)
			}
		}},
		{name: "an empty exclusion list and a zero cache turn the defaults off", id: component.MustNewIDWithName("k8s_audit", "no_diffs"), check: func(t *testing.T, cfg *Config) {
			if len(cfg.Conversion.ExcludeResources) != 0 || cfg.Conversion.DiffCacheSize != 0 {
				t.Errorf("exclude = %v, cache = %d", cfg.Conversion.ExcludeResources, cfg.Conversion.DiffCacheSize)
			}
		}},
		{name: "a shared diff base takes the Redis keys", id: component.MustNewIDWithName("k8s_audit", "shared_diff_base"), check: func(t *testing.T, cfg *Config) {
			sh := cfg.Conversion.SharedDiffBase.Get()
			if sh == nil || sh.Redis.Addresses[0] != "redis-0.redis:6379" || sh.Redis.Password != "from-a-secret" || sh.Redis.KeyPrefix != "prod:" ||
				sh.Redis.Timeout != 250*time.Millisecond || sh.MaxRecordBytes != 32768 {
				t.Errorf("shared_diff_base = %+v", sh)
			}
		}},
		{name: "no shared diff base unless configured", id: component.MustNewIDWithName("k8s_audit", "files"), check: func(t *testing.T, cfg *Config) {
			if cfg.Conversion.SharedDiffBase.HasValue() {
				t.Errorf("shared_diff_base is on by default: %+v", cfg.Conversion.SharedDiffBase.Get())
			}
		}},
		{name: "a shared diff base needs an address", id: component.MustNewIDWithName("k8s_audit", "shared_diff_base_without_address"), wantErr: "shared_diff_base.redis.addresses must name"},
		{name: "a shared diff base needs diffs", id: component.MustNewIDWithName("k8s_audit", "shared_diff_base_without_diffs"), wantErr: "shared_diff_base: diffs are off"},
		{name: "a cluster name that is not one path segment is refused", id: component.MustNewIDWithName("k8s_audit", "bad_cluster"), wantErr: "cluster:"},
		{name: "max_in_flight_bytes below max_request_body_size is refused", id: component.MustNewIDWithName("k8s_audit", "max_in_flight_too_small"), wantErr: "max_in_flight_bytes:"},
		{name: "max_events_per_request must be positive", id: component.MustNewIDWithName("k8s_audit", "zero_max_events"), wantErr: "max_events_per_request: must be positive"},
		{name: "max_in_flight_bytes must hold a largest body with the most events", id: component.MustNewIDWithName("k8s_audit", "max_in_flight_too_small_for_events"), wantErr: "max_events_per_request (20000)"},
		{name: "files need a cluster", id: component.MustNewIDWithName("k8s_audit", "files_without_cluster"), wantErr: "cluster: required when files is set"},
		{name: "no webhook and no files is refused", id: component.MustNewIDWithName("k8s_audit", "nothing_to_read"), wantErr: "endpoint:"},
		{name: "storage without files is refused", id: component.MustNewIDWithName("k8s_audit", "storage_without_files"), wantErr: "storage:"},
		{name: "an apiVersion where a group belongs is refused", id: component.MustNewIDWithName("k8s_audit", "bad_exclude"), wantErr: "exclude_resources[0]: group:"},
		{name: "a redaction entry without resource is refused", id: component.MustNewIDWithName("k8s_audit", "empty_redact"), wantErr: "redact_resources[0]: resource:"},
		{name: "a redact_env_names that is not a regexp is refused", id: component.MustNewIDWithName("k8s_audit", "bad_redact_env_names"), wantErr: "redact_env_names: error parsing regexp"},
		{name: "an empty redact_annotations pattern is refused", id: component.MustNewIDWithName("k8s_audit", "bad_redact_annotations"), wantErr: "redact_annotations[1]: an empty pattern"},
		{name: "a negative cache size is refused", id: component.MustNewIDWithName("k8s_audit", "negative_cache"), wantErr: "diff_cache_size:"},
		{name: "start_at accepts only end and beginning", id: component.MustNewIDWithName("k8s_audit", "bad_start_at"), wantErr: "start_at:"},
		{name: "an empty user-agent prefix is refused", id: component.MustNewIDWithName("k8s_audit", "empty_user_agent"), wantErr: "exclude_user_agents[0]:"},
		{name: "a file listed twice is refused", id: component.MustNewIDWithName("k8s_audit", "duplicate_file"), wantErr: "files[1]:"},
		{name: "a trace-context annotation that is not an annotation key is refused", id: component.MustNewIDWithName("k8s_audit", "bad_trace_context_annotation"), wantErr: "trace_context_annotations[1]:"},
		{name: "a zero window is refused", id: component.MustNewIDWithName("k8s_audit", "zero_window"), wantErr: "window must be at least 1s"},
		{name: "a write_timeout not past read_timeout (confighttp's 30 s beside the 1 min) is refused", id: component.MustNewIDWithName("k8s_audit", "write_timeout_not_past_read_timeout"), wantErr: "write_timeout: 30s must be longer than read_timeout (1m0s)"},
		{name: "allowed client names need a client CA", id: component.MustNewIDWithName("k8s_audit", "client_names_without_ca"), wantErr: "allowed_client_names:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := NewFactory().CreateDefaultConfig()
			sub, err := cm.Sub(tt.id.String())
			if err != nil {
				t.Fatal(err)
			}
			if err := sub.Unmarshal(cfg); err != nil {
				t.Fatal(err)
			}
			err = confmap.Validate(cfg)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("valid config refused: %v", err)
				}
				tt.check(t, cfg.(*Config))
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want one naming %q", err, tt.wantErr)
			}
		})
	}
}

func TestClusterNames(t *testing.T) {
	for name, want := range map[string]bool{
		"prod-eu-1": true, "kind": true, "a": true, "dev.local": true, "a_b": true,
		"": false, "prod/eu": false, "-lead": false, "trail-": false, "with space": false,
		"..": false, "%2F": false, strings.Repeat("x", 63): true, strings.Repeat("x", 64): false,
	} {
		if got := validClusterName(name); got != want {
			t.Errorf("validClusterName(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestUnknownKeysAreRefusedByName(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for name, key := range map[string]string{
		"misspelled_endpoint":    `"endpiont"`,
		"misspelled_server_key":  `"max_request_body_sise"`,
		"misspelled_tls_key":     "cert_fle",
		"misspelled_exclude_key": "grop",
		"misspelled_edge_key":    "invalid keys: shard",
		"misspelled_redis_key":   "adresses",
	} {
		t.Run(name, func(t *testing.T) {
			sub, err := cm.Sub(component.MustNewIDWithName("k8s_audit", name).String())
			if err != nil {
				t.Fatal(err)
			}
			err = sub.Unmarshal(NewFactory().CreateDefaultConfig())
			if err == nil || !strings.Contains(err.Error(), key) {
				t.Fatalf("error = %v, want one naming %s", err, key)
			}
		})
	}
	t.Run("a near miss names the key it resembles", func(t *testing.T) {
		err := confmap.NewFromStringMap(map[string]any{"endpiont": "x"}).Unmarshal(NewFactory().CreateDefaultConfig())
		if err == nil || !strings.Contains(err.Error(), `did you mean "endpoint"`) {
			t.Fatalf("error = %v", err)
		}
	})
	t.Run("every documented key, the server's included, is still accepted", func(t *testing.T) {
		conf := confmap.NewFromStringMap(map[string]any{
			"endpoint": "localhost:0", "cluster": "c", "files": []any{"/a.log"}, "storage": "file_storage",
			"poll_interval": "1s", "start_at": "end", "include_read_verbs": true, "exclude_resources": []any{},
			"exclude_user_agents": []any{"x/"}, "diff_cache_size": 1, "redact_resources": []any{}, "window": "30m",
			"trace_context_annotation": "a/b", "max_events_per_request": 400, "max_in_flight_bytes": 1 << 30,
			"max_request_body_size": 1024, "include_metadata": true, "compression_algorithms": []any{"gzip"},
			"read_header_timeout": "1s", "write_timeout": "2s", "read_timeout": "1s", "keepalive": map[string]any{"idle_timeout": "1s"},
			"response_headers": map[string]any{"X-A": "b"}, "cors": map[string]any{"allowed_origins": []any{"https://a"}},
			"tls": map[string]any{"cert_file": "/c", "key_file": "/k", "client_ca_file": "/ca"},
		})
		cfg := NewFactory().CreateDefaultConfig().(*Config)
		if err := conf.Unmarshal(cfg); err != nil {
			t.Fatal(err)
		}
		if cfg.ServerConfig.MaxRequestBodySize != 1024 || cfg.Cluster != "c" || !cfg.ServerConfig.TLS.HasValue() {
			t.Fatalf("cfg = %+v", cfg)
		}
	})
}
