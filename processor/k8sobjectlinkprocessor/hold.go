package k8sobjectlinkprocessor

import (
	"context"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
)

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
	pos := 0
	for _, rs := range td.ResourceSpans().All() {
		for _, ss := range rs.ScopeSpans().All() {
			for _, s := range ss.Spans().All() {
				deadline, ok := want[pos]
				pos++
				if !ok {
					continue
				}
				one := ptrace.NewTraces()
				ors := one.ResourceSpans().AppendEmpty()
				rs.Resource().CopyTo(ors.Resource())
				oss := ors.ScopeSpans().AppendEmpty()
				ss.Scope().CopyTo(oss.Scope())
				s.CopyTo(oss.Spans().AppendEmpty())
				if len(p.held) >= p.cfg.MaxHeldSpans {
					if overflow == (ptrace.Traces{}) {
						overflow = ptrace.NewTraces()
					}
					one.ResourceSpans().MoveAndAppendTo(overflow.ResourceSpans())
					continue
				}
				p.held = append(p.held, heldSpan{td: one, deadline: deadline})
				held[pos-1] = true
				if fresh {
					p.tel.K8sObjectLinkSpansHeld.Add(ctx, 1)
				}
				p.tel.K8sObjectLinkHeldSpans.Add(ctx, 1)
			}
		}
	}
	p.heldMu.Unlock()
	if overflow != (ptrace.Traces{}) {
		// Processed again with no holding allowed: the object becomes a root now rather than
		// the processor growing without bound.
		n := overflow.SpanCount()
		p.tel.K8sObjectLinkSpansReleased.Add(ctx, int64(n), metric.WithAttributes(attribute.String(attrReason, "hold_full")))
		res := p.process(ctx, overflow, p.clock.Now(), func(int) (time.Time, bool) { return time.Time{}, true }, false)
		overflow.ResourceSpans().MoveAndAppendTo(td.ResourceSpans())
		return held, res.objects
	}
	return held, nil
}

// releaseLoop re-examines held spans on every tick of the injected clock. The ticker is made in
// Start, so a tick the clock sends right after Start is never missed.
func (p *objectLinkProcessor) releaseLoop(tick <-chan time.Time, stop func()) {
	defer close(p.done)
	defer stop()
	for {
		select {
		case <-p.stop:
			return
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
	held := p.held
	p.held = nil
	p.heldMu.Unlock()
	if len(held) == 0 || p.store == nil {
		return nil
	}
	now := p.clock.Now()
	td := ptrace.NewTraces()
	deadlines := make([]time.Time, 0, len(held))
	for _, h := range held {
		for range h.td.SpanCount() {
			deadlines = append(deadlines, h.deadline)
		}
		h.td.ResourceSpans().MoveAndAppendTo(td.ResourceSpans())
	}
	// Spans, not entries: a batch held again after a refused release is one entry of many spans.
	p.tel.K8sObjectLinkHeldSpans.Add(ctx, -int64(len(deadlines)))
	timedOut := 0
	for _, d := range deadlines {
		if !now.Before(d) {
			timedOut++
		}
	}
	res := p.process(ctx, td, now, func(pos int) (time.Time, bool) {
		d := deadlines[pos]
		return d, all || !now.Before(d)
	}, false)
	reheld := res.held
	reason := "timeout"
	if all {
		reason, timedOut = "shutdown", len(deadlines)
	}
	if timedOut > 0 {
		p.tel.K8sObjectLinkSpansReleased.Add(ctx, int64(timedOut), metric.WithAttributes(attribute.String(attrReason, reason)))
	}
	if found := len(deadlines) - timedOut - reheld; found > 0 {
		p.tel.K8sObjectLinkSpansReleased.Add(ctx, int64(found), metric.WithAttributes(attribute.String(attrReason, "owner_found")))
	}
	// Released spans are in our custody until the next consumer takes them: keep a copy of the
	// activity spans, and if it refuses, keep them unsent (processed: they go as they are on the
	// next tick, or Shutdown stores them). Object spans are re-sent through the owed list by send.
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
