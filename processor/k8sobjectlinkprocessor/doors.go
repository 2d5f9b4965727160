package k8sobjectlinkprocessor

import (
	"context"
	"crypto/subtle"
	"time"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/kubetrail/kubetrail/internal/door"
	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/internal/objid"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/idmap"
)

// Doors (docs/design.md, Doors). Only spans of a trusted door write the trail: those kubetrail's
// own receivers and connector hand on in this collector (their context carries door.Trusted) and
// those of a trusted OTLP hop between kubetrail collectors (a request header carrying the
// configured secret). Every other span (an otlp receiver's: controllers, CI steps, the
// apiserver's own) is a guest:
//
//   - it never sets or consults a duplicate mark, never writes a relation, a name-index entry or
//     an assignment, and never makes an object span;
//   - one that claims to be kubetrail's (kubetrail.span.type audit, event or object) is refused,
//     dropped and counted;
//   - one that names an object through the trace-state member follows that object's existing
//     assignment, for a window near now (doors.follow_windows before the current one, at most
//     the next), waiting up to owner_wait for it in a hold of its own (doors.max_waiting_spans),
//     and otherwise passes as it came.
//
// A door is decided once per ConsumeTraces call, not per span: a call carries the spans of one
// receiver.

// trusted reports whether the spans of a ConsumeTraces call came through a trusted door.
func (p *objectLinkProcessor) trusted(ctx context.Context) bool {
	if door.IsTrusted(ctx) {
		return true
	}
	hop := p.cfg.Doors.TrustedHop
	if hop.Secret == "" {
		return false
	}
	for _, v := range client.FromContext(ctx).Metadata.Get(hop.Header) {
		if subtle.ConstantTimeCompare([]byte(v), []byte(hop.Secret)) == 1 {
			return true
		}
	}
	return false
}

// claimsKubetrail reports whether a span's type is one only kubetrail's own doors emit, or this
// processor (linked.go).
func claimsKubetrail(typ string) bool {
	return typ == model.SpanTypeAudit || typ == model.SpanTypeEvent || typ == model.SpanTypeObject || typ == model.SpanTypeLinked
}

// guest is a span of an untrusted door that names an object (the trace-state member).
type guest struct {
	span       ptrace.Span
	pos        int
	id         nodeID
	tsWindow   int64 // the member's window (Unix ns)
	controller bool
	deadline   time.Time
	force      bool

	asg   idmap.Assignment
	found bool

	// identity: the span names its object by the semantic conventions, not the trace-state
	// member; descendant: it names none and follows the trace its trace's root moved to
	// (identity.go). origTrace is the trace it came in.
	identity, descendant bool
	origTrace            pcommon.TraceID
}

// guestBatch is what collectItems found of the untrusted door's spans.
type guestBatch struct {
	guests  []guest
	refused []int // span ordinals of spans claiming to be kubetrail's
	// linkers are spans with links that may name a trace context an object carries (linked.go).
	linkers []linker
}

// followable reports whether a guest may follow its object in window w: from
// doors.follow_windows before the current window up to the next one. Records for windows far
// away in either direction are what a forged member would ask for.
func (p *objectLinkProcessor) followable(w, now time.Time) bool {
	cur := model.WindowStart(now, p.cfg.Window)
	first := cur.Add(-time.Duration(p.cfg.Doors.FollowWindows) * p.cfg.Window)
	return !w.Before(first) && !w.After(cur.Add(p.cfg.Window))
}

// queueGuests asks for the assignments of the guests' objects: from process memory first, the
// rest with the batch's first round trip (a Get: nothing is written).
func (p *objectLinkProcessor) queueGuests(r *resolver, gb *guestBatch) {
	if len(gb.guests) == 0 {
		return
	}
	ops := make([]idmap.Op, 0, len(gb.guests))
	named := make([]*guest, 0, len(gb.guests))
	for i := range gb.guests {
		g := &gb.guests[i]
		if g.descendant {
			continue // it names no object: it follows its trace (settleGuests)
		}
		w := time.Unix(0, g.id.window)
		ops = append(ops, idmap.Op{Kind: idmap.OpGet, Key: idmap.AssignmentKey(g.id.key, w), ExpireAt: r.asgExpiry(w)})
		named = append(named, g)
	}
	if len(ops) == 0 {
		return
	}
	authoritative := r.deps.store.Local(ops)
	for i, g := range named {
		if ops[i].Found {
			g.asg, g.found = idmap.DecodeAssignment(ops[i].Value)
			continue
		}
		if authoritative {
			continue
		}
		r.queue(idmap.Op{Kind: idmap.OpGet, Key: ops[i].Key, ExpireAt: ops[i].ExpireAt}, func(op *idmap.Op) {
			if op.Found {
				g.asg, g.found = idmap.DecodeAssignment(op.Value)
			}
		})
	}
}

// settleGuests moves each guest whose object has an assignment in its window into that trace
// (a controller span whose parent is the object span as derived goes under the object's span as
// assigned), marks for the guest hold those that may still wait, and leaves the rest as they came.
// An object of the batch's own trusted spans answers first. It returns the ordinals to hold.
func (p *objectLinkProcessor) settleGuests(ctx context.Context, r *resolver, gb *guestBatch) (wait []int) {
	followed, passed, byMember := 0, 0, 0
	// moved are the traces this batch's identity guests moved (identity.go), for their
	// descendants in the batch; earlier batches' are in p.moved, and the traces that stay in
	// p.stays.
	var moved map[pcommon.TraceID]pcommon.TraceID
	now := r.now
	for i := range gb.guests {
		g := &gb.guests[i]
		if g.descendant {
			continue
		}
		if n, ok := r.nodes[g.id]; ok {
			if n = n.resolve(); n.state == stFinal {
				g.asg, g.found = n.asg, true
			}
		}
		if !g.found {
			if !g.force && p.cfg.OwnerWait > 0 {
				wait = append(wait, i)
			} else {
				passed++
				if g.identity {
					p.unplaced(g.span, now)
				}
			}
			continue
		}
		if p.budget.dest(g.asg.TraceID) != g.asg.TraceID {
			// The object's trace is full: a guest makes no continuation span, so it stays where
			// its sender put it rather than pass the bound.
			passed++
			if g.identity {
				p.unplaced(g.span, now)
			}
			continue
		}
		s := g.span
		s.SetTraceID(g.asg.TraceID)
		switch {
		case g.identity:
			if s.ParentSpanID().IsEmpty() {
				s.SetParentSpanID(g.asg.SpanID)
			}
			if moved == nil {
				moved = map[pcommon.TraceID]pcommon.TraceID{}
			}
			if _, ok := moved[g.origTrace]; !ok {
				moved[g.origTrace] = g.asg.TraceID
			}
			p.moved.put(g.origTrace, g.asg.TraceID, now)
		case g.controller && s.ParentSpanID() != g.asg.SpanID &&
			s.ParentSpanID() == model.ObjectSpanID(g.id.key, time.Unix(0, g.tsWindow)):
			s.SetParentSpanID(g.asg.SpanID)
		}
		if !g.identity {
			byMember++
		}
		r.countSpans(g.asg.TraceID, 1)
		followed++
	}
	for i := range gb.guests {
		g := &gb.guests[i]
		if !g.descendant {
			continue
		}
		to, ok := moved[g.origTrace]
		if !ok {
			to, ok = p.moved.get(g.origTrace, now)
		}
		if !ok {
			_, ok = p.stays.get(g.origTrace, now) // to stays zero: it passes
		}
		switch {
		case !ok && !g.force && p.cfg.OwnerWait > 0:
			wait = append(wait, i) // its root may still come
		case !ok || to.IsEmpty() || p.budget.dest(to) != to:
			passed++ // no root came, its root stays where it is, or the trace is full
		default:
			g.span.SetTraceID(to)
			r.countSpans(to, 1)
			followed++
		}
	}
	p.countGuests(ctx, resultFollowed, followed)
	p.countGuests(ctx, resultPassed, passed)
	if byMember > 0 {
		p.tel.K8sObjectLinkTraceStateSpans.Add(ctx, int64(byMember), metric.WithAttributes(attribute.String(attrResult, resultFollowed)))
	}
	return wait
}

func (p *objectLinkProcessor) countGuests(ctx context.Context, result string, n int) {
	if n > 0 {
		p.tel.K8sObjectLinkUntrustedSpans.Add(ctx, int64(n), metric.WithAttributes(attribute.String(attrResult, result)))
	}
}

// waitGuests moves the guests at idx out of td into the guest hold, as far as
// doors.max_waiting_spans allows; the others stay in td as they came. It returns the ordinals
// it moved.
func (p *objectLinkProcessor) waitGuests(ctx context.Context, td ptrace.Traces, gb *guestBatch, idx []int, fresh bool) map[int]bool {
	if len(idx) == 0 {
		return nil
	}
	want := make(map[int]time.Time, len(idx))
	for _, i := range idx {
		want[gb.guests[i].pos] = gb.guests[i].deadline
	}
	moved := make(map[int]bool, len(idx))
	p.heldMu.Lock()
	forEachSpanAt(td, want, func(pos int, one ptrace.Traces, deadline time.Time) {
		if len(p.waiting) >= p.cfg.Doors.MaxWaitingSpans {
			return
		}
		p.waiting = append(p.waiting, heldSpan{td: one, deadline: deadline})
		moved[pos] = true
	})
	p.heldMu.Unlock()
	if fresh {
		p.countGuests(ctx, resultWaiting, len(moved)) // once, when a span starts to wait
	}
	p.countGuests(ctx, resultPassed, len(idx)-len(moved))
	if len(moved) > 0 {
		p.tel.K8sObjectLinkWaitingSpans.Add(ctx, int64(len(moved)))
	}
	return moved
}

// forEachSpanAt calls fn with a copy (resource and scope included) of each span of td whose
// ordinal is in want.
func forEachSpanAt(td ptrace.Traces, want map[int]time.Time, fn func(pos int, one ptrace.Traces, deadline time.Time)) {
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
				ors.SetSchemaUrl(rs.SchemaUrl())
				oss := ors.ScopeSpans().AppendEmpty()
				ss.Scope().CopyTo(oss.Scope())
				oss.SetSchemaUrl(ss.SchemaUrl())
				s.CopyTo(oss.Spans().AppendEmpty())
				fn(pos-1, one, deadline)
			}
		}
	}
}

// guestOf returns the guest of an untrusted door's span that names ref, if its window may be
// followed.
func (p *objectLinkProcessor) guestOf(s ptrace.Span, pos int, ref objid.ObjectRef, typ string, hold holdPolicy, now time.Time) (guest, bool) {
	w := model.WindowStart(ref.Window, p.cfg.Window)
	if !p.followable(w, now) {
		return guest{}, false
	}
	// The member's cluster and UID are bounded by the trace state's 256 bytes; nothing else of
	// the span (its identity attributes, its owner) is read.
	key := model.UIDKey(ref.Cluster, ref.UID)
	g := guest{span: s, pos: pos, id: nodeID{key: key, window: w.UnixNano()}, tsWindow: ref.Window.UnixNano(),
		controller: typ == model.SpanTypeController}
	g.deadline, g.force = hold.span(pos)
	return g, true
}
