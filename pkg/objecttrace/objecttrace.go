package objecttrace

import (
	"context"
	"os"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kubetrail/kubetrail/internal/objid"
)

// ScopeName is the instrumentation scope of the spans a Tracer starts.
const ScopeName = "github.com/kubetrail/kubetrail/pkg/objecttrace"

// Environment variables that give the defaults of WithCluster and WithWindow, so that a
// controller deployed beside kubetrail's collector takes the same settings as the collector.
const (
	// EnvCluster names the cluster, as the collector's cluster setting does.
	EnvCluster = "KUBETRAIL_CLUSTER"
	// EnvWindow is the size of the object windows, a Go duration such as "30m", as the
	// k8s_object_link processor's window setting.
	EnvWindow = "KUBETRAIL_WINDOW"
)

// DefaultWindow is the window size when neither WithWindow nor KUBETRAIL_WINDOW gives one: the
// default of the k8s_object_link processor's window.
const DefaultWindow = 30 * time.Minute

// DefaultControllerName is the controller name when WithControllerName does not give one.
const DefaultControllerName = "controller"

// Span attribute names and values a Tracer sets (docs/span-model.md, Controller span); the
// same names as internal/model's, which this package may not import (it pulls collector modules).
const (
	attrSpanType         = "kubetrail.span.type"
	spanTypeController   = "controller"
	attrControllerName   = "kubetrail.controller.name"
	attrLinkType         = "kubetrail.link.type"
	linkTypeCaller       = "caller"
	attrClusterName      = "k8s.cluster.name"
	attrObjectAPIGroup   = "k8s.object.api_group"
	attrObjectAPIVersion = "k8s.object.api_version"
	attrObjectKind       = "k8s.object.kind"
	attrObjectResource   = "k8s.object.resource"
	attrNamespaceName    = "k8s.namespace.name"
	attrObjectName       = "k8s.object.name"
	attrObjectUID        = "k8s.object.uid"
	attrObjectGeneration = "k8s.object.generation"
	attrOwnerAPIVersion  = "k8s.object.owner.api_version"
	attrOwnerKind        = "k8s.object.owner.kind"
	attrOwnerName        = "k8s.object.owner.name"
	attrOwnerUID         = "k8s.object.owner.uid"
)

// Tracer starts spans of a controller's work on Kubernetes objects. Create it with New; it is
// safe for concurrent use.
type Tracer struct {
	tracer     trace.Tracer
	cluster    string
	window     time.Duration
	controller string
	now        func() time.Time
}

// Option configures a Tracer.
type Option interface {
	apply(*config)
}

type config struct {
	tp         trace.TracerProvider
	cluster    *string
	window     time.Duration
	controller string
	// now is the clock that picks the window: time.Now; the tests set another.
	now func() time.Time
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithTracerProvider sets the provider of the Tracer's spans; the default is the global one
// (otel.GetTracerProvider at New).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) { c.tp = tp })
}

// WithCluster sets the cluster name, which must equal the cluster setting of the kubetrail
// collector that traces the cluster: it is part of the derived IDs. The default is the
// environment variable KUBETRAIL_CLUSTER, else "".
func WithCluster(name string) Option {
	return optionFunc(func(c *config) { c.cluster = &name })
}

// WithWindow sets the size of the object windows, which must equal the window setting of the
// collector's k8s_object_link processor. The default is the environment variable
// KUBETRAIL_WINDOW (a Go duration); when it is unset, unparsable or not positive, 30 minutes. A
// non-positive size is ignored.
func WithWindow(size time.Duration) Option {
	return optionFunc(func(c *config) {
		if size > 0 {
			c.window = size
		}
	})
}

// WithControllerName sets the name of the controller, which every span carries in
// kubetrail.controller.name; the default is "controller". Give each controller its own.
func WithControllerName(name string) Option {
	return optionFunc(func(c *config) {
		if name != "" {
			c.controller = name
		}
	})
}

// WithObjectResource is a span start option for StartSpanFromObject that records the object's
// Kubernetes resource, the plural name in its API path ("configmaps"), in k8s.object.resource,
// which the object does not tell. It is not an OpenTelemetry Resource: the spans' Resource is the
// provider's, the controller's own.
func WithObjectResource(resource string) trace.SpanStartOption {
	return trace.WithAttributes(attribute.String(attrObjectResource, resource))
}

// New returns a Tracer with the given options. The environment variables KUBETRAIL_CLUSTER and
// KUBETRAIL_WINDOW are read here, once.
func New(opts ...Option) *Tracer {
	c := config{controller: DefaultControllerName, now: time.Now}
	for _, o := range opts {
		o.apply(&c)
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.cluster == nil {
		cluster := os.Getenv(EnvCluster)
		c.cluster = &cluster
	}
	if c.window <= 0 {
		c.window = DefaultWindow
		if d, err := time.ParseDuration(os.Getenv(EnvWindow)); err == nil && d > 0 {
			c.window = d
		}
	}
	return &Tracer{
		tracer:     c.tp.Tracer(ScopeName, trace.WithInstrumentationVersion(Version())),
		cluster:    *c.cluster,
		window:     c.window,
		controller: c.controller,
		now:        c.now,
	}
}

// StartSpanFromObject starts a span named name (keep it low-cardinality: "reconcile") for the
// controller's work on obj, and returns it with a context holding it; end the span when the work
// is done, and use the context for the work's requests and child spans.
//
// The span is a child of obj's object span in obj's per-object trace of the current window, and
// is sampled unless the provider's sampler ignores a sampled parent. Its trace state holds the
// kubetrail member naming obj, which its descendants inherit. It carries obj's identity (group,
// version and kind from gvk, namespace, name, UID, generation, controlling owner) and the
// controller's name; when ctx already holds a valid span (the work was triggered by a traced
// request), the span links to it with kubetrail.link.type "caller" instead of being its child.
//
// gvk may be empty; then obj's TypeMeta gives it, when obj is a runtime.Object that has one
// (objects from client-go's typed clients and informers usually do not: pass gvk).
//
// An object without a UID was never stored: there is no object trace to join yet. Then the span
// is a plain child of ctx, with the identity attributes it can have and no trace-state member;
// the same happens when the cluster name and UID do not fit a trace-state value. Start the span
// after the write that creates the object to have it in the object's trace.
func (t *Tracer) StartSpanFromObject(ctx context.Context, obj metav1.Object, gvk schema.GroupVersionKind, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if gvk.Empty() {
		if ro, ok := obj.(runtime.Object); ok {
			gvk = ro.GetObjectKind().GroupVersionKind()
		}
	}
	start := make([]trace.SpanStartOption, 0, len(opts)+3)
	start = append(start, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(t.attributes(obj, gvk)...))
	parent, ok := t.objectSpanContext(obj)
	if !ok {
		return t.tracer.Start(ctx, name, append(start, opts...)...)
	}
	if caller := trace.SpanContextFromContext(ctx); caller.IsValid() {
		start = append(start, trace.WithLinks(trace.Link{
			SpanContext: caller,
			Attributes:  []attribute.KeyValue{attribute.String(attrLinkType, linkTypeCaller)},
		}))
	}
	return t.tracer.Start(trace.ContextWithRemoteSpanContext(ctx, parent), name, append(start, opts...)...)
}

// objectSpanContext is the span context of obj's object span in the current window, as a remote
// parent carrying the kubetrail trace-state member.
func (t *Tracer) objectSpanContext(obj metav1.Object) (trace.SpanContext, bool) {
	uid := string(obj.GetUID())
	window := objid.WindowStart(t.now(), t.window)
	member, err := objid.EncodeTraceState(objid.ObjectRef{Cluster: t.cluster, UID: uid, Window: window})
	if err != nil {
		return trace.SpanContext{}, false
	}
	state, err := trace.TraceState{}.Insert(objid.TraceStateKey, member)
	if err != nil {
		return trace.SpanContext{}, false
	}
	key := objid.UIDKey(t.cluster, uid)
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    objid.ObjectTraceID(key, window),
		SpanID:     objid.ObjectSpanID(key, window),
		TraceFlags: trace.FlagsSampled,
		TraceState: state,
		Remote:     true,
	}), true
}

func (t *Tracer) attributes(obj metav1.Object, gvk schema.GroupVersionKind) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 16)
	attrs = append(attrs,
		attribute.String(attrSpanType, spanTypeController),
		attribute.String(attrControllerName, t.controller))
	if t.cluster != "" {
		attrs = append(attrs, attribute.String(attrClusterName, t.cluster))
	}
	if !gvk.Empty() {
		attrs = append(attrs,
			attribute.String(attrObjectAPIGroup, gvk.Group),
			attribute.String(attrObjectAPIVersion, gvk.GroupVersion().String()),
			attribute.String(attrObjectKind, gvk.Kind))
	}
	if ns := obj.GetNamespace(); ns != "" {
		attrs = append(attrs, attribute.String(attrNamespaceName, ns))
	}
	attrs = append(attrs, attribute.String(attrObjectName, obj.GetName()))
	if uid := obj.GetUID(); uid != "" {
		attrs = append(attrs, attribute.String(attrObjectUID, string(uid)))
	}
	if g := obj.GetGeneration(); g > 0 {
		attrs = append(attrs, attribute.Int64(attrObjectGeneration, g))
	}
	if owner := metav1.GetControllerOfNoCopy(obj); owner != nil {
		attrs = append(attrs,
			attribute.String(attrOwnerAPIVersion, owner.APIVersion),
			attribute.String(attrOwnerKind, owner.Kind),
			attribute.String(attrOwnerName, owner.Name),
			attribute.String(attrOwnerUID, string(owner.UID)))
	}
	return attrs
}
