package k8sauditreceiver

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/receiver/receiverhelper"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/kubetrail/kubetrail/internal/auditconv"
)

// The input attribute of otelcol_k8s_audit_receive_lag, one per door of this receiver.
var (
	inputWebhook = auditconv.InputAttribute(inputNameWebhook)
	inputFile    = auditconv.InputAttribute(inputNameFile)
)

// consume converts a batch of one cluster and hands it to the next consumer, counting what
// was filtered and dropped and how late the events arrived. It returns the span count and the
// consumer's error; a panic in the converter becomes a permanent error, since the same events
// would panic again.
func (r *auditReceiver) consume(ctx context.Context, obs *receiverhelper.ObsReport, input metric.MeasurementOption, cluster string, events []auditconv.Event) (n int, err error) {
	r.conv.RecordLag(ctx, events, time.Now(), input)
	ctx = obs.StartTracesOp(ctx)
	var st auditconv.Stats
	defer func() {
		if p := recover(); p != nil {
			r.set.Logger.Error("Converting audit events panicked", zap.Any("panic", p), zap.String("cluster", cluster))
			err = consumererror.NewPermanent(fmt.Errorf("converting %d audit events of cluster %s: panic: %v", len(events), cluster, p))
			st.Drop(auditconv.ReasonInvalidEvent, len(events))
		}
		st.Record(ctx, r.tel)
		obs.EndTracesOp(ctx, "audit", n, err)
	}()
	td := r.conv.Convert(cluster, events, &st)
	n = td.SpanCount()
	if n == 0 {
		return 0, nil
	}
	err = r.next.ConsumeTraces(ctx, td)
	if err != nil && consumererror.IsPermanent(err) {
		st.Drop(auditconv.ReasonConsumerPermanent, n)
	}
	return n, err
}
