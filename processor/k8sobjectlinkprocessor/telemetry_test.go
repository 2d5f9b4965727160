package k8sobjectlinkprocessor

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/idmap"
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

func TestTheHeldSpansGaugeReturnsToZeroAfterARefusedRelease(t *testing.T) {
	sink := new(consumertest.TracesSink)
	refuse := false
	next := refusingConsumer(sink, &refuse)
	cfg := memoryConfig()
	cfg.OwnerWait = 3 * time.Second
	clk := newFakeClock(t0.Add(time.Minute))
	h, reader := newMeteredHarness(t, cfg, clk, next, sink)
	p := h.p
	h.consume(event(withoutOwner(podA1), "e1", t0.Add(time.Minute)), event(withoutOwner(podB1), "e2", t0.Add(time.Minute)))
	clk.Advance(4 * time.Second)
	refuse = true
	_ = p.release(context.Background(), false)
	refuse = false
	if err := p.release(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	h.activitySpan("event e1")
	h.activitySpan("event e2")

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "otelcol_k8s_object_link_held_spans" {
				continue
			}
			found = true
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if dp.Value != 0 {
					t.Fatalf("no span is held any more, the gauge says %d", dp.Value)
				}
			}
		}
	}
	if !found {
		t.Fatal("the held spans gauge must be reported")
	}
}

// The ID map's gauges say what its bounds measure, read when the metrics are collected.
func TestTheIDMapGaugesReadTheMemoryStore(t *testing.T) {
	sink := new(consumertest.TracesSink)
	h, reader := newMeteredHarness(t, memoryConfig(), newFakeClock(t0), sink, sink)
	h.consume(audit(deploy, "a", t0.Add(time.Second)), audit(rsA, "b", t0.Add(time.Second)), audit(podA1, "c", t0.Add(time.Second)))

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	gauge := func(name string, attrs ...attribute.KeyValue) int64 {
		t.Helper()
		want := attribute.NewSet(attrs...)
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != name {
					continue
				}
				for _, dp := range m.Data.(metricdata.Gauge[int64]).DataPoints {
					if dp.Attributes.Equals(&want) {
						return dp.Value
					}
				}
			}
		}
		t.Fatalf("no %s %v", name, attrs)
		return 0
	}
	records, bytes := h.p.store.(*idmap.MemoryStore).Size()
	// Three assignments, two relations, three name entries at least.
	if records < 8 || gauge("otelcol_k8s_object_link_id_map_records") != int64(records) || gauge("otelcol_k8s_object_link_id_map_bytes") != bytes {
		t.Fatalf("gauges %d records, %d bytes; the store holds %d, %d",
			gauge("otelcol_k8s_object_link_id_map_records"), gauge("otelcol_k8s_object_link_id_map_bytes"), records, bytes)
	}
	// A duplicate mark per activity span; a graft mark per object span and the root's derived trace.
	duplicate := gauge("otelcol_k8s_object_link_id_map_marks", attribute.String(attrKind, kindDuplicate))
	graft := gauge("otelcol_k8s_object_link_id_map_marks", attribute.String(attrKind, kindGraft))
	if duplicate != 3 || graft != 4 {
		t.Fatalf("gauges %d duplicate and %d graft marks, want 3 and 4", duplicate, graft)
	}
}
