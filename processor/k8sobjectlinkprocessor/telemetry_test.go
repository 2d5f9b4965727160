package k8sobjectlinkprocessor

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/metadata"
)

func TestOwnTelemetryCountsWhatHappened(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	set := processortest.NewNopSettings(metadata.Type)
	set.MeterProvider = mp
	clk := newFakeClock(t0)
	p, err := newProcessor(set, memoryConfig(), new(consumertest.TracesSink), clk)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, p: p, sink: new(consumertest.TracesSink), clock: clk}
	p.next = h.sink
	defer func() { _ = p.Shutdown(context.Background()) }()

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
