package k8seventsreceiver

import (
	"context"
	"time"

	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/receiver/receiverhelper"
	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/kubetrail/kubetrail/internal/door"
	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/receiver/k8seventsreceiver/internal/metadata"
)

const (
	// maxBatchItems bounds one ConsumeTraces call; a relist of a big cluster is split.
	maxBatchItems = 1000
	// queueItems bounds what waits for the consumer. When it is full the reflector blocks, the
	// watch stream backs up into the apiserver, and a watch that falls too far behind is closed
	// and relisted — which the tracker turns into no duplicates.
	queueItems = 4096
	obsFormat  = "k8s_event"
)

// pipeline carries work items, in the order the tracker produced them, to the next consumer,
// and advances the checkpoint only past items the consumer accepted.
type pipeline struct {
	logger  *zap.Logger
	tel     *metadata.TelemetryBuilder
	obs     *receiverhelper.ObsReport
	next    consumer.Traces
	conv    *converter
	ckpt    *checkpoint // nil without storage
	clock   clock.Clock
	backoff BackoffConfig
	version string

	queue chan workItem
}

// enqueue hands an item to the pipeline, waiting while the consumer is behind.
func (p *pipeline) enqueue(ctx context.Context, item workItem) error {
	select {
	case p.queue <- item:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *pipeline) run(ctx context.Context) {
	batch := make([]workItem, 0, maxBatchItems)
	// At shutdown, what the consumer accepted is checkpointed before the storage closes.
	defer p.flushCheckpoint(context.WithoutCancel(ctx))
	for {
		var due <-chan time.Time
		if p.ckpt != nil && p.ckpt.dirty {
			due = p.clock.After(p.ckpt.due(p.clock.Now()))
		}
		select {
		case item := <-p.queue:
			batch = append(batch, item)
		case <-due:
			p.flushCheckpoint(ctx)
			continue
		case <-ctx.Done():
			return
		}
	drain:
		for len(batch) < maxBatchItems {
			select {
			case item := <-p.queue:
				batch = append(batch, item)
			default:
				break drain
			}
		}
		if !p.flush(ctx, batch) {
			return
		}
		clear(batch)
		batch = batch[:0]
	}
}

// flush delivers one batch, retrying a refusal with capped exponential backoff. It returns false
// when ctx ended first; the batch is then neither emitted nor checkpointed, so the next start
// emits it.
func (p *pipeline) flush(ctx context.Context, batch []workItem) bool {
	// A shutdown must not cut a delivery in half: spans the consumer accepted while the
	// receiver stopped still get their checkpoint, or the next start would emit them again.
	// Only the wait between retries gives way to shutdown.
	opCtx := context.WithoutCancel(ctx)
	retries := p.backoff.exponential()
	for {
		b := model.NewTracesBuilder(metadata.ScopeName, p.version)
		for _, item := range batch {
			for _, s := range item.spans {
				p.conv.appendSpan(b, s)
			}
		}
		n := b.SpanCount()
		if n == 0 {
			break
		}
		obsCtx := p.obs.StartTracesOp(opCtx)
		err := p.next.ConsumeTraces(door.Trusted(obsCtx), b.Traces())
		p.obs.EndTracesOp(obsCtx, obsFormat, n, err)
		if err == nil {
			break
		}
		if consumererror.IsPermanent(err) {
			p.tel.K8sEventSpansDropped.Add(ctx, int64(n), withReason(reasonConsumerPermanent))
			p.logger.Error("Next consumer permanently refused event spans; dropping them", zap.Int("spans", n), zap.Error(err))
			break
		}
		p.tel.K8sEventSpansErrors.Add(ctx, 1, withReason(errorConsumer))
		delay := retries.Step()
		p.logger.Warn("Next consumer refused event spans; retrying", zap.Int("spans", n), zap.Duration("backoff", delay), zap.Error(err))
		select {
		case <-p.clock.After(delay):
		case <-ctx.Done():
			return false
		}
	}
	if p.ckpt == nil {
		return true
	}
	entries := make([]*checkpointEntry, 0, len(batch))
	for i := range batch {
		for j := range batch[i].entries {
			entries = append(entries, &batch[i].entries[j])
		}
	}
	p.checkpointErr(p.ckpt.commit(opCtx, entries))
	return true
}

// deliverFinal hands the series spans closed at shutdown to the next consumer, once: the
// receiver is stopping, so a refusal is not retried but counted and logged.
func (p *pipeline) deliverFinal(ctx context.Context, item workItem) {
	if len(item.spans) == 0 {
		return
	}
	b := model.NewTracesBuilder(metadata.ScopeName, p.version)
	for _, s := range item.spans {
		p.conv.appendSpan(b, s)
	}
	n := b.SpanCount()
	obsCtx := p.obs.StartTracesOp(ctx)
	err := p.next.ConsumeTraces(door.Trusted(obsCtx), b.Traces())
	p.obs.EndTracesOp(obsCtx, obsFormat, n, err)
	if err != nil {
		p.tel.K8sEventSpansDropped.Add(ctx, int64(n), withReason(reasonShutdownRefused))
		p.logger.Error("Next consumer refused the series spans closed at shutdown; dropping them", zap.Int("spans", n), zap.Error(err))
	}
}

func (p *pipeline) flushCheckpoint(ctx context.Context) {
	if p.ckpt != nil {
		p.checkpointErr(p.ckpt.flush(ctx))
	}
}

// checkpointErr counts a failed checkpoint write. The spans are out; a failed write only means
// a restart may emit them again, with the same span IDs.
func (p *pipeline) checkpointErr(err error) {
	if err != nil {
		p.tel.K8sEventSpansErrors.Add(context.Background(), 1, withReason(errorCheckpointWrite))
		p.logger.Warn("Writing the restart checkpoint failed", zap.Error(err))
	}
}
