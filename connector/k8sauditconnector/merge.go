package k8sauditconnector

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// soloAfterRefusal is how long the merger hands each call on alone after a merged hand-off was
// refused for good: long enough for the sources to send the refused calls again (the kafka
// receiver's error_backoff starts at a second), so that each gets its own verdict.
const soloAfterRefusal = time.Minute

// merger hands on the spans of concurrent calls together, in one call of the next consumer:
// one export, one gzip stream, one ID-map round trip for all of them. It never waits for more:
// a call that finds nothing in flight goes on at once, alone; the calls that arrive while a
// hand-off is in flight wait for it and go on together in the next one. Each call returns only
// once the next consumer answered for its spans, with that answer, so a source that commits
// after the call (Kafka, an OTLP client) commits only what was taken.
//
// The calls already hold their spans (and their in-flight budget) while they wait; the merged
// hand-off is bounded by maxBytes of the calls' decoded estimate, so that an export stays
// within a backend's message limit. A call over it goes alone.
//
// A merged hand-off refused for good cannot say whose spans were at fault: each of its calls
// gets a retryable error instead, and for soloAfterRefusal each call goes on alone, so the
// retries get their own answers.
type merger struct {
	next     consumer.Traces
	maxBytes int64
	now      func() time.Time
	onMerged func(ctx context.Context, calls int)
	// onRefused is told of a merged hand-off refused for good, before its calls go on alone.
	onRefused func(calls int, err error)

	mu        sync.Mutex
	queue     []*handoff // waiting calls, oldest first
	busy      bool       // a hand-off is in flight: its leader will pass the lead on
	soloUntil time.Time
}

// handoff is one call waiting in the merger.
type handoff struct {
	ctx   context.Context
	td    ptrace.Traces
	bytes int64
	done  chan handoffResult // buffered: the leader never blocks on it
}

// handoffResult answers a waiting call: the next consumer's answer for its spans, or the lead.
type handoffResult struct {
	err  error
	lead bool
}

func newMerger(next consumer.Traces, maxBytes int64, now func() time.Time, onMerged func(context.Context, int), onRefused func(int, error)) *merger {
	return &merger{next: next, maxBytes: maxBytes, now: now, onMerged: onMerged, onRefused: onRefused}
}

// consume hands td on, alone or merged with the spans of the calls waiting beside it, and
// returns the next consumer's answer for it. bytes is the call's decoded estimate.
func (m *merger) consume(ctx context.Context, td ptrace.Traces, bytes int64) error {
	h := &handoff{ctx: ctx, td: td, bytes: bytes, done: make(chan handoffResult, 1)}
	m.mu.Lock()
	if m.now().Before(m.soloUntil) {
		m.mu.Unlock()
		return m.consumeNext(ctx, td)
	}
	m.queue = append(m.queue, h)
	if m.busy {
		m.mu.Unlock()
		// Waits for the answer whatever ctx says: the spans may be on their way already, and
		// an error here would have the source send them a second time.
		r := <-h.done
		if !r.lead {
			return r.err
		}
	} else {
		m.busy = true
		m.mu.Unlock()
	}
	return m.lead()
}

// lead hands on the calls at the head of the queue, the leader's own first, answers the
// others, passes the lead to the next waiting call if any, and returns the leader's answer.
func (m *merger) lead() error {
	m.mu.Lock()
	n, bytes := 1, m.queue[0].bytes
	for n < len(m.queue) && bytes+m.queue[n].bytes <= m.maxBytes {
		bytes += m.queue[n].bytes
		n++
	}
	batch := m.queue[:n:n]
	m.queue = m.queue[n:]
	m.mu.Unlock()

	own := batch[0]
	var err error
	if n == 1 {
		err = m.consumeNext(own.ctx, own.td)
	} else {
		td := own.td
		for _, h := range batch[1:] {
			h.td.ResourceSpans().MoveAndAppendTo(td.ResourceSpans())
		}
		m.onMerged(own.ctx, n)
		// Not cancelled with the leader's call: the other calls' spans ride on it.
		err = m.consumeNext(context.WithoutCancel(own.ctx), td)
		if consumererror.IsPermanent(err) {
			m.mu.Lock()
			m.soloUntil = m.now().Add(soloAfterRefusal)
			m.mu.Unlock()
			m.onRefused(n, err)
			err = fmt.Errorf("k8s_audit connector: the spans of %d calls, handed on together, were refused for good (%v); each goes on alone when sent again", n, err)
		}
	}
	for _, h := range batch[1:] {
		h.done <- handoffResult{err: err}
	}

	m.mu.Lock()
	if len(m.queue) == 0 {
		m.busy = false
	} else {
		m.queue[0].done <- handoffResult{lead: true}
	}
	m.mu.Unlock()
	return err
}

// consumeNext calls the next consumer; a panic there becomes a permanent error, so that the
// calls waiting on the hand-off are answered and the lead passes on.
func (m *merger) consumeNext(ctx context.Context, td ptrace.Traces) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = consumererror.NewPermanent(fmt.Errorf("k8s_audit connector: the next consumer panicked: %v", p))
		}
	}()
	return m.next.ConsumeTraces(ctx, td)
}
