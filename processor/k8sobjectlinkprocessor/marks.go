package k8sobjectlinkprocessor

import (
	"context"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/idmap"
)

// A duplicate mark in Redis says whether the span it stands for reached the next consumer. A
// batch sets its spans' marks (SET NX) before it passes them on, as pending: "p" and the time
// in Unix milliseconds. Once the next consumer took the batch, its marks are confirmed ("c"),
// with the next batch's first round trip (no round trip of their own), by a tick of their own
// (abandonAfter / 3) when no batch follows, and at shutdown.
//
// A replica killed between the two (SIGKILL, OOM) leaves its last batches' marks pending, and
// their spans perhaps nowhere. The replica that reads those batches again (a Kafka partition
// after the rebalance, at least a session timeout later) finds the marks pending for longer than
// abandonAfter and sends the spans again: a span the killed replica had passed on arrives twice,
// none is lost. A mark pending for less than that is a copy arriving while the first is on its
// way (two Events receivers): a duplicate, as a confirmed one is. A mark without a value (the
// memory backend, continuation spans, records of earlier releases) is confirmed.
//
// abandonAfter sits below the shortest redelivery after a kill (the kafka receiver's
// session_timeout, 10 s by default; the apiserver's webhook retries start at 10 s) and far above
// the milliseconds between two receivers' copies. Replicas' clocks must agree to about a second.
const abandonAfter = 3 * time.Second

const markConfirmed = "c"

// maxConfirms bounds the marks waiting for a round trip; beyond it a mark stays pending (at
// worst a span sent twice after a kill).
const maxConfirms = 100_000

func pendingMark(now time.Time) string { return "p" + strconv.FormatInt(now.UnixMilli(), 10) }

// abandonedMark reports whether v is a pending mark older than abandonAfter.
func abandonedMark(v string, now time.Time) bool {
	if len(v) < 2 || v[0] != 'p' {
		return false
	}
	ms, err := strconv.ParseInt(v[1:], 10, 64)
	return err == nil && now.UnixMilli()-ms >= abandonAfter.Milliseconds()
}

// confirmMarks queues the confirmation of marks whose spans the next consumer took.
func (p *objectLinkProcessor) confirmMarks(marks []string) {
	if len(marks) == 0 {
		return
	}
	expire := p.clock.Now().Add(p.cfg.DuplicateTTL)
	unconfirmed := 0
	for _, key := range marks {
		if !p.confirms.add(maxConfirms, idmap.Op{Kind: idmap.OpSet, Key: key, Value: markConfirmed, ExpireAt: expire}) {
			unconfirmed++
		}
	}
	if unconfirmed > 0 {
		p.tel.K8sObjectLinkPendingMarks.Add(context.Background(), int64(unconfirmed), metric.WithAttributes(attribute.String(attrResult, resultUnconfirmed)))
	}
}

// flushConfirms sends the queued confirmations in a round trip of their own: the stream paused.
func (p *objectLinkProcessor) flushConfirms(ctx context.Context) {
	if ops := p.confirms.take(); len(ops) > 0 && p.store != nil {
		_ = p.store.Do(ctx, ops)
	}
}

// waitingWrites are records for Redis that wait for the next batch's round trip (audit
// records of the apiserver join, confirmations of duplicate marks), bounded by entries.
type waitingWrites struct {
	mu  sync.Mutex
	ops []idmap.Op
}

// add queues op unless max are waiting; it reports whether it did.
func (w *waitingWrites) add(maxOps int, op idmap.Op) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.ops) >= maxOps {
		return false
	}
	w.ops = append(w.ops, op)
	return true
}

// take hands the waiting writes to a round trip.
func (w *waitingWrites) take() []idmap.Op {
	w.mu.Lock()
	defer w.mu.Unlock()
	ops := w.ops
	w.ops = nil
	return ops
}
