package k8seventsreceiver

import (
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/confmap"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubetrail/kubetrail/internal/k8sconfig"
	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/internal/retry"
)

// Config is the k8s_event_spans receiver's configuration.
type Config struct {
	// APIConfig holds the shared Kubernetes client keys (auth_type, context, kube_api_qps …) at
	// the receiver's top level, as contrib's Kubernetes receivers have them.
	APIConfig k8sconfig.APIConfig `mapstructure:",squash"`

	// Cluster is the k8s.cluster.name of every span; the Events API does not know it.
	Cluster string `mapstructure:"cluster"`
	// Namespaces restricts the watch to these namespaces; empty watches all of them.
	Namespaces []string `mapstructure:"namespaces"`
	// LabelSelector and FieldSelector are passed to the list-watch unchanged.
	LabelSelector string `mapstructure:"label_selector"`
	FieldSelector string `mapstructure:"field_selector"`

	// Storage names a storage extension that keeps the restart checkpoint. Without it a restart
	// falls back to max_event_age and may emit an occurrence twice or miss one.
	Storage *component.ID `mapstructure:"storage"`
	// MaxEventAge drops Events older than this on the first list when there is no checkpoint, so
	// a fresh collector does not replay the last hour of a cluster's history. 0 keeps them all.
	MaxEventAge time.Duration `mapstructure:"max_event_age"`

	// Window is the object-span window of the per-object trace and parent IDs this receiver
	// derives (docs/design.md, Windows). k8s_object_link re-derives both from its own window; keep the two
	// equal so traces look the same with or without the processor.
	Window time.Duration `mapstructure:"window"`
	// CheckpointTTL is how long an Event's checkpoint entry is kept after its last occurrence. It
	// must exceed the apiserver's --event-ttl (1h by default), or an Event still served after a
	// restart is taken for a new one.
	CheckpointTTL time.Duration `mapstructure:"checkpoint_ttl"`

	// SeriesQuiet is how long a repeating Event's series must go without a new occurrence
	// before its series span (first to last observation, with the count) is emitted.
	SeriesQuiet time.Duration `mapstructure:"series_quiet"`
	// SeriesMaxPending bounds the series waiting for their span; past it the least recently
	// active one is emitted early.
	SeriesMaxPending int `mapstructure:"series_max_pending"`

	// StalledWatchTimeout restarts a list-watch that delivered nothing, not even a bookmark, for
	// this long. The apiserver sends a bookmark about once a minute, so silence means a dead
	// connection that TCP has not noticed. 0 disables the guard.
	StalledWatchTimeout time.Duration `mapstructure:"stalled_watch_timeout"`
	// Backoff paces list-watch retries when the apiserver is unreachable or refuses, and retries
	// of batches the next consumer refused.
	Backoff BackoffConfig `mapstructure:"backoff"`

	// LeaderElection, when present, makes the replicas elect one leader through a Lease; only the
	// leader watches. Without it every replica is active and the derived span IDs make their
	// outputs identical (see README).
	LeaderElection configoptional.Optional[LeaderElectionConfig] `mapstructure:"leader_election"`

	// prevent unkeyed literal initialization
	_ struct{}
}

// BackoffConfig is an exponential backoff with a cap.
type BackoffConfig struct {
	InitialInterval time.Duration `mapstructure:"initial_interval"`
	MaxInterval     time.Duration `mapstructure:"max_interval"`
}

// exponential is a fresh run of the components' retry policy with these delays.
func (b BackoffConfig) exponential() wait.Backoff {
	return retry.Exponential(b.InitialInterval, b.MaxInterval)
}

// LeaderElectionConfig is the Lease the replicas compete for, with client-go's timing knobs.
type LeaderElectionConfig struct {
	LeaseName      string        `mapstructure:"lease_name"`
	LeaseNamespace string        `mapstructure:"lease_namespace"`
	LeaseDuration  time.Duration `mapstructure:"lease_duration"`
	RenewDeadline  time.Duration `mapstructure:"renew_deadline"`
	RetryPeriod    time.Duration `mapstructure:"retry_period"`
}

func defaultLeaderElectionConfig() LeaderElectionConfig {
	return LeaderElectionConfig{
		LeaseName:      "kubetrail-k8s-event-spans",
		LeaseNamespace: "default",
		LeaseDuration:  15 * time.Second,
		RenewDeadline:  10 * time.Second,
		RetryPeriod:    2 * time.Second,
	}
}

// renamedKeys are keys of earlier versions, each with the key that replaced it. The inline
// leader-election block was called k8s_leader_elector, the ID of a separate extension that
// works differently; a user who knew that extension would have misread it.
var renamedKeys = []struct{ old, current string }{
	{old: "k8s_leader_elector", current: "leader_election"},
}

var _ confmap.Unmarshaler = (*Config)(nil)

// Unmarshal refuses a renamed key with a message naming its new name, rather than the generic
// unknown-key error, then decodes the rest as usual.
func (c *Config) Unmarshal(conf *confmap.Conf) error {
	for _, k := range renamedKeys {
		if conf.IsSet(k.old) {
			return fmt.Errorf("%q was renamed to %q: move the block under %q", k.old, k.current, k.current)
		}
	}
	return conf.Unmarshal(c)
}

// Validate checks the configuration without touching the network.
func (c *Config) Validate() error {
	var errs []error
	if err := c.APIConfig.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Cluster == "" {
		errs = append(errs, errors.New("cluster must be set: Events do not carry the cluster name"))
	} else if err := model.ValidateClusterName(c.Cluster); err != nil {
		// The same rule as k8s_audit's, whose /audit/{cluster} path carries the name: spans of
		// one cluster must get the same k8s.cluster.name from both receivers.
		errs = append(errs, fmt.Errorf("cluster: %w", err))
	}
	seen := make(map[string]bool, len(c.Namespaces))
	for i, ns := range c.Namespaces {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("namespaces[%d] %q is not a namespace name: %s", i, ns, msgs[0]))
		}
		if seen[ns] {
			errs = append(errs, fmt.Errorf("namespaces[%d] %q is listed twice", i, ns))
		}
		seen[ns] = true
	}
	if _, err := labels.Parse(c.LabelSelector); err != nil {
		errs = append(errs, fmt.Errorf("label_selector: %w", err))
	}
	if _, err := fields.ParseSelector(c.FieldSelector); err != nil {
		errs = append(errs, fmt.Errorf("field_selector: %w", err))
	}
	if err := model.ValidateWindow(c.Window); err != nil {
		errs = append(errs, err)
	}
	if c.MaxEventAge < 0 {
		errs = append(errs, fmt.Errorf("max_event_age %s must not be negative (0 keeps every Event)", c.MaxEventAge))
	}
	if c.CheckpointTTL <= 0 {
		errs = append(errs, fmt.Errorf("checkpoint_ttl %s must be positive", c.CheckpointTTL))
	}
	if c.SeriesQuiet <= 0 {
		errs = append(errs, fmt.Errorf("series_quiet %s must be positive", c.SeriesQuiet))
	}
	if c.SeriesMaxPending < 1 {
		errs = append(errs, fmt.Errorf("series_max_pending %d must be at least 1", c.SeriesMaxPending))
	}
	if c.StalledWatchTimeout < 0 {
		errs = append(errs, fmt.Errorf("stalled_watch_timeout %s must not be negative (0 disables the guard)", c.StalledWatchTimeout))
	}
	if c.Backoff.InitialInterval <= 0 {
		errs = append(errs, fmt.Errorf("backoff.initial_interval %s must be positive", c.Backoff.InitialInterval))
	}
	if c.Backoff.MaxInterval < c.Backoff.InitialInterval {
		errs = append(errs, fmt.Errorf("backoff.max_interval %s must not be below backoff.initial_interval %s", c.Backoff.MaxInterval, c.Backoff.InitialInterval))
	}
	if le := c.LeaderElection.Get(); le != nil {
		errs = append(errs, le.validate())
	}
	return errors.Join(errs...)
}

func (le *LeaderElectionConfig) validate() error {
	var errs []error
	if le.LeaseName == "" {
		errs = append(errs, errors.New("leader_election.lease_name must be set"))
	}
	if msgs := validation.IsDNS1123Label(le.LeaseNamespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("leader_election.lease_namespace %q: %s", le.LeaseNamespace, msgs[0]))
	}
	// client-go's own constraints (leaderelection.NewLeaderElector), checked here so that a bad
	// value fails at config load rather than at start.
	if le.RetryPeriod <= 0 {
		errs = append(errs, fmt.Errorf("leader_election.retry_period %s must be positive", le.RetryPeriod))
	}
	if float64(le.RenewDeadline) <= 1.2*float64(le.RetryPeriod) {
		errs = append(errs, fmt.Errorf("leader_election.renew_deadline %s must exceed 1.2 × retry_period %s", le.RenewDeadline, le.RetryPeriod))
	}
	if le.LeaseDuration <= le.RenewDeadline {
		errs = append(errs, fmt.Errorf("leader_election.lease_duration %s must exceed renew_deadline %s", le.LeaseDuration, le.RenewDeadline))
	}
	return errors.Join(errs...)
}
