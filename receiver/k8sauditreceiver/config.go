package k8sauditreceiver

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/config/confighttp"

	"github.com/kubetrail/kubetrail/internal/auditconv"
	"github.com/kubetrail/kubetrail/internal/model"
)

// Config configures the k8s_audit receiver: a webhook server for the apiserver's audit webhook
// backend, tailing of audit log files, or both.
type Config struct {
	// ServerConfig is the webhook server (endpoint, tls, auth, max_request_body_size, …). An
	// empty endpoint turns the webhook off, for file-only setups.
	ServerConfig confighttp.ServerConfig `mapstructure:",squash"`

	// MaxInFlightBytes bounds what webhook requests hold at once, over all requests: their
	// body bytes as they arrive, and an estimate of their decoded events
	// (auditconv.EventBytes each); a request that would pass it is answered 429 with
	// Retry-After.
	MaxInFlightBytes int64 `mapstructure:"max_in_flight_bytes"`
	// MaxEventsPerRequest bounds the events of one webhook body: the decoder stops at the
	// item past it, and the request is answered 413.
	MaxEventsPerRequest int `mapstructure:"max_events_per_request"`
	// AllowedClientNames, when set, restricts the webhook to clients whose verified certificate
	// (tls.client_ca_file) has one of these names as its common name or as a DNS name; the TLS
	// handshake of any other fails. Empty: any certificate the CA signed.
	AllowedClientNames []string `mapstructure:"allowed_client_names"`
	// MaxHeaderBytes bounds a webhook request's line and headers (http.Server.MaxHeaderBytes,
	// which Go allows 4 KiB past): larger ones are answered 431.
	MaxHeaderBytes int `mapstructure:"max_header_bytes"`
	// MaxConnections bounds the webhook's open connections: one past it is closed as soon as it
	// is accepted.
	MaxConnections int `mapstructure:"max_connections"`
	// MinBodyRate is the slowest, in bytes per second, a webhook body may arrive after its first
	// two seconds; a slower one is cut and answered 408. 0: no minimum (read_timeout still
	// applies).
	MinBodyRate int64 `mapstructure:"min_body_rate"`

	// Cluster names the cluster of events posted to /audit and of every file. Events posted to
	// /audit/{cluster} take the cluster from the path instead.
	Cluster string `mapstructure:"cluster"`

	// Files are audit log files (--audit-log-path, JSON lines) to tail.
	Files []string `mapstructure:"files"`
	// Storage is the storage extension that keeps file read positions across restarts.
	Storage *component.ID `mapstructure:"storage"`
	// PollInterval is how often files are checked for new lines and rotation.
	PollInterval time.Duration `mapstructure:"poll_interval"`
	// StartAt is where a file without a checkpoint is read from: "end" (default) or
	// "beginning". A file that appears after start is always read from its beginning.
	StartAt string `mapstructure:"start_at"`

	// Edge configures the edge output (the receiver in a logs pipeline).
	Edge EdgeConfig `mapstructure:"edge"`

	// Conversion are the keys of the audit conversion (include_read_verbs, exclude_resources,
	// exclude_user_agents, diff_cache_size, diff_cache_max_bytes, redact_resources, redact_env_names,
	// redact_annotations, trace_context_annotation, window), shared with the k8s_audit connector.
	Conversion auditconv.Settings `mapstructure:",squash"`

	// prevent unkeyed literal initialization
	_ struct{}
}

// EdgeConfig is how the edge output groups a batch's events into ResourceLogs, and so, behind
// the kafka exporter's partition_logs_by_resource_attributes, into Kafka messages.
type EdgeConfig struct {
	// Shards, when positive, groups a batch's events by a stable hash of their object into at
	// most Shards groups, each one ResourceLogs whose resource is k8s.cluster.name and
	// kubetrail.edge.shard: fewer, larger messages, each object still in one partition, in order.
	// 0 (the default) gives each object its own ResourceLogs, keyed by the object's attributes.
	Shards int `mapstructure:"shards"`

	// prevent unkeyed literal initialization
	_ struct{}
}

// maxEdgeShards bounds edge.shards: more groups than a batch has events would only key
// messages apart that Kafka's partitions put back together.
const maxEdgeShards = 1 << 16

// bodyLimit is the largest webhook body read: max_request_body_size, or confighttp's 20 MiB
// default when it is not set.
func (cfg *Config) bodyLimit() int64 {
	if cfg.ServerConfig.MaxRequestBodySize > 0 {
		return cfg.ServerConfig.MaxRequestBodySize
	}
	return defaultMaxRequestBodySize
}

// largestRequest is the most one webhook request may hold of max_in_flight_bytes: a body of
// the largest size (and the byte that finds its end), max_events_per_request decoded events
// and the document's own, the 64 KiB by which the decoder's charge is rounded up, and the
// decoder of the costliest Content-Encoding accepted (decoderBytes).
func (cfg *Config) largestRequest() int64 {
	_, decoder := costliestDecoder(cfg.ServerConfig.CompressionAlgorithms, cfg.bodyLimit())
	return cfg.bodyLimit() + 1 + int64(cfg.MaxEventsPerRequest+1)*auditconv.EventBytes + bodyChunk + decoder
}

const (
	startAtEnd       = "end"
	startAtBeginning = "beginning"
)

// GroupResource names an API resource (see auditconv.GroupResource).
type GroupResource = auditconv.GroupResource

// validClusterName is the project's one cluster-name rule (internal/model), shared with the
// other components: the path /audit/{cluster} carries the name as one URL path segment.
func validClusterName(s string) bool { return model.ValidClusterName(s) }

// Validate checks the configuration. A missing cluster is an error only where nothing else
// can supply it: files carry no cluster, so file mode needs `cluster`; the webhook without
// `cluster` serves only /audit/{cluster} and answers 404 on /audit.
func (cfg *Config) Validate() error {
	var errs []error
	webhook := cfg.webhookEnabled()
	if !webhook && len(cfg.Files) == 0 {
		errs = append(errs, errors.New("endpoint: empty and no files: the receiver would have nothing to read"))
	}
	if cfg.Cluster != "" && !validClusterName(cfg.Cluster) {
		errs = append(errs, fmt.Errorf("cluster: %q is not a valid cluster name (1-63 letters, digits, '.', '_' or '-', starting and ending with a letter or digit)", cfg.Cluster))
	}
	if len(cfg.Files) > 0 && cfg.Cluster == "" {
		errs = append(errs, errors.New("cluster: required when files is set (audit log lines do not name their cluster)"))
	}
	seen := map[string]bool{}
	for i, f := range cfg.Files {
		switch {
		case strings.TrimSpace(f) == "":
			errs = append(errs, fmt.Errorf("files[%d]: empty path", i))
		case seen[f]:
			errs = append(errs, fmt.Errorf("files[%d]: %q is listed twice", i, f))
		}
		seen[f] = true
	}
	if len(cfg.AllowedClientNames) > 0 && (!webhook || !cfg.ServerConfig.TLS.HasValue() || cfg.ServerConfig.TLS.Get().ClientCAFile == "") {
		errs = append(errs, errors.New("allowed_client_names: requires the webhook with tls.client_ca_file (only a verified client certificate has names to check)"))
	}
	for i, n := range cfg.AllowedClientNames {
		if strings.TrimSpace(n) == "" {
			errs = append(errs, fmt.Errorf("allowed_client_names[%d]: empty name", i))
		}
	}
	if cfg.Storage != nil && len(cfg.Files) == 0 {
		errs = append(errs, errors.New("storage: set but files is empty (storage only keeps file positions)"))
	}
	if cfg.StartAt != startAtEnd && cfg.StartAt != startAtBeginning {
		errs = append(errs, fmt.Errorf("start_at: must be %q or %q, got %q", startAtEnd, startAtBeginning, cfg.StartAt))
	}
	if sc := cfg.ServerConfig; webhook && sc.WriteTimeout > 0 && sc.ReadTimeout > 0 && sc.WriteTimeout <= sc.ReadTimeout {
		errs = append(errs, fmt.Errorf("write_timeout: %s must be longer than read_timeout (%s): the write deadline runs from the request's headers, so the 400 answering a body cut at read_timeout, and any answer after a body that takes longer than write_timeout, would never reach the client (0 turns write_timeout off)",
			sc.WriteTimeout, sc.ReadTimeout))
	}
	if webhook && cfg.MaxHeaderBytes < 1 {
		errs = append(errs, fmt.Errorf("max_header_bytes: must be positive, got %d", cfg.MaxHeaderBytes))
	}
	if webhook && cfg.MaxConnections < 1 {
		errs = append(errs, fmt.Errorf("max_connections: must be positive, got %d", cfg.MaxConnections))
	}
	if cfg.Edge.Shards < 0 || cfg.Edge.Shards > maxEdgeShards {
		errs = append(errs, fmt.Errorf("edge.shards: must be between 0 (one group per object) and %d, got %d", maxEdgeShards, cfg.Edge.Shards))
	}
	if cfg.MinBodyRate < 0 {
		errs = append(errs, fmt.Errorf("min_body_rate: must not be negative (0 turns it off), got %d", cfg.MinBodyRate))
	}
	if cfg.MaxEventsPerRequest < 1 {
		errs = append(errs, fmt.Errorf("max_events_per_request: must be positive, got %d", cfg.MaxEventsPerRequest))
	}
	if need := cfg.largestRequest(); webhook && cfg.MaxEventsPerRequest >= 1 && cfg.MaxInFlightBytes < need {
		decoder := ""
		if name, n := costliestDecoder(cfg.ServerConfig.CompressionAlgorithms, cfg.bodyLimit()); n > 0 {
			decoder = fmt.Sprintf(", and a %s decoder, %d bytes: compression_algorithms", name, n)
		}
		errs = append(errs, fmt.Errorf("max_in_flight_bytes: %d is less than %d, what a body of max_request_body_size (%d bytes) with max_events_per_request (%d) events holds (its bytes and %d bytes per event%s): such a body could never be read",
			cfg.MaxInFlightBytes, need, cfg.bodyLimit(), cfg.MaxEventsPerRequest, auditconv.EventBytes, decoder))
	}
	if webhook {
		errs = append(errs, validateEncodings(cfg.ServerConfig.CompressionAlgorithms)...)
	}
	if cfg.PollInterval <= 0 {
		errs = append(errs, fmt.Errorf("poll_interval: must be positive, got %s", cfg.PollInterval))
	}
	if err := cfg.Conversion.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (cfg *Config) webhookEnabled() bool { return cfg.ServerConfig.NetAddr.Endpoint != "" }

// validateEncodings checks compression_algorithms: names confighttp decodes (it would fail on
// any other at the first request that sends it), and "" among them, for the apiserver's
// uncompressed batches. Null is confighttp's default, every encoding.
func validateEncodings(encodings []string) []error {
	if encodings == nil {
		return nil
	}
	var errs []error
	for i, e := range encodings {
		if !slices.Contains(knownEncodings, e) {
			errs = append(errs, fmt.Errorf("compression_algorithms[%d]: %q is not an encoding the webhook can decode (%q)", i, e, knownEncodings))
		}
	}
	if !slices.Contains(encodings, "") {
		errs = append(errs, errors.New(`compression_algorithms: must list "" (no Content-Encoding): the apiserver's webhook client sends its batches uncompressed, and each would be answered 400`))
	}
	return errs
}
