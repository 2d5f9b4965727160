package objecttrace

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubetrail/kubetrail/internal/objid"
)

// The annotations that carry a trace context on an object. KEP-5915 ("Standardize async trace
// context propagation") puts each key of the text-map propagator under AnnotationPrefix:
// tracing.k8s.io/traceparent and tracing.k8s.io/tracestate for W3C trace context. kubetrail
// links the write that carries them to that span, and places a root object's window in that
// trace.
const (
	AnnotationPrefix      = "tracing.k8s.io/"
	AnnotationTraceparent = AnnotationPrefix + "traceparent"
	AnnotationTracestate  = AnnotationPrefix + "tracestate"
	// AnnotationTraceContext is the key of the object-lifecycle tracing proposal (KEP-647) that
	// KEP-5915 supersedes.
	//
	// Deprecated: written no longer; SpanContextFromObject and the collector still read it, and
	// EncodeContextIntoObject and RemoveSpanContextFromObject delete it.
	AnnotationTraceContext = "trace.kubernetes.io/context"
)

// traceparent is the carrier key of a W3C traceparent in propagation.TraceContext.
const traceparent = "traceparent"

// AnnotationCarrier is KEP-5915's carrier: the propagator's key K is the annotation
// tracing.k8s.io/K of the object. It serves any propagation.TextMapPropagator, so a controller
// written against the KEP's carrier and one using this package read and write the same
// annotations:
//
//	otel.GetTextMapPropagator().Inject(ctx, objecttrace.AnnotationCarrier{Object: obj})
//	ctx = otel.GetTextMapPropagator().Extract(ctx, objecttrace.AnnotationCarrier{Object: obj})
//
// Set writes into the object's annotations (making the map when it has none).
type AnnotationCarrier struct {
	Object metav1.Object
}

var _ propagation.TextMapCarrier = AnnotationCarrier{}

// Get returns the annotation tracing.k8s.io/key, "" when there is none.
func (c AnnotationCarrier) Get(key string) string {
	return c.Object.GetAnnotations()[AnnotationPrefix+key]
}

// Set sets the annotation tracing.k8s.io/key.
func (c AnnotationCarrier) Set(key, value string) {
	annotations := c.Object.GetAnnotations()
	if annotations == nil {
		annotations = make(map[string]string, 2)
	}
	annotations[AnnotationPrefix+key] = value
	c.Object.SetAnnotations(annotations)
}

// Keys lists the propagator keys the object's annotations carry.
func (c AnnotationCarrier) Keys() []string {
	var keys []string
	for k := range c.Object.GetAnnotations() {
		if key, ok := strings.CutPrefix(k, AnnotationPrefix); ok {
			keys = append(keys, key)
		}
	}
	return keys
}

// EncodeContextIntoObject writes the span context of ctx into obj's annotations as KEP-5915
// says: the W3C traceparent ("00-<trace ID>-<span ID>-<flags>") in tracing.k8s.io/traceparent
// and its trace state, if any, in tracing.k8s.io/tracestate (without the kubetrail member this
// package puts on its own spans, which names the parent object, not obj). Call it on an object
// the controller is about to create or update, so that the object's trace continues the
// controller's. It deletes the older trace.kubernetes.io/context, so that the object carries one
// context. Without a valid span context in ctx it leaves obj alone.
func EncodeContextIntoObject(ctx context.Context, obj metav1.Object) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return
	}
	sc = sc.WithTraceState(sc.TraceState().Delete(objid.TraceStateKey))
	annotations := obj.GetAnnotations()
	delete(annotations, AnnotationTracestate) // a stale state must not stay beside a new parent
	delete(annotations, AnnotationTraceContext)
	obj.SetAnnotations(annotations)
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), AnnotationCarrier{Object: obj})
}

// SpanContextFromObject returns the span context obj's annotations carry, as a remote span
// context, and whether there is a valid one: KEP-5915's tracing.k8s.io/traceparent (with its
// tracestate), else the older trace.kubernetes.io/context. A valid value is a traceparent as W3C
// defines it (lower-case hex, no all-zero trace or span ID, not version ff; version 00 without
// trailing data).
func SpanContextFromObject(obj metav1.Object) (trace.SpanContext, bool) {
	if sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), AnnotationCarrier{Object: obj})); sc.IsValid() {
		return sc, true
	}
	v, ok := obj.GetAnnotations()[AnnotationTraceContext]
	if !ok {
		return trace.SpanContext{}, false
	}
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{traceparent: v}))
	return sc, sc.IsValid()
}

// RemoveSpanContextFromObject deletes the trace-context annotations of obj (KEP-5915's
// traceparent and tracestate, and the older trace.kubernetes.io/context) and says whether one was
// there. The proposals ask a controller to do so once the object's status reached the state its
// spec asked for, so that later, unrelated changes do not join the trace.
func RemoveSpanContextFromObject(obj metav1.Object) bool {
	annotations := obj.GetAnnotations()
	found := false
	for _, k := range []string{AnnotationTraceparent, AnnotationTracestate, AnnotationTraceContext} {
		if _, ok := annotations[k]; ok {
			delete(annotations, k)
			found = true
		}
	}
	if found {
		obj.SetAnnotations(annotations)
	}
	return found
}
