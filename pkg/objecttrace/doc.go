// Package objecttrace lets a Kubernetes controller export its work on an object as spans of that
// object's kubetrail trace, with nothing but the OpenTelemetry API and apimachinery: no collector
// module, no client-go.
//
// A Tracer starts a span for work on an object (StartSpanFromObject) as a child of the object's
// own span in kubetrail's per-object trace: the parent's IDs are derived from the object's UID and
// the current window exactly as kubetrail's collector derives them, and the span carries the
// kubetrail trace-state member naming the object. Every span that descends from it, in the
// controller and, through the traceparent and tracestate headers that WrapTransport puts on the
// controller's API requests, in the apiserver, carries the member too, and the collector's
// k8s_object_link processor moves all of them into the trace the object's window lives in,
// whatever the object's owner chain.
//
// EncodeContextIntoObject, SpanContextFromObject and RemoveSpanContextFromObject read and write
// the trace context an object carries in its annotations as KEP-5915 ("Standardize async trace
// context propagation") names them, tracing.k8s.io/traceparent and tracing.k8s.io/tracestate: a
// controller puts its context on the objects it writes and removes it once the object reached
// its desired state. AnnotationCarrier is the KEP's carrier for any text-map propagator. The key
// of the older object-lifecycle proposal, trace.kubernetes.io/context, is still read.
//
// Stability: development. The span model kind "controller" (docs/span-model.md) and this API may
// change in incompatible ways before kubetrail 1.0.
package objecttrace
