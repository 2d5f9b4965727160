package auditconv

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/collector/config/configoptional"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/internal/redisconf"
)

// Settings are the conversion keys of every k8s_audit component (receiver and connector).
// Each component's Config holds them as one field squashed into its top level, so the keys,
// their defaults and their validation are the same wherever audit events come in.
type Settings struct {
	// IncludeReadVerbs turns get, list and watch requests into spans too.
	IncludeReadVerbs bool `mapstructure:"include_read_verbs"`
	// ExcludeResources are resources whose audit events never become spans.
	ExcludeResources []GroupResource `mapstructure:"exclude_resources"`
	// ExcludeUserAgents are user-agent prefixes whose audit events never become spans.
	ExcludeUserAgents []string `mapstructure:"exclude_user_agents"`

	// DiffCacheSize is the number of objects whose last body is kept for k8s.object.diff.
	// Zero turns diffs (and conflict links) off.
	DiffCacheSize int `mapstructure:"diff_cache_size"`
	// DiffCacheMaxBytes bounds the estimated bytes of that cache too (bodies differ a
	// thousandfold in size); least recently used objects leave first.
	DiffCacheMaxBytes int64 `mapstructure:"diff_cache_max_bytes"`
	// RedactResources are resources whose data and stringData values, and whose
	// last-applied-configuration annotation, are never exported.
	RedactResources []GroupResource `mapstructure:"redact_resources"`
	// RedactEnvNames is a regular expression of environment variable names: the literal value
	// of every env entry whose name it matches (in a Pod, a pod template, any env list) is
	// never exported. Empty: env values are exported as written; ".*": no literal env value is.
	RedactEnvNames string `mapstructure:"redact_env_names"`
	// RedactAnnotations are regular expressions of annotation keys: the value of an object
	// annotation whose key one of them matches is never exported.
	RedactAnnotations []string `mapstructure:"redact_annotations"`

	// TraceContextAnnotations are the object annotations whose W3C traceparent values link a
	// write's audit span to the traces that asked for it, in the order the links are made (the
	// first link is the context a root object's window may be placed in). For each key K, K.0
	// to K.7 carry further contexts; a key named …/traceparent has its tracestate in
	// …/tracestate (and …/tracestate.N). Default: KEP-5915's tracing.k8s.io/traceparent, then
	// the older trace.kubernetes.io/context.
	TraceContextAnnotations []string `mapstructure:"trace_context_annotations"`
	// TraceContextAnnotation is deprecated: a key read after TraceContextAnnotations' (when not
	// among them). It was the only key before KEP-5915.
	TraceContextAnnotation string `mapstructure:"trace_context_annotation"`

	// SharedDiffBase, when set, shares each object's last body among replicas through Redis,
	// so that N replicas behind one address diff every write as one collector would.
	SharedDiffBase configoptional.Optional[SharedDiffBase] `mapstructure:"shared_diff_base"`

	// Window is the object-span window; it must equal the k8s_object_link processor's window so
	// that both derive the same IDs.
	Window time.Duration `mapstructure:"window"`
}

const (
	defaultDiffCacheSize = 100_000
	// 64 MiB holds 20,000–26,000 live Pods (a body of 1.7–2.5 KB as JSON without managedFields,
	// and about 0.85 KB for the entry and its last 8 writes, BenchmarkHistoryMemory), and keeps
	// a component within the memory of a small collector however large the objects: 1,200
	// ConfigMaps near etcd's 1.5 MiB limit took the count-bounded cache alone to 3.26 GB.
	defaultDiffCacheMaxBytes = 64 << 20

	// DefaultRedactEnvNames matches the names credentials are given (DB_PASSWORD, API_TOKEN,
	// AWS_SECRET_ACCESS_KEY, TLS_PRIVATE_KEY, BASIC_AUTH, CLIENT_CERT, ...) anywhere in the name,
	// whatever the case. It also matches some harmless names (SSL_CERT_DIR, AUTHOR): a value
	// masked by mistake costs a reader one value, a credential exported costs the credential.
	DefaultRedactEnvNames = `(?i)(pass|secret|token|key|credential|auth|cert|private)`
	// DefaultRedactAnnotation matches annotation keys whose name (the part after the prefix's
	// slash) holds one of the same words: example.com/api-token, checksum/secret,
	// vault.hashicorp.com/agent-inject-secret-db; not cert-manager.io/issuer, whose prefix only
	// holds one.
	DefaultRedactAnnotation = `(?i)(pass|secret|token|key|credential|auth|cert|private)[^/]*$`
)

// DefaultSettings are the defaults of the conversion keys.
func DefaultSettings() Settings {
	return Settings{
		// Leases are renewed every few seconds by every node and controller and Events are
		// the narration of the k8s_event_spans receiver: as audit spans both are pure noise.
		ExcludeResources: []GroupResource{
			{Group: "coordination.k8s.io", Resource: "leases"},
			{Group: "", Resource: "events"},
			{Group: "events.k8s.io", Resource: "events"},
		},
		DiffCacheSize:           defaultDiffCacheSize,
		DiffCacheMaxBytes:       defaultDiffCacheMaxBytes,
		RedactResources:         []GroupResource{{Group: "", Resource: "secrets"}},
		RedactEnvNames:          DefaultRedactEnvNames,
		RedactAnnotations:       []string{DefaultRedactAnnotation},
		Window:                  model.DefaultWindow,
		TraceContextAnnotations: model.DefaultTraceContextAnnotations(),
		SharedDiffBase:          configoptional.Default(defaultSharedDiffBase()),
	}
}

// maxTraceContextKeys bounds trace_context_annotations: each key is matched against every
// annotation of every body read.
const maxTraceContextKeys = 8

// traceContextKeys are the keys read, in their order: trace_context_annotations, then the
// deprecated trace_context_annotation when it is not among them.
func (s *Settings) traceContextKeys() []string {
	keys := slices.Clone(s.TraceContextAnnotations)
	if s.TraceContextAnnotation != "" && !slices.Contains(keys, s.TraceContextAnnotation) {
		keys = append(keys, s.TraceContextAnnotation)
	}
	return keys
}

// Validate checks the conversion keys; each error names its key.
func (s *Settings) Validate() error {
	var errs []error
	for i, gr := range s.ExcludeResources {
		if err := gr.validate(); err != nil {
			errs = append(errs, fmt.Errorf("exclude_resources[%d]: %w", i, err))
		}
	}
	for i, gr := range s.RedactResources {
		if err := gr.validate(); err != nil {
			errs = append(errs, fmt.Errorf("redact_resources[%d]: %w", i, err))
		}
	}
	if _, err := regexp.Compile(s.RedactEnvNames); err != nil {
		errs = append(errs, fmt.Errorf("redact_env_names: %w", err))
	}
	for i, p := range s.RedactAnnotations {
		if p == "" {
			errs = append(errs, fmt.Errorf("redact_annotations[%d]: an empty pattern would match every annotation (write \".\" if that is meant)", i))
		} else if _, err := regexp.Compile(p); err != nil {
			errs = append(errs, fmt.Errorf("redact_annotations[%d]: %w", i, err))
		}
	}
	for i, ua := range s.ExcludeUserAgents {
		if ua == "" {
			errs = append(errs, fmt.Errorf("exclude_user_agents[%d]: an empty prefix would exclude every event", i))
		}
	}
	if s.DiffCacheSize < 0 {
		errs = append(errs, fmt.Errorf("diff_cache_size: must not be negative, got %d", s.DiffCacheSize))
	}
	if s.DiffCacheSize > 0 && s.DiffCacheMaxBytes <= 0 {
		errs = append(errs, fmt.Errorf("diff_cache_max_bytes: must be positive while diff_cache_size is, got %d (diff_cache_size: 0 turns diffs off)", s.DiffCacheMaxBytes))
	}
	if sh := s.SharedDiffBase.Get(); sh != nil {
		if s.DiffCacheSize == 0 {
			errs = append(errs, errors.New("shared_diff_base: diffs are off (diff_cache_size: 0), there is no base to share"))
		} else if err := sh.validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := model.ValidateWindow(s.Window); err != nil {
		errs = append(errs, err)
	}
	for i, k := range s.TraceContextAnnotations {
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("trace_context_annotations[%d]: %q is not an annotation key: %s", i, k, strings.Join(msgs, "; ")))
		}
	}
	if len(s.TraceContextAnnotations) > maxTraceContextKeys {
		errs = append(errs, fmt.Errorf("trace_context_annotations: %d keys, at most %d", len(s.TraceContextAnnotations), maxTraceContextKeys))
	}
	if s.TraceContextAnnotation != "" {
		if msgs := validation.IsQualifiedName(s.TraceContextAnnotation); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("trace_context_annotation: %q is not an annotation key: %s", s.TraceContextAnnotation, strings.Join(msgs, "; ")))
		}
	}
	return errors.Join(errs...)
}

// GroupResource names an API resource. Resource "*" matches every resource of the group; a
// resource with a subresource ("pods/status") matches only that subresource.
type GroupResource struct {
	Group    string `mapstructure:"group"`
	Resource string `mapstructure:"resource"`
}

func (gr GroupResource) String() string {
	if gr.Group == "" {
		return gr.Resource
	}
	return gr.Resource + "." + gr.Group
}

func (gr GroupResource) validate() error {
	if gr.Resource == "" {
		return errors.New("resource: empty (use \"*\" for every resource of the group)")
	}
	if strings.Count(gr.Resource, "/") > 1 || strings.HasPrefix(gr.Resource, "/") || strings.HasSuffix(gr.Resource, "/") {
		return fmt.Errorf("resource: %q must be a resource or resource/subresource", gr.Resource)
	}
	if strings.Contains(gr.Group, "/") {
		return fmt.Errorf("group: %q is a group, not an apiVersion (leave the version out)", gr.Group)
	}
	return nil
}

// SharedDiffBase shares the last body of each object among the replicas of a gateway through
// Redis, so that a write is diffed against the body its predecessor left whichever replica
// received that predecessor (shared_diff_base).
type SharedDiffBase struct {
	Redis redisconf.Config `mapstructure:"redis"`
	// MaxRecordBytes bounds one shared body, compressed: a larger body is kept by the replica
	// that saw it and not shared.
	MaxRecordBytes int `mapstructure:"max_record_bytes"`
}

// defaultMaxRecordBytes holds a compressed body of several hundred KB of JSON: a large
// ConfigMap is not shared, every Pod and Deployment is (1–3 KB before compression).
const defaultMaxRecordBytes = 64 << 10

func defaultSharedDiffBase() SharedDiffBase {
	return SharedDiffBase{Redis: redisconf.Default(), MaxRecordBytes: defaultMaxRecordBytes}
}

func (s *SharedDiffBase) validate() error {
	if err := s.Redis.Check("shared_diff_base.redis"); err != nil {
		return err
	}
	if s.MaxRecordBytes <= 0 {
		return fmt.Errorf("shared_diff_base.max_record_bytes must be positive, got %d", s.MaxRecordBytes)
	}
	return nil
}
