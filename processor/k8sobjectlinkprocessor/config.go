package k8sobjectlinkprocessor

import (
	"errors"
	"fmt"
	"regexp"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/config/configoptional"

	"github.com/kubetrail/kubetrail/internal/k8sconfig"
	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/internal/redisconf"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/idmap"
)

// defaultMaxSpansPerTrace and minMaxSpansPerTrace: see Config.MaxSpansPerTrace. Below 100 spans
// a Deployment's rollout would be cut into pieces too small to read.
const (
	defaultMaxSpansPerTrace = 1500
	minMaxSpansPerTrace     = 100
)

// defaultDuplicateTTL covers every redelivery kubetrail knows of with room to spare (docs/design.md,
// Duplicates): the apiserver's webhook retries (about 81 s), a Kafka partition read again after a
// rebalance (seconds), an Events relist without checkpoint (k8s_event_spans' max_event_age, 5
// minutes) and the otlp exporter's retries between collectors (max_elapsed_time, 5 minutes).
// minDuplicateTTL is the webhook's retries.
const (
	defaultDuplicateTTL = 10 * time.Minute
	minDuplicateTTL     = 2 * time.Minute
)

// Backend names of the ID map.
const (
	BackendMemory = idmap.BackendMemory
	BackendRedis  = idmap.BackendRedis
)

// Redis deployment modes.
const (
	RedisModeAuto       = redisconf.ModeAuto
	RedisModeStandalone = redisconf.ModeStandalone
	RedisModeSentinel   = redisconf.ModeSentinel
	RedisModeCluster    = redisconf.ModeCluster
)

// Config is the k8s_object_link processor's configuration.
type Config struct {
	// Window is the length of an object span; windows are aligned to the Unix epoch.
	Window time.Duration `mapstructure:"window"`
	// Grace extends every window-scoped record's life past the end of the following window, for
	// spans that arrive late (audit webhook batching, slow Event delivery).
	Grace time.Duration `mapstructure:"grace"`
	// RelationTTL is how long an object → owner relation and a name → UID entry live after they
	// were last seen. Ownership outlives windows, so this is longer than a window.
	RelationTTL time.Duration `mapstructure:"relation_ttl"`
	// RelationTTLAfterDelete is how long they live instead once an audit span shows the object
	// deleted (a delete the apiserver carried out): long enough for the spans that come after it
	// (its Events, a retried webhook batch), short enough that a cluster's churn of objects does
	// not fill the ID map for relation_ttl. At most relation_ttl.
	RelationTTLAfterDelete time.Duration `mapstructure:"relation_ttl_after_delete"`
	// DuplicateTTL is how long an audit or Event span's duplicate mark is kept, so that the same
	// span arriving again (a webhook retry, a Kafka message read again, an Events relist, an
	// exporter's retry) is recognised and dropped. It bounds how late a redelivery can come, not
	// how late a span can come: marks are by far the ID map's most numerous records (one per
	// span), so this decides what they cost in memory and in Redis.
	DuplicateTTL time.Duration `mapstructure:"duplicate_ttl"`
	// IDMap is where assignments, relations, the name index and the dedup marks are kept.
	IDMap IDMapConfig `mapstructure:"id_map"`
	// OwnerLookup enables a metadata-only GET against the apiserver for objects whose owner no
	// span and no relation record names. Absent means off.
	OwnerLookup configoptional.Optional[OwnerLookupConfig] `mapstructure:"owner_lookup"`
	// OwnerWait is how long a span whose object's owner is still unknown is held back, in case
	// a span naming the owner is in flight. 0 disables holding.
	OwnerWait time.Duration `mapstructure:"owner_wait"`
	// MaxHeldSpans bounds the spans held for owner_wait; beyond it spans are released at once.
	MaxHeldSpans int `mapstructure:"max_held_spans"`
	// Storage names a storage extension (e.g. file_storage) where the spans the next consumer
	// still refuses at shutdown (held spans, owed object spans) are kept for the next start.
	// Without it they are lost and counted; with a persistent exporter queue that is full at
	// shutdown (backend down), this is what keeps every acknowledged span.
	Storage *component.ID `mapstructure:"storage"`

	// MaxSpansPerTrace bounds the spans one trace gets (a window of a root object and everything
	// it owns); past it the trace continues in a linked one (docs/design.md, Big objects). 0: no
	// bound.
	MaxSpansPerTrace int `mapstructure:"max_spans_per_trace"`

	// APIServerJoin links the apiserver's own request spans with the audit spans of the same
	// audit ID (join.go).
	APIServerJoin APIServerJoinConfig `mapstructure:"apiserver_join"`

	// TraceContext says what a trace context does to the spans it reaches: the annotation
	// trace.kubernetes.io/context on a root object, and the kubetrail trace-state member of a
	// controller's spans (trace_context.go).
	TraceContext TraceContextConfig `mapstructure:"trace_context"`

	// Doors says which spans may write the trail (docs/design.md, Doors): spans kubetrail's own
	// receivers and connector hand on in this collector always may; the spans of any other door
	// (an otlp receiver) only through a trusted hop, and otherwise only follow.
	Doors DoorsConfig `mapstructure:"doors"`
}

// DoorsConfig is what the processor trusts beyond kubetrail's own receivers and connector in the
// same collector: see Config.Doors.
type DoorsConfig struct {
	// TrustedHop trusts the spans of a request that carries the header TrustedHop.Header with
	// the value TrustedHop.Secret: an OTLP hop between kubetrail collectors (agents exporting
	// their receivers' spans to a gateway, over mTLS). Off while Secret is empty.
	TrustedHop TrustedHopConfig `mapstructure:"trusted_hop"`
	// FollowWindows is how many windows before the current one a span of an untrusted door may
	// name and still follow its object's assignment; a window after the next one never does.
	FollowWindows int `mapstructure:"follow_windows"`
	// MaxWaitingSpans bounds the spans of untrusted doors waiting (owner_wait at most) for their
	// object's assignment, apart from the owner hold (max_held_spans); past it they pass as
	// they came.
	MaxWaitingSpans int `mapstructure:"max_waiting_spans"`
	// Identity places the spans of other components that name an object by the semantic
	// conventions (k8s.pod.uid, …): the kubelet's pod syncs under the Pod's span.
	Identity IdentityConfig `mapstructure:"identity"`
}

// IdentityConfig is which spans of untrusted doors follow an object they name by the semantic
// conventions' k8s.<kind>.uid (doors.go): see DoorsConfig.Identity.
type IdentityConfig struct {
	// Services are the service.name values whose spans are placed; none: off.
	Services []string `mapstructure:"services"`
	// Cluster is the k8s.cluster.name of spans whose span and Resource carry none: a kubelet
	// knows no cluster name. Empty: such spans pass as they came.
	Cluster string `mapstructure:"cluster"`
	// MaxTraces bounds the traces remembered as moved, so that their spans of later batches
	// follow; the oldest is forgotten first.
	MaxTraces int `mapstructure:"max_traces"`
	// Wait is how long such a span may wait in the guests' hold for its object's assignment or,
	// naming no object, for its trace's root to be placed: a kubelet exports a sync's CRI calls
	// as they end, seconds before the sync itself. 0: owner_wait. owner_wait 0 holds nothing.
	Wait time.Duration `mapstructure:"wait"`
}

// TrustedHopConfig names the header and the secret of a trusted OTLP hop.
type TrustedHopConfig struct {
	Header string              `mapstructure:"header"`
	Secret configopaque.String `mapstructure:"secret"`
}

// TraceContextConfig is what trace contexts do to spans: see Config.TraceContext.
type TraceContextConfig struct {
	// LinkSpans gives a span of another door that links to a trace context an object carries
	// (KEP-5915's semantics) a linked span under the object's span (linked.go).
	LinkSpans bool `mapstructure:"link_spans"`
	// Nest places the window of a root object whose write carries a trace-context annotation in
	// that trace, under the annotated span, instead of a trace of its own that links to it.
	Nest bool `mapstructure:"nest"`
	// NestFor is how long after the processor first saw a context it still nests windows: a
	// context left on an object after its deploy must not pull every later window into the
	// deploy's trace. Later windows link to it only.
	NestFor time.Duration `mapstructure:"nest_for"`
	// FollowTraceState moves spans carrying the kubetrail trace-state member (a controller's
	// spans started with pkg/objecttrace, and the apiserver's spans of its requests) into the
	// trace of the object the member names.
	FollowTraceState bool `mapstructure:"follow_trace_state"`
}

// APIServerJoinConfig bounds the map in which the first span of an apiserver request / audit
// pair waits for the second.
type APIServerJoinConfig struct {
	Enabled bool `mapstructure:"enabled"`
	// TTL is how long the first side waits.
	TTL        time.Duration `mapstructure:"ttl"`
	MaxEntries int           `mapstructure:"max_entries"`
	MaxBytes   int64         `mapstructure:"max_bytes"`
}

// The ID map's configuration (id_map) is its package's (internal/idmap), named here as well so
// that the processor's configuration reads as one.
type (
	// IDMapConfig selects and configures the ID map backend.
	IDMapConfig = idmap.Config
	// MemoryConfig bounds the in-memory ID map (and the cache in front of Redis).
	MemoryConfig = idmap.MemoryConfig
	// RedisConfig is the shared ID map. One address is a standalone server, several are a
	// Cluster, and a sentinel_master_name makes them Sentinels.
	RedisConfig = idmap.RedisConfig
)

// OwnerLookupConfig is the apiserver client for owner look-ups.
type OwnerLookupConfig struct {
	APIConfig k8sconfig.APIConfig `mapstructure:",squash"`
	// Cluster is the k8s.cluster.name of the cluster this client's apiserver serves. Only
	// objects of that cluster are looked up: a gateway receiving several clusters must never ask
	// one cluster's apiserver about another's objects (a namesake there would answer wrongly).
	Cluster string `mapstructure:"cluster"`
	// CacheTTL is how long a look-up answer (including "not found") is reused.
	CacheTTL time.Duration `mapstructure:"cache_ttl"`
	// Timeout bounds one GET.
	Timeout time.Duration `mapstructure:"timeout"`
	// Resources, when set, are the only resources whose objects are looked up, as
	// "resource" (core group) or "resource.group" (e.g. pods, replicasets.apps): those the
	// client's RBAC grants get on. Empty: every resource, and a resource the apiserver forbids is
	// not asked again for cache_ttl (a warning names it once).
	Resources []string `mapstructure:"resources"`
}

// resourceName is a resource with its API group, as RBAC and kubectl write them: a DNS label,
// then the group's DNS labels if any (pods, replicasets.apps, leases.coordination.k8s.io).
var resourceName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

func createDefaultConfig() *Config {
	return &Config{
		Window:      model.DefaultWindow,
		Grace:       5 * time.Minute,
		RelationTTL: 24 * time.Hour,
		// The spans about an object that follow its deletion come within duplicate_ttl's
		// reasoning: its Events (a relist, 5 minutes), the webhook's and exporters' retries.
		RelationTTLAfterDelete: 10 * time.Minute,
		DuplicateTTL:           defaultDuplicateTTL,
		OwnerWait:              2 * time.Second,
		MaxHeldSpans:           10000,
		// About 3 MB of OTLP at the 1.7–2.1 KB a span of the recorded scenarios takes (protobuf,
		// diffs and snapshots included): within Tempo's default max_bytes_per_trace (5 MB) with
		// room for the overshoot of one webhook batch per replica, and a trace Jaeger's UI draws.
		MaxSpansPerTrace: defaultMaxSpansPerTrace,
		APIServerJoin:    APIServerJoinConfig{Enabled: false, TTL: 2 * time.Minute, MaxEntries: 50_000, MaxBytes: 16 << 20},
		TraceContext:     TraceContextConfig{Nest: true, NestFor: time.Hour, FollowTraceState: true, LinkSpans: true},
		Doors: DoorsConfig{
			TrustedHop:      TrustedHopConfig{Header: "x-kubetrail-door"},
			FollowWindows:   2,
			MaxWaitingSpans: 10000,
			Identity:        IdentityConfig{Services: []string{"kubelet"}, MaxTraces: 10000, Wait: 10 * time.Second},
		},
		IDMap: idmap.DefaultConfig(),
		OwnerLookup: configoptional.Default(OwnerLookupConfig{
			APIConfig: k8sconfig.DefaultAPIConfig(),
			CacheTTL:  5 * time.Minute,
			Timeout:   2 * time.Second,
		}),
	}
}

// Validate checks the configuration without touching the network.
func (c *Config) Validate() error {
	if err := model.ValidateWindow(c.Window); err != nil {
		return err
	}
	if c.Grace < 0 {
		return fmt.Errorf("grace must not be negative, got %s", c.Grace)
	}
	if c.RelationTTL < c.Window {
		return fmt.Errorf("relation_ttl (%s) must be at least window (%s): ownership outlives a window", c.RelationTTL, c.Window)
	}
	if c.RelationTTLAfterDelete <= 0 || c.RelationTTLAfterDelete > c.RelationTTL {
		return fmt.Errorf("relation_ttl_after_delete must be positive and at most relation_ttl (%s), got %s", c.RelationTTL, c.RelationTTLAfterDelete)
	}
	if c.DuplicateTTL < minDuplicateTTL {
		return fmt.Errorf("duplicate_ttl must be at least %s (the apiserver's webhook retries take about 81 s), got %s", minDuplicateTTL, c.DuplicateTTL)
	}
	if c.OwnerWait < 0 {
		return fmt.Errorf("owner_wait must not be negative, got %s", c.OwnerWait)
	}
	if c.MaxSpansPerTrace != 0 && c.MaxSpansPerTrace < minMaxSpansPerTrace {
		return fmt.Errorf("max_spans_per_trace must be 0 (no bound) or at least %d, got %d", minMaxSpansPerTrace, c.MaxSpansPerTrace)
	}
	if c.MaxHeldSpans < 0 {
		return fmt.Errorf("max_held_spans must not be negative, got %d", c.MaxHeldSpans)
	}
	if j := c.APIServerJoin; j.Enabled && (j.TTL <= 0 || j.MaxEntries <= 0 || j.MaxBytes <= 0) {
		return fmt.Errorf("apiserver_join.ttl, apiserver_join.max_entries and apiserver_join.max_bytes must be positive, got %s, %d, %d", j.TTL, j.MaxEntries, j.MaxBytes)
	}
	if t := c.TraceContext; t.Nest && t.NestFor <= 0 {
		return fmt.Errorf("trace_context.nest_for must be positive when trace_context.nest is on, got %s", t.NestFor)
	}
	if err := c.Doors.validate(); err != nil {
		return err
	}
	if err := c.IDMap.Check(); err != nil {
		return err
	}
	if l := c.OwnerLookup.Get(); l != nil {
		if err := l.APIConfig.Validate(); err != nil {
			return fmt.Errorf("owner_lookup: %w", err)
		}
		if l.Cluster == "" {
			return errors.New("owner_lookup.cluster must be set: the k8s.cluster.name of the cluster whose apiserver owner_lookup reaches (spans of other clusters are never looked up)")
		}
		if err := model.ValidateClusterName(l.Cluster); err != nil {
			return fmt.Errorf("owner_lookup.cluster: %w", err)
		}
		if l.CacheTTL <= 0 || l.Timeout <= 0 {
			return errors.New("owner_lookup.cache_ttl and owner_lookup.timeout must be positive")
		}
		for _, r := range l.Resources {
			if !resourceName.MatchString(r) {
				return fmt.Errorf("owner_lookup.resources: %q is not a resource (pods) or resource.group (replicasets.apps) in lower case", r)
			}
		}
	}
	return nil
}

// minHopSecretBytes: a secret shorter than this could be guessed by a sender of the untrusted
// door, which sees each refusal only as its spans not nesting.
const minHopSecretBytes = 16

func (d *DoorsConfig) validate() error {
	if d.FollowWindows < 0 || d.FollowWindows > 48 {
		return fmt.Errorf("doors.follow_windows must be between 0 and 48, got %d", d.FollowWindows)
	}
	if d.MaxWaitingSpans < 0 {
		return fmt.Errorf("doors.max_waiting_spans must not be negative, got %d", d.MaxWaitingSpans)
	}
	if id := d.Identity; len(id.Services) > 0 {
		if id.Wait < 0 {
			return fmt.Errorf("doors.identity.wait must not be negative, got %s", id.Wait)
		}
		if id.MaxTraces <= 0 {
			return fmt.Errorf("doors.identity.max_traces must be positive when doors.identity.services names any, got %d", id.MaxTraces)
		}
		for _, s := range id.Services {
			if s == "" {
				return errors.New("doors.identity.services: a service name must not be empty")
			}
		}
		if id.Cluster != "" {
			if err := model.ValidateClusterName(id.Cluster); err != nil {
				return fmt.Errorf("doors.identity.cluster: %w", err)
			}
		}
	}
	if h := d.TrustedHop; h.Secret != "" {
		if h.Header == "" {
			return errors.New("doors.trusted_hop.header must name a header when doors.trusted_hop.secret is set")
		}
		if len(h.Secret) < minHopSecretBytes {
			return fmt.Errorf("doors.trusted_hop.secret must be at least %d bytes", minHopSecretBytes)
		}
	}
	return nil
}
