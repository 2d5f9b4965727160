package metadata

import (
	"context"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCountersCarryTheirReason(t *testing.T) {
	tel := componenttest.NewTelemetry()
	defer func() { _ = tel.Shutdown(context.Background()) }()
	tb, err := NewTelemetryBuilder(tel.NewTelemetrySettings())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	Add(ctx, tb.RejectedRequests, 2, ReasonTooLarge)
	Add(ctx, tb.RejectedRequests, 0, ReasonMethod) // nothing to count
	Add(ctx, tb.DroppedEvents, 1, ReasonMalformedLine)
	m, err := tel.GetMetric("otelcol_k8s_audit_rejected_requests")
	if err != nil {
		t.Fatal(err)
	}
	dps := m.Data.(metricdata.Sum[int64]).DataPoints
	if len(dps) != 1 || dps[0].Value != 2 {
		t.Fatalf("data points = %+v, want one of 2", dps)
	}
	if v, _ := dps[0].Attributes.Value("reason"); v.AsString() != ReasonTooLarge {
		t.Fatalf("reason = %q", v.AsString())
	}
	if _, err := tel.GetMetric("otelcol_k8s_audit_dropped_events"); err != nil {
		t.Fatal(err)
	}
}
