package k8sobjectlinkprocessor

import (
	"encoding/binary"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/internal/objid"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/idmap"
)

// Two kinds of context reach an object's window from outside kubetrail (docs/design.md, Trace
// contexts):
//
//   - The annotation trace.kubernetes.io/context on an object (a CI step's `kubectl trail apply`,
//     `kubetrail annotate`): the receiver links the write's audit span to it. With
//     trace_context.nest, a root object's window created by such a write is placed IN that trace,
//     under the annotated span, so the caller's trace holds the whole rollout. The first sight of
//     each context is recorded in the ID map ("t:" record); past nest_for after it, windows only
//     link, so a context left on an object does not pull every later window into an old trace. A
//     window placed so also gets a pointer span in its derived trace, for readers that compute
//     trace IDs (kubetrail trace).
//   - The kubetrail trace-state member (internal/objid), which pkg/objecttrace puts on a
//     controller's span about an object and which every descendant inherits, across processes
//     through the tracestate header: with trace_context.follow_trace_state such spans move into
//     the trace of the object's window. Their parents stay, except a controller span's parent
//     that is the object span as the package derived it, which becomes the object's span as
//     assigned.

// contextKey is the ID map record of a trace context's first sight: its value is the start of
// the first span seen carrying it, in Unix nanoseconds.
func contextKey(tc model.TraceContext) string { return contextRecordKey('t', tc) }

// contextRecordKey is the key of a record about a trace context: the kind's letter, ':', the
// trace ID and the span ID.
func contextRecordKey(kind byte, tc model.TraceContext) string {
	var b [contextKeyBytes]byte
	return string(appendContextRecordKey(b[:0], kind, tc))
}

// contextKeyBytes is the length of a trace-context record's key.
const contextKeyBytes = 2 + 16 + 8

func appendContextRecordKey(dst []byte, kind byte, tc model.TraceContext) []byte {
	dst = append(dst, kind, ':')
	dst = append(dst, tc.TraceID[:]...)
	return append(dst, tc.SpanID[:]...)
}

func encodeFirstSeen(t time.Time) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(t.UnixNano()))
	return string(b[:])
}

func decodeFirstSeen(s string) (time.Time, bool) {
	if len(s) != 8 {
		return time.Time{}, false
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64([]byte(s)))), true
}

// Grafts. A trace context is whatever its writer put in the annotation: whoever may write one root
// object could name another object's derived trace and object span (both follow from the cluster
// name, the UID and the window) and have the window placed inside that object's tree, spending
// its trace's span budget. Every created assignment therefore marks its object span, and a root's
// also its derived trace, in the ID map (idmap.GraftTraceKey, the assignment's life), and a context that
// names a marked trace or span, or one of the batch's own objects, does not nest: its window gets
// a trace of its own and links to the context. The annotated write may still nest in any trace
// no object of the ID map owns (a CI step's, or an object's derived trace of a window the ID map
// has not seen yet): docs/security.md, Doors, says what remains.

// contextRecordLife is how long the first sight of a context is remembered: past it, a context
// still on an object would nest one window again.
const contextRecordLife = 7 * 24 * time.Hour

// spanTraceContext returns the trace context an audit span links to (the object's annotation).
func spanTraceContext(s ptrace.Span) (model.TraceContext, bool) {
	for _, l := range s.Links().All() {
		if tc, ok := linkedTraceContext(l); ok {
			return tc, true
		}
	}
	return model.TraceContext{}, false
}

// linkedTraceContext returns the trace context a trace_context link points at.
func linkedTraceContext(l ptrace.SpanLink) (model.TraceContext, bool) {
	if v, ok := l.Attributes().Get(model.AttrLinkType); !ok || v.Str() != model.LinkTypeTraceContext {
		return model.TraceContext{}, false
	}
	return model.TraceContext{TraceID: l.TraceID(), SpanID: l.SpanID(), Flags: uint8(l.Flags())}, true
}

// followed returns the object a span's kubetrail trace-state member names: spans of another
// source (typ "") or controller spans only; invalid says the span has a member that does not
// decode. Most spans carry no trace state; those cost one string check.
func followed(s ptrace.Span, typ string) (ref objid.ObjectRef, ok, invalid bool) {
	if typ != "" && typ != model.SpanTypeController {
		return ref, false, false
	}
	raw := s.TraceState().AsRaw()
	if raw == "" || !strings.Contains(raw, objid.TraceStateKey+"=") {
		return ref, false, false
	}
	v, found := objid.FindTraceState(raw)
	if !found {
		return ref, false, false // another vendor's key ends in "kubetrail"
	}
	ref, err := objid.DecodeTraceState(v)
	return ref, err == nil, err != nil
}

// followedObject is the object of a followed span: the identity a controller span carries on
// itself when it names the same UID, else the cluster and UID of the member.
func followedObject(ref objid.ObjectRef, resAttrs, attrs pcommon.Map, typ string) model.Object {
	if typ == model.SpanTypeController {
		if obj, ok := model.ObjectFromAttributes(resAttrs, attrs); ok && obj.UID == ref.UID {
			obj.Cluster = ref.Cluster
			return obj
		}
	}
	return model.Object{Cluster: ref.Cluster, UID: ref.UID}
}

// nodeContext is the trace context of a node's audit spans in the batch: tc, carried by the last
// of them, which started at start; fresh: tc was first seen less than trace_context.nest_for
// before, so a root window created now is placed in its trace.
type nodeContext struct {
	tc    model.TraceContext
	start time.Time
	fresh bool
	// graft: the context names a trace or span of an object (idmap.GraftTraceKey): it never nests.
	graft bool
}

// placed reports whether n's window was placed in the trace of its trace context.
func (n *node) placed() bool {
	return n.ctx != nil && n.asg.TraceID == n.ctx.tc.TraceID && n.asg.Parent == n.ctx.tc.SpanID
}

// pointerSpan writes, into the derived trace of n's window, the pointer to the trace the window
// was placed in: an object span of n, a root, saying where its spans are. Its span ID stands
// for the object span in another trace, as a continuation span's does (model.ContinuationSpanID).
func (p *objectLinkProcessor) pointerSpan(b *model.TracesBuilder, n *node) {
	derived := model.ObjectTraceID(n.id.key, n.window)
	s := p.appendObjectSpan(b, n, derived, model.ContinuationSpanID(n.asg.SpanID, derived), pcommon.SpanID{})
	s.Attributes().PutStr(model.AttrTracePlacedIn, n.asg.TraceID.String())
	l := s.Links().AppendEmpty()
	l.SetTraceID(n.ctx.tc.TraceID)
	l.SetSpanID(n.ctx.tc.SpanID)
	l.SetFlags(uint32(n.ctx.tc.Flags))
	l.Attributes().PutStr(model.AttrLinkType, model.LinkTypeTraceContext)
}

// queueContexts records the first sight of the trace contexts the batch's objects carry and
// learns whether each is still fresh enough to nest a window. The answers must be in before any
// root is created, and the memory store settles roots in the first round, so a batch with
// contexts makes this round trip first: one more, in batches of annotated objects only. Objects
// whose window is already settled locally ask nothing.
func (p *objectLinkProcessor) queueContexts(r *resolver) {
	if !p.cfg.TraceContext.Nest {
		return
	}
	queued := false
	localDone := false
	var batchIDs map[[16]byte]bool // the derived traces and object spans of the batch's objects
	for _, n := range r.order {
		if n.ctx == nil {
			continue
		}
		if !localDone {
			r.localRound()
			localDone = true
		}
		if n.state == stFinal {
			continue
		}
		queued = true
		c := n.ctx
		if batchIDs == nil {
			batchIDs = make(map[[16]byte]bool, 2*len(r.order))
			for _, o := range r.order {
				batchIDs[model.ObjectTraceID(o.id.key, o.window)] = true
				var sid [16]byte
				span := model.ObjectSpanID(o.id.key, o.window)
				copy(sid[:], span[:])
				batchIDs[sid] = true
			}
		}
		var sid [16]byte
		copy(sid[:], c.tc.SpanID[:])
		c.graft = batchIDs[c.tc.TraceID] || batchIDs[sid]
		for _, key := range [...]string{idmap.GraftTraceKey(c.tc.TraceID), idmap.GraftSpanKey(c.tc.SpanID)} {
			r.queue(idmap.Op{Kind: idmap.OpGet, Key: key}, func(op *idmap.Op) {
				if op.Found {
					c.graft = true
				}
			})
		}
		// Its life is counted from now at the latest: a span start far ahead names no later expiry.
		expire := c.start.Add(contextRecordLife)
		if limit := r.now.Add(contextRecordLife); expire.After(limit) {
			expire = limit
		}
		r.queue(idmap.Op{Kind: idmap.OpSetIfAbsent, Key: contextKey(c.tc), Value: encodeFirstSeen(c.start), ExpireAt: expire},
			func(op *idmap.Op) {
				first, ok := decodeFirstSeen(op.Value)
				if !op.Found || !ok {
					first = c.start
				}
				c.fresh = c.start.Sub(first) <= p.cfg.TraceContext.NestFor
			})
	}
	if queued {
		r.flush()
	}
}

// rewriteFollowed moves a span that carries the trace-state member into its object's trace;
// the controller span whose parent is the object span as the package derived it goes under the
// object's span as assigned (or its continuation span).
func (p *objectLinkProcessor) rewriteFollowed(r *resolver, it *item, n *node) {
	s := it.span
	trace, parent := n.asg.TraceID, n.asg.SpanID
	if !n.cont.IsEmpty() {
		trace, parent = n.cont, model.ContinuationSpanID(n.asg.SpanID, n.cont)
	}
	s.SetTraceID(trace)
	if it.controller && s.ParentSpanID() != parent &&
		s.ParentSpanID() == model.ObjectSpanID(n.id.key, time.Unix(0, it.tsWindow)) {
		s.SetParentSpanID(parent)
	}
	r.countSpans(trace, 1)
}
