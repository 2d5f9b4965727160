package k8sobjectlinkprocessor

import (
	"context"
	"slices"
	"strconv"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/internal/objid"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/idmap"
)

// One batch through the processor: process and its steps, in the order it takes them (collect
// the activity spans, settle their objects, continue full traces, rewrite, hold, emit).

// processResult is what process leaves for send: the duplicate marks it set (undone if the
// batch is refused), how many spans it held, and the nodes whose object spans it emitted (rebuilt
// and kept for re-sending if the batch is refused; the next consumer may keep td itself).
type processResult struct {
	marks   []string // keys
	held    int
	objects []*node
	// conts are the continuation spans emitted: like object spans, owed if the batch is
	// refused (their marks stay: an object created under one needs it whatever happens).
	conts []*continuation
}

// process rewrites td in place: activity spans move into their root ancestor's window trace
// under their object's span, duplicates and held spans are removed, object spans are appended.
// hold says, per span ordinal, until when the span may be held and whether it must not be. It
// returns the duplicate marks it set (to undo if the batch is refused).
//
// The steps: collect the batch's activity spans, settle their objects' assignments, rewrite,
// drop or mark for holding each span, hold the marked ones, and emit the object spans this
// replica wrote first. trusted says whether td came through a trusted door (doors.go): the
// spans of another door write nothing and only follow existing assignments.
func (p *objectLinkProcessor) process(ctx context.Context, td ptrace.Traces, now time.Time,
	hold holdPolicy, dedup, trusted bool,
) (res processResult) {
	r := newResolver(ctx, p.resolverDeps(), now)
	defer r.release()
	items, jb, spans, gb := p.collectItems(ctx, r, td, hold, dedup, trusted, now)
	if p.join != nil {
		jb.target, jb.deferred = map[int]joinRecord{}, map[int]bool{}
		p.joinRequests(r, &jb, len(items) > 0 || len(gb.guests) > 0)
	}
	p.queueGuests(r, &gb)
	p.queueLinkers(r, &gb)
	if len(items) == 0 {
		if len(r.ops) > 0 || len(r.writes) > 0 {
			r.flush()
		}
		if len(gb.guests) == 0 && len(gb.refused) == 0 && len(gb.linkers) == 0 {
			return res
		}
		remove := make([]bool, spans)
		p.finishGuests(ctx, td, r, &gb, remove, dedup)
		p.emitLinked(ctx, td, r, &gb, remove)
		if p.join != nil {
			p.joinAfter(ctx, nil, remove, &jb, now)
		}
		if countTrue(remove) > 0 {
			removeSpans(td, remove)
		}
		for t, n := range r.spanCounts {
			p.budget.add(t, n, now)
		}
		return res
	}
	p.resolveItems(r, items, &jb, now)
	p.continueItems(r, items, now)
	p.indexContexts(r, items)
	remove, toHold := p.rewriteActivitySpans(ctx, r, items, spans)
	p.finishGuests(ctx, td, r, &gb, remove, dedup)
	p.emitLinked(ctx, td, r, &gb, remove)
	if p.join != nil {
		p.joinAfter(ctx, items, remove, &jb, now)
	}
	res = p.holdItems(ctx, td, items, toHold, dedup)
	if removed := countTrue(remove); removed > 0 {
		removeSpans(td, remove)
	}
	p.emitObjectSpans(ctx, td, r, &res)
	for t, n := range r.spanCounts {
		p.budget.add(t, n, now)
	}
	return res
}

// collectItems walks td once: it gives every activity span that names an object an item bound
// to its object's node (with the hold deadline hold gives it), collects apiserver request spans
// for the join, teaches r the batch's name → UID pairs and checks the senders' window on the
// first fresh span. spans is the number of spans walked (object spans included): the size of
// the removal mask.
func (p *objectLinkProcessor) collectItems(ctx context.Context, r *resolver, td ptrace.Traces,
	hold holdPolicy, dedup, trusted bool, now time.Time,
) (items []item, jb joinBatch, spans int, gb guestBatch) {
	pos := 0
	windowChecked := false
	total := td.SpanCount()
	invalidMembers := 0
	defer func() {
		if invalidMembers > 0 {
			p.tel.K8sObjectLinkTraceStateSpans.Add(ctx, int64(invalidMembers), metric.WithAttributes(attribute.String(attrResult, resultInvalid)))
		}
	}()
	for _, rs := range td.ResourceSpans().All() {
		resAttrs := rs.Resource().Attributes()
		for _, ss := range rs.ScopeSpans().All() {
			for _, s := range ss.Spans().All() {
				pos++
				attrs := s.Attributes()
				typ, _ := attrs.Get(model.AttrSpanType)
				if !trusted && claimsKubetrail(typ.Str()) {
					gb.refused = append(gb.refused, pos-1)
					continue
				}
				if typ.Str() == model.SpanTypeObject {
					continue
				}
				var ref objid.ObjectRef
				follow := false
				if p.cfg.TraceContext.FollowTraceState {
					var invalid bool
					if ref, follow, invalid = followed(s, typ.Str()); invalid {
						invalidMembers++
					}
				}
				if p.join != nil {
					if id, ok := apiserverRequestSpan(s, typ.Str()); ok {
						if follow {
							// Claimed once it has its final trace (joinAfter).
							jb.late = append(jb.late, joinRequest{auditID: id, span: s})
						} else {
							jb.requests = append(jb.requests, joinRequest{auditID: id, span: s})
							continue
						}
					}
				}
				if !trusted {
					// A guest: it follows an existing assignment at most, and reads nothing else
					// of the span (doors.go).
					if follow {
						if g, ok := p.guestOf(s, pos-1, ref, typ.Str(), hold, now); ok {
							gb.guests = append(gb.guests, g)
						} else {
							p.countGuests(ctx, resultPassed, 1)
						}
					} else if p.identityServices != nil {
						if g, ok, counted := p.identityGuestOf(s, pos-1, resAttrs, attrs, hold, now); ok {
							gb.guests = append(gb.guests, g)
						} else if counted {
							p.countGuests(ctx, resultPassed, 1)
						}
					}
					if p.cfg.TraceContext.LinkSpans {
						if lk, ok := linkerOf(s, pos-1, resAttrs); ok {
							gb.linkers = append(gb.linkers, lk)
						}
					}
					continue
				}
				var obj model.Object
				var w time.Time
				if follow {
					obj = followedObject(ref, resAttrs, attrs, typ.Str())
					w = model.WindowStart(ref.Window, p.cfg.Window)
				} else {
					if typ.Str() == model.SpanTypeController {
						// Without the member (its object had no UID yet): it stays in its caller's trace.
						continue
					}
					var ok bool
					if obj, ok = model.ObjectFromAttributes(resAttrs, attrs); !ok {
						continue
					}
					w = model.WindowStart(s.StartTimestamp().AsTime(), p.cfg.Window)
				}
				// Its strings become ID-map keys and values: bounded as the receivers bound them,
				// whichever trusted door the span came through.
				obj.Bound()
				// A write the apiserver carried out says whether the object is still there; a
				// refused one (the kubelet's second delete of a Pod, answered 404) says nothing.
				var carriedOut, deleted bool
				if typ.Str() == model.SpanTypeAudit {
					carriedOut, deleted = auditOutcome(attrs)
				}
				if obj.UID != "" && obj.Name != "" {
					// Later spans of a batch are later in time: the last UID seen for a name is
					// current. The key is built on the stack; it is a string of its own only
					// when the name is new to the batch or names another object now.
					var buf [128]byte
					k := obj.AppendNameKey(buf[:0])
					if r.names[string(k)] != obj.UID {
						r.names[string(k)] = obj.UID
					}
					if carriedOut {
						r.sawName(k, deleted)
					}
				}
				it := item{span: s, pos: pos - 1, follow: follow}
				if follow {
					it.controller = typ.Str() == model.SpanTypeController
					it.tsWindow = ref.Window.UnixNano()
				}
				if p.join != nil && typ.Str() == model.SpanTypeAudit {
					if v, ok := attrs.Get(model.AttrAuditID); ok {
						it.auditID = v.Str()
					}
				}
				it.dedup = dedup && (typ.Str() == model.SpanTypeAudit || typ.Str() == model.SpanTypeEvent) && !s.SpanID().IsEmpty()
				if it.dedup && !windowChecked {
					// Fresh spans only (dedup is set on the ConsumeTraces path), as received.
					windowChecked = true
					p.checkWindow(ctx, obj, s, w)
				}
				var force bool
				it.deadline, force = hold.span(it.pos)
				it.uidFromName = obj.UID == ""
				n := r.node(obj, w)
				n.direct = true
				if carriedOut {
					n.gone = deleted
				}
				n.force = n.force || force
				if n.deadline.IsZero() || it.deadline.Before(n.deadline) {
					n.deadline = it.deadline
				}
				it.node = n
				if p.cfg.TraceContext.Nest && typ.Str() == model.SpanTypeAudit {
					if tc, ok := spanTraceContext(s); ok {
						// Later spans of a batch are later: the last context seen is the object's.
						n.ctx = &nodeContext{tc: tc, start: s.StartTimestamp().AsTime()}
					}
				}
				if items == nil {
					// One per span left at most, sized at the first: no doubling copies, and a
					// batch without kubetrail spans (another service's, the apiserver's) allocates none.
					items = make([]item, 0, total-pos+1)
				}
				items = append(items, it)
			}
		}
	}
	return items, jb, pos, gb
}

// finishGuests decides the batch's guests (doors.go) once its trusted spans are settled: refused
// spans and guests that wait are marked in remove, the others are followed or left as they came.
func (p *objectLinkProcessor) finishGuests(ctx context.Context, td ptrace.Traces, r *resolver, gb *guestBatch, remove []bool, fresh bool) {
	if len(gb.refused) > 0 {
		for _, pos := range gb.refused {
			remove[pos] = true
		}
		p.tel.K8sObjectLinkSpansDropped.Add(ctx, int64(len(gb.refused)), metric.WithAttributes(attribute.String(attrReason, reasonUntrustedClaim)))
	}
	if len(gb.guests) == 0 {
		return
	}
	wait := p.settleGuests(ctx, r, gb)
	for pos := range p.waitGuests(ctx, td, gb, wait, fresh) {
		remove[pos] = true
	}
}

// resolveItems settles the assignments of the items' objects. Round one carries the batch's
// unconditional writes: duplicate marks (whose answers decide which spans drop), the name index
// and relations named by the spans themselves.
func (p *objectLinkProcessor) resolveItems(r *resolver, items []item, jb *joinBatch, now time.Time) {
	// Sized once for the batch: the duplicate marks are most of its operations.
	nd := 0
	for i := range items {
		if items[i].dedup {
			nd++
		}
	}
	seen := make(map[pcommon.SpanID]struct{}, nd)
	dedupExpiry := now.Add(p.cfg.DuplicateTTL)
	pending := pendingMark(now)
	dedupIdx := make([]int, 0, nd)
	r.writes = slices.Grow(r.writes, nd+len(r.names)+len(r.order))
	r.ops, r.cbs = slices.Grow(r.ops, nd), slices.Grow(r.cbs, nd)
	for i := range items {
		it := &items[i]
		if !it.dedup {
			continue
		}
		id := it.span.SpanID()
		if _, dup := seen[id]; dup {
			it.dup = true
			continue
		}
		seen[id] = struct{}{}
		r.writes = append(r.writes, idmap.Op{Kind: idmap.OpSetIfAbsent, Key: idmap.DedupKey(id), Value: pending, ExpireAt: dedupExpiry})
		dedupIdx = append(dedupIdx, i)
	}
	nDedup := len(r.writes)
	for name, uid := range r.names {
		_, gone := r.gone[name]
		r.writes = append(r.writes, idmap.Op{Kind: idmap.OpSet, Key: idmap.NameKey(name), Value: uid, ExpireAt: now.Add(r.relationTTL(gone))})
	}
	for _, n := range r.order {
		if n.direct && !n.obj.Owner.IsZero() {
			r.writeRelation(n)
			r.linkOwner(n)
		}
	}
	// Duplicate marks go out with the first round trip; their answers decide which spans drop.
	dedupOps := r.writes[:nDedup:nDedup]
	r.writes = r.writes[nDedup:]
	if p.redis != nil {
		// The marks of earlier batches the next consumer took ride on this round trip, ahead of
		// this batch's: a copy of one of their spans then finds its mark confirmed (marks.go).
		for _, op := range p.confirms.take() {
			r.queue(op, func(*idmap.Op) {})
		}
	}
	for j := range dedupOps {
		it := &items[dedupIdx[j]] // one pointer: the smallest closure, queued per span
		r.queue(dedupOps[j], func(op *idmap.Op) {
			switch {
			case !op.Found:
				it.mark = op.Key
			case abandonedMark(op.Value, now):
				it.mark, it.takenOver = op.Key, true
			default:
				it.dup = true
			}
		})
	}
	if p.join != nil {
		p.joinAudits(r, items, jb)
	}
	p.queueSpanCounts(r, now)
	p.queueContexts(r)
	r.run()
	r.report()
	takenOver := 0
	for _, i := range dedupIdx {
		if items[i].takenOver {
			takenOver++
		}
	}
	if takenOver > 0 {
		p.tel.K8sObjectLinkPendingMarks.Add(context.Background(), int64(takenOver), metric.WithAttributes(attribute.String(attrResult, resultTakenOver)))
	}
}

// queueSpanCounts sends, with the batch's first round trip, the spans this replica put in each
// trace since the last one, and learns each trace's total from the answers.
func (p *objectLinkProcessor) queueSpanCounts(r *resolver, now time.Time) {
	pending := p.budget.take()
	if len(pending) == 0 {
		return
	}
	expiry := now.Add(p.cfg.Window + p.cfg.Grace)
	for t, n := range pending {
		r.queue(idmap.Op{Kind: idmap.OpIncr, Key: idmap.SpanCountKey(t), Value: strconv.FormatInt(n, 10), ExpireAt: expiry}, func(op *idmap.Op) {
			p.budget.learn(t, op.Value, now)
		})
	}
}

// continueItems decides, for every settled object with activity spans in the batch, whether the
// trace of its span is at max_spans_per_trace; those spans then go to the continuation trace,
// under the object's continuation span there. Whoever sets a continuation span's mark first
// emits it: one more round trip, in the batches that overflow a trace only.
func (p *objectLinkProcessor) continueItems(r *resolver, items []item, now time.Time) {
	if p.budget == nil {
		return
	}
	for i := range items {
		if items[i].dup {
			continue
		}
		n := items[i].node.resolve()
		if n.state != stFinal || n.contChecked {
			continue
		}
		n.contChecked = true
		if d := p.budget.dest(n.asg.TraceID); d != n.asg.TraceID {
			n.cont = d
			r.continueIn(n, d)
		}
	}
	if len(r.conts) == 0 {
		return
	}
	expiry := now.Add(p.cfg.Window + p.cfg.Grace)
	for _, c := range r.conts {
		r.queue(idmap.Op{Kind: idmap.OpSetIfAbsent, Key: idmap.ContinuationKey(c.span), ExpireAt: expiry}, func(op *idmap.Op) {
			c.emit = !op.Found
		})
	}
	r.flush()
}

// rewriteActivitySpans moves each settled item's span under its object's span (with an owner
// link when the object's trace is not its owner's) and decides the rest: duplicates are marked
// for removal (and counted), held items are marked for removal and returned in toHold, and spans
// whose object stayed unsettled pass on as received. remove is indexed by span ordinal.
func (p *objectLinkProcessor) rewriteActivitySpans(ctx context.Context, r *resolver, items []item, spans int) (remove []bool, toHold []int) {
	remove = make([]bool, spans)
	duplicates, continued, follows := 0, 0, 0
	for i := range items {
		it := &items[i]
		if it.dup {
			remove[it.pos] = true
			duplicates++
			p.logger.Debug("Dropping duplicate activity span", zap.Stringer("span_id", it.span.SpanID()))
			continue
		}
		n := it.node.resolve()
		switch n.state {
		case stHeld:
			remove[it.pos] = true
			toHold = append(toHold, i)
			continue
		case stFinal:
		default:
			// Unsettled after every round (a store that keeps failing): the span keeps the
			// per-object trace its receiver derived, which is still a valid trace.
			p.logger.Debug("Object assignment unsettled; passing the span on as received", zap.String("object", string(n.id.key)))
			continue
		}
		s := it.span
		if it.follow {
			p.rewriteFollowed(r, it, n)
			follows++
			continue
		}
		n.observe(s)
		if !n.cont.IsEmpty() {
			s.SetTraceID(n.cont)
			s.SetParentSpanID(model.ContinuationSpanID(n.asg.SpanID, n.cont))
			continued++
		} else {
			s.SetTraceID(n.asg.TraceID)
			s.SetParentSpanID(n.asg.SpanID)
		}
		r.countSpans(s.TraceID(), 1)
		if it.uidFromName && n.obj.UID != "" {
			s.Attributes().PutStr(model.AttrObjectUID, n.obj.UID)
		}
		if o := n.owner; o != nil {
			o = o.resolve()
			if o.state == stFinal && n.asg.Parent != o.asg.SpanID {
				l := s.Links().AppendEmpty()
				l.SetTraceID(o.asg.TraceID)
				l.SetSpanID(o.asg.SpanID)
				l.Attributes().PutStr(model.AttrLinkType, model.LinkTypeOwner)
			}
		}
	}
	if follows > 0 {
		p.tel.K8sObjectLinkTraceStateSpans.Add(ctx, int64(follows), metric.WithAttributes(attribute.String(attrResult, resultFollowed)))
	}
	if duplicates > 0 {
		p.tel.K8sObjectLinkSpansDropped.Add(ctx, int64(duplicates), metric.WithAttributes(attribute.String(attrReason, reasonDuplicate)))
	}
	if continued > 0 {
		p.tel.K8sObjectLinkTraceContinuations.Add(ctx, int64(continued), metric.WithAttributes(attribute.String(attrSpan, spanActivity)))
	}
	return remove, toHold
}

// holdItems holds the items at toHold and returns the batch's result so far: how many spans it
// held, the duplicate marks to undo if the batch is refused, and the object spans of spans that
// overflowed the hold (processed again, as roots, and appended to td).
func (p *objectLinkProcessor) holdItems(ctx context.Context, td ptrace.Traces, items []item, toHold []int, fresh bool) (res processResult) {
	heldPos, overflowObjects := p.holdSpans(ctx, td, items, toHold, fresh)
	res.held = len(heldPos)
	// A refused batch has its marks undone so that its redelivery passes; a held span stays in
	// our custody whatever the next consumer says, so its mark stays and catches the redelivery:
	// with Redis it is confirmed at once (marks.go), as a kill loses held spans anyway.
	var custody []string
	for i := range items {
		if items[i].mark != "" && heldPos[items[i].pos] && p.redis != nil {
			custody = append(custody, items[i].mark)
		}
		if items[i].mark != "" && !heldPos[items[i].pos] {
			if res.marks == nil {
				// Sized at the first mark, keys only: undoing a mark is deleting its key.
				res.marks = make([]string, 0, len(items)-i)
			}
			res.marks = append(res.marks, items[i].mark)
		}
	}
	p.confirmMarks(custody)
	res.objects = overflowObjects
	return res
}

func countTrue(b []bool) int {
	n := 0
	for _, v := range b {
		if v {
			n++
		}
	}
	return n
}

func removeSpans(td ptrace.Traces, remove []bool) {
	pos := 0
	td.ResourceSpans().RemoveIf(func(rs ptrace.ResourceSpans) bool {
		rs.ScopeSpans().RemoveIf(func(ss ptrace.ScopeSpans) bool {
			ss.Spans().RemoveIf(func(ptrace.Span) bool {
				pos++
				// Spans appended after the walk (released overflow) are beyond the mask.
				return pos <= len(remove) && remove[pos-1]
			})
			return ss.Spans().Len() == 0
		})
		return rs.ScopeSpans().Len() == 0
	})
}
