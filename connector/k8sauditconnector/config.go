package k8sauditconnector

import (
	"errors"
	"fmt"
	"time"

	"github.com/kubetrail/kubetrail/internal/auditconv"
	"github.com/kubetrail/kubetrail/internal/model"
)

// The formats a log record can be read as.
const (
	formatAuto   = "auto"
	formatNative = "native"
	formatAKS    = "aks"
	formatGKE    = "gke"
)

// minInFlightBytes is the least max_in_flight_bytes: room for a few decoded events.
const minInFlightBytes = 64 << 10

// Config configures the k8s_audit connector.
type Config struct {
	// Cluster names the cluster of every record, unless ClusterAttribute finds one.
	Cluster string `mapstructure:"cluster"`
	// ClusterAttribute names a log record attribute, or a resource attribute, that holds the
	// cluster: the name itself (GKE's k8s.cluster.name or cluster_name), an EKS log group
	// (/aws/eks/<cluster>/cluster) or an AKS resource ID (…/managedClusters/<cluster>), from
	// which the name is taken. A record where it is missing takes Cluster.
	ClusterAttribute string `mapstructure:"cluster_attribute"`
	// Format is how records are read: auto (detected per record), native, aks or gke.
	Format string `mapstructure:"format"`

	// DedupWindow is how long the auditID of an event converted and accepted downstream is
	// remembered, so that a redelivery (Kafka without a committed offset, an unacked Pub/Sub
	// message, an overlapping CloudWatch poll) becomes no second span. Zero turns it off.
	DedupWindow time.Duration `mapstructure:"dedup_window"`
	// DedupMaxBytes bounds the bytes of the remembered events (56 each, measured); the oldest
	// leave first.
	DedupMaxBytes int64 `mapstructure:"dedup_max_bytes"`

	// MaxInFlightBytes bounds the estimated memory of the audit events that the ConsumeLogs calls in
	// flight hold decoded (each event about 2 KiB, as the receiver's max_in_flight_bytes
	// counts them, plus map bodies encoded again). A call that alone would pass it converts what
	// fits and refuses the rest for good, counted as request_too_large; a call that finds it
	// spent by others is refused whole with a retryable error.
	MaxInFlightBytes int64 `mapstructure:"max_in_flight_bytes"`

	// Merge hands on the spans of concurrent calls together: one call of the next consumer
	// (one export, one ID-map round trip) for the calls that arrive while another is in flight.
	Merge MergeConfig `mapstructure:"merge"`

	// OffsetOrder converts the calls of one Kafka partition in offset order, for a kafka
	// receiver that runs several of a partition's messages at once.
	OffsetOrder OffsetOrderConfig `mapstructure:"offset_order"`

	// Conversion are the keys of the audit conversion (include_read_verbs, exclude_resources,
	// exclude_user_agents, diff_cache_size, diff_cache_max_bytes, redact_resources, redact_env_names,
	// redact_annotations, trace_context_annotation, window), shared with the k8s_audit receiver.
	Conversion auditconv.Settings `mapstructure:",squash"`

	// prevent unkeyed literal initialization
	_ struct{}
}

// MergeConfig configures how the spans of concurrent calls are handed on together.
type MergeConfig struct {
	// Enabled turns merging on. No call waits for others: only the calls that arrive while a
	// hand-off is in flight go on together, in the next one.
	Enabled bool `mapstructure:"enabled"`
	// MaxBytes bounds one merged hand-off by the calls' decoded estimate (as
	// max_in_flight_bytes counts it), so that an export stays within a backend's message
	// limit; a call over it goes on alone.
	MaxBytes int64 `mapstructure:"max_bytes"`

	// prevent unkeyed literal initialization
	_ struct{}
}

// OffsetOrderConfig configures how the calls that carry a Kafka offset are ordered.
type OffsetOrderConfig struct {
	// MaxWait is how long a call waits for the offsets below it in its partition before it
	// converts without them; zero turns the ordering off.
	MaxWait time.Duration `mapstructure:"max_wait"`

	// prevent unkeyed literal initialization
	_ struct{}
}

// maxOffsetOrderWait bounds offset_order.max_wait: a call that waits holds its decoded events
// and its partition's next message.
const maxOffsetOrderWait = 10 * time.Second

// Validate checks the configuration.
func (cfg *Config) Validate() error {
	var errs []error
	if cfg.Cluster == "" && cfg.ClusterAttribute == "" {
		errs = append(errs, errors.New("cluster: required when cluster_attribute is not set (log records do not name their cluster)"))
	}
	if cfg.Cluster != "" && !model.ValidClusterName(cfg.Cluster) {
		errs = append(errs, fmt.Errorf("cluster: %q is not a valid cluster name (1-63 letters, digits, '.', '_' or '-', starting and ending with a letter or digit)", cfg.Cluster))
	}
	switch cfg.Format {
	case formatAuto, formatNative, formatAKS, formatGKE:
	default:
		errs = append(errs, fmt.Errorf("format: must be one of auto, native, aks, gke; got %q", cfg.Format))
	}
	if cfg.DedupWindow < 0 {
		errs = append(errs, fmt.Errorf("dedup_window: must not be negative, got %s", cfg.DedupWindow))
	}
	if cfg.DedupWindow > 0 && cfg.DedupMaxBytes <= 0 {
		errs = append(errs, fmt.Errorf("dedup_max_bytes: must be positive while dedup_window is, got %d (dedup_window: 0 turns deduplication off)", cfg.DedupMaxBytes))
	}
	if cfg.MaxInFlightBytes < minInFlightBytes {
		errs = append(errs, fmt.Errorf("max_in_flight_bytes: must be at least %d (a few events), got %d", minInFlightBytes, cfg.MaxInFlightBytes))
	}
	if cfg.Merge.Enabled && cfg.Merge.MaxBytes <= 0 {
		errs = append(errs, fmt.Errorf("merge.max_bytes: must be positive while merge.enabled is true, got %d", cfg.Merge.MaxBytes))
	}
	if cfg.OffsetOrder.MaxWait < 0 || cfg.OffsetOrder.MaxWait > maxOffsetOrderWait {
		errs = append(errs, fmt.Errorf("offset_order.max_wait: must be between 0 (off) and %s, got %s", maxOffsetOrderWait, cfg.OffsetOrder.MaxWait))
	}
	if err := cfg.Conversion.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
