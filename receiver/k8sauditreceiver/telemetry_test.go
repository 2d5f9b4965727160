package k8sauditreceiver

import (
	"context"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

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
