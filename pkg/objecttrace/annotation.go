package objecttrace

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AnnotationTraceContext is the object annotation that carries a W3C traceparent, as the
// Kubernetes object-lifecycle tracing proposal names it; kubetrail links the write that carries
// it to that span, and places a root object's window in that trace.
const AnnotationTraceContext = "trace.kubernetes.io/context"

// traceparent is the carrier key of a W3C traceparent in propagation.TraceContext.
const traceparent = "traceparent"

// EncodeContextIntoObject writes the span context of ctx, as a W3C traceparent
// ("00-<trace ID>-<span ID>-<flags>"), into obj's annotation trace.kubernetes.io/context. Call it
// on an object the controller is about to create or update, so that the object's trace continues
// the controller's. Without a valid span context in ctx it leaves obj alone. The trace state is
// not written: the annotation carries a traceparent only.
func EncodeContextIntoObject(ctx context.Context, obj metav1.Object) {
	carrier := propagation.MapCarrier{}
	// A context holding only the span context: Inject then writes no trace state.
	sc := trace.SpanContextFromContext(ctx).WithTraceState(trace.TraceState{})
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), carrier)
	v := carrier[traceparent]
	if v == "" {
		return
	}
	annotations := obj.GetAnnotations()
	if annotations == nil {
		annotations = make(map[string]string, 1)
	}
	annotations[AnnotationTraceContext] = v
	obj.SetAnnotations(annotations)
}

// SpanContextFromObject returns the span context in obj's annotation
// trace.kubernetes.io/context, as a remote span context, and whether there is a valid one: a
// traceparent as W3C defines it (lower-case hex, no all-zero trace or span ID, not version ff;
// version 00 without trailing data).
func SpanContextFromObject(obj metav1.Object) (trace.SpanContext, bool) {
	v, ok := obj.GetAnnotations()[AnnotationTraceContext]
	if !ok {
		return trace.SpanContext{}, false
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{traceparent: v})
	sc := trace.SpanContextFromContext(ctx)
	return sc, sc.IsValid()
}

// RemoveSpanContextFromObject deletes obj's annotation trace.kubernetes.io/context and says
// whether it was there. The proposal asks a controller to do so once the object's status reached
// the state its spec asked for, so that later, unrelated changes do not join the trace.
func RemoveSpanContextFromObject(obj metav1.Object) bool {
	annotations := obj.GetAnnotations()
	if _, ok := annotations[AnnotationTraceContext]; !ok {
		return false
	}
	delete(annotations, AnnotationTraceContext)
	obj.SetAnnotations(annotations)
	return true
}
