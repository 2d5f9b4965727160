package k8sobjectlinkprocessor

import (
	"context"
	"crypto/sha256"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/idmap"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/metadata"
)

// Spans that link to a trace context an object carries (trace_context.link_spans). KEP-5915's
// semantics are links: a component that works on an object starts its own trace and links to the
// context in the object's tracing.k8s.io/traceparent (the scheduler's SchedulePod to the Pod's,
// a controller's reconcile to its object's). The object's trace does not hold such a span, and a
// backend shows the link only from the span's side. So:
//
//   - every trace context a trusted audit span links to (the receivers' trace_context links) is
//     recorded in the ID map with the assignment of the span's object window ("k:" + trace ID +
//     span ID, the assignment's life), the first object's: a Deployment's context is copied to
//     its ReplicaSets with its annotations;
//   - a span of an untrusted door that links to such a context (its first maxLinksRead links are
//     read) gets, in that object's window trace, under the object's span, a span of its own:
//     kubetrail.span.type linked, the linking span's name, times and service.name, and a link
//     (kubetrail.link.type linked_span) to it. The linking span itself passes as it came.
//
// Like every guest's, this writes nothing to the ID map, and the linked span spends the object
// trace's max_spans_per_trace budget (none past it). Its span ID is derived from the linking
// span's IDs and the object's span, so a span delivered twice gives one linked span.

// maxLinksRead bounds the links of one span looked up: one Get each.
const maxLinksRead = 8

// linkedKey is the ID map record of a trace context an object's audit span linked to.
func linkedKey(tc model.TraceContext) string { return contextRecordKey('k', tc) }

// linker is a guest span with links that may name an object's trace context.
type linker struct {
	span    ptrace.Span
	pos     int
	service string
	found   []idmap.Assignment
}

// linkerOf returns the linker of an untrusted door's span, if it has links to look up.
func linkerOf(s ptrace.Span, pos int, resAttrs pcommon.Map) (linker, bool) {
	if s.Links().Len() == 0 {
		return linker{}, false
	}
	svc, _ := resAttrs.Get(model.AttrServiceName)
	return linker{span: s, pos: pos, service: model.BoundIdentity(svc.Str(), model.MaxTokenBytes)}, true
}

// indexContexts records the trace contexts the batch's settled audit spans link to, each with
// its object's window assignment, and writes them at once (a round trip of its own, only for
// batches with such links: writes that carry a trace context are few).
func (p *objectLinkProcessor) indexContexts(r *resolver, items []item) {
	if !p.cfg.TraceContext.LinkSpans {
		return
	}
	var seen map[string]bool
	for i := range items {
		it := &items[i]
		if it.follow || it.dup || it.span.Links().Len() == 0 {
			continue
		}
		n := it.node.resolve()
		if n.state != stFinal {
			continue // held: indexed when it is settled
		}
		for _, l := range it.span.Links().All() {
			tc, ok := linkedTraceContext(l)
			if !ok {
				continue
			}
			var buf [contextKeyBytes]byte
			kb := appendContextRecordKey(buf[:0], 'k', tc)
			if seen[string(kb)] || p.indexed.has(kb, n.asg.SpanID, r.now) {
				continue // written already: an object's context is on every write until it changes
			}
			k := string(kb)
			if seen == nil {
				seen = map[string]bool{}
			}
			seen[k] = true
			// First writer wins: a context passes from an object to the ones it makes (a
			// Deployment's annotations are copied to its ReplicaSets), and the object that
			// carried it first is the one its users worked for.
			r.writes = append(r.writes, idmap.Op{Kind: idmap.OpSetIfAbsent, Key: k, Value: n.asg.Encode(), ExpireAt: r.asgExpiry(time.Unix(0, n.id.window))})
			p.indexed.put(k, n.asg.SpanID, r.now)
		}
	}
	if len(r.writes) > 0 {
		r.flush()
	}
}

// queueLinkers asks for the objects of the contexts the linkers link to: from process memory
// first, the rest with the batch's first round trip (Gets: nothing is written).
func (p *objectLinkProcessor) queueLinkers(r *resolver, gb *guestBatch) {
	if len(gb.linkers) == 0 {
		return
	}
	var ops []idmap.Op
	var owners []*linker
	for i := range gb.linkers {
		lk := &gb.linkers[i]
		n := 0
		for _, l := range lk.span.Links().All() {
			if n == maxLinksRead {
				break
			}
			if l.TraceID().IsEmpty() || l.SpanID().IsEmpty() {
				continue
			}
			n++
			ops = append(ops, idmap.Op{Kind: idmap.OpGet, Key: linkedKey(model.TraceContext{TraceID: l.TraceID(), SpanID: l.SpanID()})})
			owners = append(owners, lk)
		}
	}
	if len(ops) == 0 {
		return
	}
	authoritative := r.deps.store.Local(ops)
	for i, lk := range owners {
		if ops[i].Found {
			if a, ok := idmap.DecodeAssignment(ops[i].Value); ok {
				lk.found = append(lk.found, a)
			}
			continue
		}
		if authoritative {
			continue
		}
		r.queue(idmap.Op{Kind: idmap.OpGet, Key: ops[i].Key}, func(op *idmap.Op) {
			if op.Found {
				if a, ok := idmap.DecodeAssignment(op.Value); ok {
					lk.found = append(lk.found, a)
				}
			}
		})
	}
}

// emitLinked appends to td, for each linker that links to an object's context and stays in
// this batch (not removed: one that waits is looked at again when it is released), a linked span
// under each such object's span.
func (p *objectLinkProcessor) emitLinked(ctx context.Context, td ptrace.Traces, r *resolver, gb *guestBatch, remove []bool) {
	if len(gb.linkers) == 0 {
		return // the receivers' batches: no allocation on the hot path
	}
	emitted, full := 0, 0
	bySvc := map[string]ptrace.SpanSlice{}
	for i := range gb.linkers {
		lk := &gb.linkers[i]
		if len(lk.found) == 0 || (lk.pos < len(remove) && remove[lk.pos]) {
			continue
		}
		var done []pcommon.SpanID
		for _, a := range lk.found {
			if containsSpanID(done, a.SpanID) {
				continue
			}
			done = append(done, a.SpanID)
			if p.budget.dest(a.TraceID) != a.TraceID {
				full++
				continue
			}
			spans, ok := bySvc[lk.service]
			if !ok {
				rs := td.ResourceSpans().AppendEmpty()
				rs.SetSchemaUrl(model.SchemaURL)
				if lk.service != "" {
					rs.Resource().Attributes().PutStr(model.AttrServiceName, lk.service)
				}
				ss := rs.ScopeSpans().AppendEmpty()
				ss.SetSchemaUrl(model.SchemaURL)
				ss.Scope().SetName(metadata.ScopeName)
				spans = ss.Spans()
				bySvc[lk.service] = spans
			}
			s, from := spans.AppendEmpty(), lk.span
			s.SetTraceID(a.TraceID)
			s.SetParentSpanID(a.SpanID)
			s.SetSpanID(linkedSpanID(from.TraceID(), from.SpanID(), a.SpanID))
			s.SetName(model.BoundIdentity(from.Name(), model.MaxNameBytes))
			s.SetKind(ptrace.SpanKindInternal)
			s.SetStartTimestamp(from.StartTimestamp())
			s.SetEndTimestamp(from.EndTimestamp())
			s.Attributes().PutStr(model.AttrSpanType, model.SpanTypeLinked)
			l := s.Links().AppendEmpty()
			l.SetTraceID(from.TraceID())
			l.SetSpanID(from.SpanID())
			l.Attributes().PutStr(model.AttrLinkType, model.LinkTypeLinkedSpan)
			r.countSpans(a.TraceID, 1)
			emitted++
		}
	}
	if emitted > 0 {
		p.tel.K8sObjectLinkUntrustedSpans.Add(ctx, int64(emitted), metric.WithAttributes(attribute.String(attrResult, resultLinked)))
	}
	if full > 0 {
		p.tel.K8sObjectLinkUntrustedSpans.Add(ctx, int64(full), metric.WithAttributes(attribute.String(attrResult, resultPassed)))
	}
}

// indexedContexts remembers the linked-context records this process wrote, for a window (the
// records live longer), so that the writes of an object that keeps its context do not write
// the same record each batch: at most max, the oldest forgotten first.
type indexedContexts struct {
	mu   sync.Mutex
	ttl  time.Duration
	m    map[string]indexedContext
	ring []string
	next int
}

type indexedContext struct {
	span pcommon.SpanID
	at   time.Time
}

// maxIndexedContexts bounds indexedContexts: about 100 bytes an entry.
const maxIndexedContexts = 16384

func newIndexedContexts(ttl time.Duration) *indexedContexts {
	return &indexedContexts{ttl: ttl, m: map[string]indexedContext{}, ring: make([]string, maxIndexedContexts)}
}

// has takes the key as bytes: the look-up of every audit span that carries a context allocates
// nothing.
func (c *indexedContexts) has(k []byte, span pcommon.SpanID, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[string(k)]
	return ok && e.span == span && now.Sub(e.at) < c.ttl
}

func (c *indexedContexts) put(k string, span pcommon.SpanID, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; !ok {
		if victim := c.ring[c.next]; victim != "" {
			delete(c.m, victim)
		}
		c.ring[c.next] = k
		c.next = (c.next + 1) % len(c.ring)
	}
	c.m[k] = indexedContext{span: span, at: now}
}

func containsSpanID(ids []pcommon.SpanID, id pcommon.SpanID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// linkedSpanID derives the linked span's ID from the linking span's IDs and the object's span.
func linkedSpanID(tid pcommon.TraceID, sid, object pcommon.SpanID) pcommon.SpanID {
	h := sha256.New()
	h.Write([]byte("kubetrail linked span\x00"))
	h.Write(tid[:])
	h.Write(sid[:])
	h.Write(object[:])
	var id pcommon.SpanID
	copy(id[:], h.Sum(nil))
	return id
}
