package k8sobjectlinkprocessor

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

func TestOwnTelemetryCountsWhatHappened(t *testing.T) {
	sink := new(consumertest.TracesSink)
	h, reader := newMeteredHarness(t, memoryConfig(), newFakeClock(t0), sink, sink)

	h.consume(audit(deploy, "a", t0.Add(time.Second)), audit(rsA, "b", t0.Add(time.Second)))
	h.consume(audit(deploy, "a", t0.Add(time.Second)), audit(rsA, "c", t0.Add(time.Second)))

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	sum := func(name string, attrs ...attribute.KeyValue) int64 { return sumOf(rm, name, attrs...) }
	tests := []struct {
		name   string
		metric string
		attrs  []attribute.KeyValue
		want   int64
	}{
		{"two objects get an assignment each", "otelcol_k8s_object_link_assignments", []attribute.KeyValue{attribute.String("result", "created")}, 2},
		{"the second batch reuses both", "otelcol_k8s_object_link_assignments", []attribute.KeyValue{attribute.String("result", "reused")}, 2},
		{"one object span per object", "otelcol_k8s_object_link_object_spans_emitted", nil, 2},
		{"the redelivered span is counted as a duplicate", "otelcol_k8s_object_link_spans_dropped", []attribute.KeyValue{attribute.String("reason", "duplicate")}, 1},
		{"spans in", "otelcol_k8s_object_link_spans_in", nil, 4},
		{"spans out: three activity and two object spans", "otelcol_k8s_object_link_spans_out", nil, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sum(tt.metric, tt.attrs...); got != tt.want {
				t.Fatalf("%s%v = %d, want %d", tt.metric, tt.attrs, got, tt.want)
			}
		})
	}
}
