package objecttrace

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestTheContextRoundTripsThroughTheAnnotation(t *testing.T) {
	tp, _ := recorded(t)
	ctx, span := New(WithTracerProvider(tp), WithCluster("c")).StartSpanFromObject(context.Background(), deployment(), deployGVK, "reconcile")
	defer span.End()

	obj := &metav1.ObjectMeta{Name: "child", Annotations: map[string]string{"keep": "me", AnnotationTraceContext: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
	EncodeContextIntoObject(ctx, obj)
	want := span.SpanContext()
	if got := obj.Annotations[AnnotationTraceparent]; got != "00-"+want.TraceID().String()+"-"+want.SpanID().String()+"-01" {
		t.Errorf("annotation %q", got)
	}
	if _, ok := obj.Annotations[AnnotationTraceContext]; ok {
		t.Errorf("the older key stays beside KEP-5915's: %v", obj.Annotations)
	}
	if _, ok := obj.Annotations[AnnotationTracestate]; ok {
		t.Errorf("the span's kubetrail member (the parent object's identity) was written: %v", obj.Annotations)
	}
	if obj.Annotations["keep"] != "me" {
		t.Error("another annotation was lost")
	}
	got, ok := SpanContextFromObject(obj)
	if !ok || got.TraceID() != want.TraceID() || got.SpanID() != want.SpanID() || !got.IsSampled() || !got.IsRemote() {
		t.Errorf("read back %v, %v; want %v", got, ok, want)
	}
	if got.TraceState().Len() != 0 {
		t.Errorf("the annotation carried the trace state %q", got.TraceState())
	}

	if !RemoveSpanContextFromObject(obj) {
		t.Error("Remove found nothing")
	}
	if len(obj.Annotations) != 1 || obj.Annotations["keep"] != "me" {
		t.Errorf("annotations after Remove: %v", obj.Annotations)
	}
	if RemoveSpanContextFromObject(obj) {
		t.Error("Remove found the annotation twice")
	}
}

func TestEncodeCreatesTheAnnotationsMap(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}})
	obj := &metav1.ObjectMeta{}
	EncodeContextIntoObject(trace.ContextWithSpanContext(context.Background(), sc), obj)
	if got := obj.Annotations[AnnotationTraceparent]; got != "00-01000000000000000000000000000000-0200000000000000-00" {
		t.Errorf("annotation %q", got)
	}
}

// TestTheKEPCarrierInteroperates: a controller that injects with any text-map propagator into
// KEP-5915's carrier is read by SpanContextFromObject, with its trace state; one that encodes
// with this package is read by the propagator through the carrier; the older key is still read
// when KEP-5915's is absent, and KEP-5915's wins when both are there.
func TestTheKEPCarrierInteroperates(t *testing.T) {
	state, err := trace.ParseTraceState("vendor=abc")
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, TraceState: state})
	obj := &metav1.ObjectMeta{}
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	prop.Inject(trace.ContextWithSpanContext(context.Background(), sc), AnnotationCarrier{Object: obj})
	if obj.Annotations["tracing.k8s.io/traceparent"] != "00-01000000000000000000000000000000-0200000000000000-01" || obj.Annotations["tracing.k8s.io/tracestate"] != "vendor=abc" {
		t.Fatalf("the propagator wrote %v", obj.Annotations)
	}
	if keys := (AnnotationCarrier{Object: obj}).Keys(); len(keys) != 2 {
		t.Errorf("Keys() = %v", keys)
	}
	got, ok := SpanContextFromObject(obj)
	if !ok || got.TraceID() != sc.TraceID() || got.TraceState().Get("vendor") != "abc" {
		t.Errorf("read back %v %v", got, ok)
	}

	mine := &metav1.ObjectMeta{}
	EncodeContextIntoObject(trace.ContextWithSpanContext(context.Background(), sc), mine)
	back := trace.SpanContextFromContext(prop.Extract(context.Background(), AnnotationCarrier{Object: mine}))
	if !back.IsValid() || back.SpanID() != sc.SpanID() || back.TraceState().Get("vendor") != "abc" {
		t.Errorf("the propagator read %v from %v", back, mine.Annotations)
	}

	old := &metav1.ObjectMeta{Annotations: map[string]string{AnnotationTraceContext: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
	if got, ok := SpanContextFromObject(old); !ok || got.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
		t.Errorf("the older key read as %v %v", got, ok)
	}
	old.Annotations[AnnotationTraceparent] = "00-01000000000000000000000000000000-0200000000000000-01"
	if got, _ := SpanContextFromObject(old); got.TraceID() != sc.TraceID() {
		t.Errorf("with both keys, read %v: KEP-5915's must win", got)
	}
	old.Annotations[AnnotationTraceparent] = "garbage"
	if got, ok := SpanContextFromObject(old); !ok || got.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
		t.Errorf("a malformed KEP value hides the older key: %v %v", got, ok)
	}
}

func TestEncodeWithoutASpanLeavesTheObjectAlone(t *testing.T) {
	obj := &metav1.ObjectMeta{}
	EncodeContextIntoObject(context.Background(), obj)
	if obj.Annotations != nil {
		t.Errorf("annotations %v", obj.Annotations)
	}
	if RemoveSpanContextFromObject(obj) {
		t.Error("Remove found an annotation on an object without annotations")
	}
}

func TestSpanContextFromObjectRefusesInvalidValues(t *testing.T) {
	const tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	tests := []struct{ name, value string }{
		{"empty", ""},
		{"short", "00-" + tid + "-" + sid},
		{"upper-case hex", "00-4BF92F3577B34DA6A3CE929D0E0E4736-" + sid + "-01"},
		{"non-hex", "00-" + tid + "-00f067aa0ba902bz-01"},
		{"all-zero trace ID", "00-00000000000000000000000000000000-" + sid + "-01"},
		{"all-zero span ID", "00-" + tid + "-0000000000000000-01"},
		{"version ff", "ff-" + tid + "-" + sid + "-01"},
		{"version 00 with trailing data", "00-" + tid + "-" + sid + "-01-x"},
		{"misplaced dashes", "00_" + tid + "_" + sid + "_01"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, key := range []string{AnnotationTraceparent, AnnotationTraceContext} {
				obj := &metav1.ObjectMeta{Annotations: map[string]string{key: tt.value}}
				if sc, ok := SpanContextFromObject(obj); ok || sc.IsValid() {
					t.Errorf("%s %q read as %v, %v", key, tt.value, sc, ok)
				}
			}
		})
	}
	if _, ok := SpanContextFromObject(&metav1.ObjectMeta{}); ok {
		t.Error("an object without the annotation has a context")
	}
	obj := &metav1.ObjectMeta{Annotations: map[string]string{AnnotationTraceContext: "00-" + tid + "-" + sid + "-00"}}
	if sc, ok := SpanContextFromObject(obj); !ok || sc.IsSampled() || sc.TraceID().String() != tid {
		t.Errorf("a valid unsampled context read as %v, %v", sc, ok)
	}
}
