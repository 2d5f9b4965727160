package k8sauditreceiver

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/kubetrail/kubetrail/internal/auditconv/auditconvtest"
	"github.com/kubetrail/kubetrail/receiver/k8sauditreceiver/internal/metadata"
	"github.com/kubetrail/kubetrail/receiver/k8sauditreceiver/internal/metadatatest"
)

func TestCountersCarryTheirReasonAndIgnoreNothingToCount(t *testing.T) {
	tel := componenttest.NewTelemetry()
	defer func() { _ = tel.Shutdown(context.Background()) }()
	tb, err := metadata.NewTelemetryBuilder(tel.NewTelemetrySettings())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	addWithReason(ctx, tb.K8sAuditRejectedRequests, 2, reasonTooLarge)
	addWithReason(ctx, tb.K8sAuditRejectedRequests, 0, reasonMethod) // nothing to count: no data point
	addWithReason(ctx, tb.K8sAuditDroppedEvents, 1, reasonMalformedLine)
	metadatatest.AssertEqualK8sAuditRejectedRequests(t, tel, []metricdata.DataPoint[int64]{
		{Value: 2, Attributes: attribute.NewSet(attribute.String("reason", reasonTooLarge))},
	}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualK8sAuditDroppedEvents(t, tel, []metricdata.DataPoint[int64]{
		{Value: 1, Attributes: attribute.NewSet(attribute.String("reason", reasonMalformedLine))},
	}, metricdatatest.IgnoreTimestamp())
}

// Every event that arrives is measured for lag, by the door it came in by: an operator tells
// a late stream from a lost one.
func TestReceiveLagIsRecordedPerInput(t *testing.T) {
	env := startWebhook(t, nil)
	if code := postItems(t, env.url, fmt.Sprintf(auditconvtest.OneCreate, "l1"), fmt.Sprintf(auditconvtest.OneCreate, "l2")); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	m, err := env.tel.GetMetric("otelcol_k8s_audit_receive_lag")
	if err != nil {
		t.Fatal(err)
	}
	h, ok := m.Data.(metricdata.Histogram[float64])
	if !ok || len(h.DataPoints) != 1 {
		t.Fatalf("receive lag = %#v, want one histogram data point", m.Data)
	}
	dp := h.DataPoints[0]
	if v, _ := dp.Attributes.Value("input"); v.AsString() != inputNameWebhook || dp.Count != 2 {
		t.Fatalf("receive lag: input %q, count %d; want webhook, 2", v.AsString(), dp.Count)
	}
	// The events were finished in 2026-11-21: their lag is the time since then, never negative.
	since := time.Since(time.Date(2026, 11, 21, 10, 45, 54, 0, time.UTC)).Seconds()
	if lowest, ok := dp.Min.Value(); !ok || lowest < since-60 {
		t.Fatalf("lag %v s, want about %v s", lowest, since)
	}
}
