package k8sobjectlinkprocessor

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
)

// holdPolicy is the owner_wait holding decision for the spans of one batch, in one place. An
// activity span whose object's owner is still unknown (after the spans, relation records and
// the apiserver were asked) may be held until its deadline, for the owner to turn up; a forced
// span may not be held. Which spans are forced, and their deadlines:
//   - a fresh span (freshHold) may wait owner_wait from its arrival; with owner_wait 0 it is
//     forced;
//   - a released span (releaseHold) keeps the deadline it was first held with, and is forced
//     once that has passed, or at shutdown;
//   - a span that overflowed max_held_spans (noHold) is forced.
//
// Per object (mayHold): an object is held only while owner_wait is on and no span of it, nor
// of an object below it, is forced (linkOwner spreads force up the chain). An object whose own
// body names no owner is a root for certain and is never held (resolver.plan settles it before
// asking anyone).
type holdPolicy struct {
	now       time.Time
	wait      time.Duration
	deadlines []time.Time // by span ordinal, for spans held before; nil for fresh spans
	force     bool        // no span may be held
}

// freshHold is the policy for spans just received: held at most wait from now.
func freshHold(now time.Time, wait time.Duration) holdPolicy {
	return holdPolicy{now: now, wait: wait, force: wait <= 0}
}

// releaseHold is the policy for held spans processed again: each keeps its deadline, and may
// not be held past it; with all set (shutdown) none may be held.
func releaseHold(now time.Time, deadlines []time.Time, all bool) holdPolicy {
	return holdPolicy{now: now, deadlines: deadlines, force: all}
}

// noHold is the policy for spans that may not be held at all.
func noHold() holdPolicy {
	return holdPolicy{force: true}
}

// span returns until when the span at ordinal pos may be held, and whether it must not be.
func (h holdPolicy) span(pos int) (deadline time.Time, force bool) {
	if h.deadlines != nil {
		d := h.deadlines[pos]
		return d, h.force || !h.now.Before(d)
	}
	return h.now.Add(h.wait), h.force // noHold: the zero time, forced
}

// mayHold reports whether n, whose owner is still unknown, is held for owner_wait rather than
// settled as a root now.
func mayHold(n *node, ownerWait time.Duration) bool {
	return !n.force && ownerWait > 0
}

// holdSpans moves the spans at the given items out of td into the held list. Past
// max_held_spans a span is not held but released at once as a root would be, counted.
func (p *objectLinkProcessor) holdSpans(ctx context.Context, td ptrace.Traces, items []item, idx []int, fresh bool) (map[int]bool, []*node) {
	if len(idx) == 0 {
		return nil, nil
	}
	want := make(map[int]time.Time, len(idx))
	for _, i := range idx {
		want[items[i].pos] = items[i].deadline
	}
	var overflow ptrace.Traces
	held := make(map[int]bool, len(idx))
	p.heldMu.Lock()
	forEachSpanAt(td, want, func(pos int, one ptrace.Traces, deadline time.Time) {
		if len(p.held) >= p.cfg.MaxHeldSpans {
			if overflow == (ptrace.Traces{}) {
				overflow = ptrace.NewTraces()
			}
			one.ResourceSpans().MoveAndAppendTo(overflow.ResourceSpans())
			return
		}
		p.held = append(p.held, heldSpan{td: one, deadline: deadline})
		held[pos] = true
		if fresh {
			p.tel.K8sObjectLinkSpansHeld.Add(ctx, 1)
		}
		p.tel.K8sObjectLinkHeldSpans.Add(ctx, 1)
	})
	p.heldMu.Unlock()
	if overflow != (ptrace.Traces{}) {
		// Processed again with no holding allowed: the object becomes a root now rather than
		// the processor growing without bound.
		n := overflow.SpanCount()
		p.tel.K8sObjectLinkSpansReleased.Add(ctx, int64(n), metric.WithAttributes(attribute.String(attrReason, reasonHoldFull)))
		res := p.process(ctx, overflow, p.clock.Now(), noHold(), false, true)
		overflow.ResourceSpans().MoveAndAppendTo(td.ResourceSpans())
		return held, res.objects
	}
	return held, nil
}

// releaseLoop re-examines held spans on every tick of the injected clock. The ticker is made in
// Start, so a tick the clock sends right after Start is never missed.
func (p *objectLinkProcessor) releaseLoop(tick, confirmTick <-chan time.Time, stop func()) {
	defer close(p.done)
	defer stop()
	for {
		select {
		case <-p.stop:
			return
		case <-confirmTick:
			p.flushConfirms(context.Background())
		case <-tick:
			if err := p.release(context.Background(), false); err != nil {
				p.logger.Debug("Next consumer refused released spans", zap.Error(err))
			}
		}
	}
}

// release processes every held span again: those whose owner has turned up in the meantime, and
// those whose wait is over (as roots), go on to the next consumer; the rest stay held. With all
// set (Shutdown) every span goes, so none is lost.
func (p *objectLinkProcessor) release(ctx context.Context, all bool) error {
	// Spans kept unsent after an earlier refusal go first, in the order they came.
	if err := p.sendUnsent(ctx); err != nil && !all {
		return err
	}
	p.heldMu.Lock()
	held, waiting := p.held, p.waiting
	p.held, p.waiting = nil, nil
	p.heldMu.Unlock()
	if p.store == nil {
		return nil
	}
	var err error
	if len(waiting) > 0 {
		err = p.releaseSet(ctx, waiting, all, false)
	}
	if len(held) > 0 {
		err = errors.Join(err, p.releaseSet(ctx, held, all, true))
	}
	return err
}

// releaseSet processes held spans again: the owner hold's (trusted) or the guests waiting for an
// assignment (untrusted, doors.go).
func (p *objectLinkProcessor) releaseSet(ctx context.Context, held []heldSpan, all, trusted bool) error {
	now := p.clock.Now()
	td := ptrace.NewTraces()
	deadlines := make([]time.Time, 0, len(held))
	for _, h := range held {
		for range h.td.SpanCount() {
			deadlines = append(deadlines, h.deadline)
		}
		h.td.ResourceSpans().MoveAndAppendTo(td.ResourceSpans())
	}
	// Spans, not entries: an entry holds one span today, but the gauge counts spans either way.
	if trusted {
		p.tel.K8sObjectLinkHeldSpans.Add(ctx, -int64(len(deadlines)))
	} else {
		p.tel.K8sObjectLinkWaitingSpans.Add(ctx, -int64(len(deadlines)))
	}
	timedOut := 0
	for _, d := range deadlines {
		if !now.Before(d) {
			timedOut++
		}
	}
	res := p.process(ctx, td, now, releaseHold(now, deadlines, all), false, trusted)
	if !trusted {
		// Guests are counted by their result (followed, passed) as they are decided.
		return p.sendReleased(ctx, td, res)
	}
	reheld := res.held
	reason := reasonHoldTimeout
	if all {
		reason, timedOut = reasonShutdown, len(deadlines)
	}
	if timedOut > 0 {
		p.tel.K8sObjectLinkSpansReleased.Add(ctx, int64(timedOut), metric.WithAttributes(attribute.String(attrReason, reason)))
	}
	if found := len(deadlines) - timedOut - reheld; found > 0 {
		p.tel.K8sObjectLinkSpansReleased.Add(ctx, int64(found), metric.WithAttributes(attribute.String(attrReason, reasonOwnerFound)))
	}
	return p.sendReleased(ctx, td, res)
}

// sendReleased sends released spans. They are in our custody until the next consumer takes
// them: keep a copy of the activity spans, and if it refuses, keep them unsent (processed: they
// go as they are on the next tick, or Shutdown stores them). Object spans are re-sent through the
// owed list by send.
func (p *objectLinkProcessor) sendReleased(ctx context.Context, td ptrace.Traces, res processResult) error {
	var retry ptrace.Traces
	if td.SpanCount() > 0 {
		retry = copyActivitySpans(td)
	}
	// Object spans a refused send keeps owing are stored or counted by Shutdown.
	err := p.send(ctx, td, res)
	if err != nil && retry != (ptrace.Traces{}) && retry.SpanCount() > 0 {
		p.tel.K8sObjectLinkHeldSpans.Add(ctx, int64(retry.SpanCount()))
		p.keepUnsent(retry)
	}
	return err
}
