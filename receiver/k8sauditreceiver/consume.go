package k8sauditreceiver

import (
	"context"
	"fmt"

	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/receiver/receiverhelper"
	"go.uber.org/zap"
)

// consume converts a batch of one cluster and hands it to the next consumer, counting what
// was filtered and dropped. It returns the span count and the consumer's error; a panic in
// the converter becomes a permanent error, since the same events would panic again.
func (r *auditReceiver) consume(ctx context.Context, obs *receiverhelper.ObsReport, cluster string, events []auditEvent) (n int, err error) {
	ctx = obs.StartTracesOp(ctx)
	var st batchStats
	defer func() {
		if p := recover(); p != nil {
			r.set.Logger.Error("Converting audit events panicked", zap.Any("panic", p), zap.String("cluster", cluster))
			err = consumererror.NewPermanent(fmt.Errorf("converting %d audit events of cluster %s: panic: %v", len(events), cluster, p))
			st.drop(reasonInvalidEvent, len(events))
		}
		for reason, c := range st.filtered {
			addWithReason(ctx, r.telemetry.K8sAuditFilteredEvents, c, reason)
		}
		for reason, c := range st.dropped {
			addWithReason(ctx, r.telemetry.K8sAuditDroppedEvents, c, reason)
		}
		for reason, c := range st.badContexts {
			addWithReason(ctx, r.telemetry.K8sAuditTraceContextInvalid, c, reason)
		}
		obs.EndTracesOp(ctx, "audit", n, err)
	}()
	td := r.conv.convert(cluster, events, &st)
	n = td.SpanCount()
	if n == 0 {
		return 0, nil
	}
	err = r.next.ConsumeTraces(ctx, td)
	if err != nil && consumererror.IsPermanent(err) {
		st.drop(reasonConsumerPermanent, n)
	}
	return n, err
}
