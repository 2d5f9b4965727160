package k8sobjectlinkprocessor

import (
	"context"
	"slices"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/metadata"
)

// The spans the processor writes itself: an object's span in its window (with its pointer span
// when placed in a trace context) and its continuation spans, and what an object span repeats of
// its activity spans.

// emitObjectSpans appends to td one object span per assignment this replica wrote first,
// ancestors included, and records their nodes in res.
func (p *objectLinkProcessor) emitObjectSpans(ctx context.Context, td ptrace.Traces, r *resolver, res *processResult) {
	b := model.NewTracesBuilder(metadata.ScopeName, "")
	emitted, placed := 0, 0
	for _, n := range r.order {
		if n.state == stFinal && n.won {
			p.objectSpan(b, n)
			r.countSpans(n.asg.TraceID, 1)
			res.objects = append(res.objects, n)
			emitted++
			if n.placed() {
				emitted++ // its pointer span
				placed++
			}
		}
	}
	continued := 0
	for _, c := range r.conts {
		if c.emit {
			p.continuationSpan(b, c)
			r.countSpans(c.trace, 1)
			res.conts = append(res.conts, c)
			continued++
		}
	}
	if continued > 0 {
		p.tel.K8sObjectLinkTraceContinuations.Add(ctx, int64(continued), metric.WithAttributes(attribute.String(attrSpan, spanContinuation)))
	}
	if placed > 0 {
		p.tel.K8sObjectLinkTraceContextWindowsPlaced.Add(ctx, int64(placed))
	}
	if emitted > 0 || continued > 0 {
		// Continuation spans are object spans too: spans out = spans in + object spans emitted.
		p.tel.K8sObjectLinkObjectSpansEmitted.Add(ctx, int64(emitted+continued))
		b.Traces().ResourceSpans().MoveAndAppendTo(td.ResourceSpans())
	}
}

// objectSpan writes n's object span into b.
func (p *objectLinkProcessor) objectSpan(b *model.TracesBuilder, n *node) {
	s := p.appendObjectSpan(b, n, n.asg.TraceID, n.asg.SpanID, n.asg.Parent)
	if n.hasPrev {
		l := s.Links().AppendEmpty()
		l.SetTraceID(n.prev.TraceID)
		l.SetSpanID(n.prev.SpanID)
		l.Attributes().PutStr(model.AttrLinkType, model.LinkTypePreviousWindow)
	}
	for _, tc := range n.contexts {
		l := s.Links().AppendEmpty()
		l.SetTraceID(tc.TraceID)
		l.SetSpanID(tc.SpanID)
		l.SetFlags(uint32(tc.Flags))
		l.Attributes().PutStr(model.AttrLinkType, model.LinkTypeTraceContext)
	}
	if n.placed() {
		p.pointerSpan(b, n)
	}
}

// continuationSpan writes the object's span in a continuation trace into b: the same object
// span, a root of that trace, saying which trace it goes on from and linked to its span there.
func (p *objectLinkProcessor) continuationSpan(b *model.TracesBuilder, c *continuation) {
	n := c.node
	s := p.appendObjectSpan(b, n, c.trace, c.span, pcommon.SpanID{})
	s.Attributes().PutStr(model.AttrTraceContinues, n.asg.TraceID.String())
	l := s.Links().AppendEmpty()
	l.SetTraceID(n.asg.TraceID)
	l.SetSpanID(n.asg.SpanID)
	l.Attributes().PutStr(model.AttrLinkType, model.LinkTypeContinuation)
}

// appendObjectSpan appends to b an object span of n with the given IDs.
func (p *objectLinkProcessor) appendObjectSpan(b *model.TracesBuilder, n *node, trace pcommon.TraceID, span, parent pcommon.SpanID) ptrace.Span {
	s := b.AppendSpan(n.obj)
	s.SetTraceID(trace)
	s.SetSpanID(span)
	s.SetParentSpanID(parent)
	s.SetName(n.obj.ServiceName())
	s.SetKind(ptrace.SpanKindInternal)
	s.SetStartTimestamp(pcommon.NewTimestampFromTime(n.window))
	s.SetEndTimestamp(pcommon.NewTimestampFromTime(n.window.Add(p.cfg.Window)))
	attrs := s.Attributes()
	n.obj.PutOwner(attrs)
	attrs.PutStr(model.AttrSpanType, model.SpanTypeObject)
	attrs.PutStr(model.AttrWindowStart, n.window.UTC().Format(time.RFC3339))
	if n.nodeName != "" && n.obj.Kind == "Pod" && n.obj.Group == "" {
		attrs.PutStr(model.AttrNodeName, n.nodeName)
	}
	return s
}

// maxObjectContexts bounds the trace_context links of one object span: the first distinct
// contexts of the batch's writes. Each write's audit span keeps its own (at most 8, KEP-5915's
// first), so a context past the bound is still linked from the write that carried it.
const maxObjectContexts = 8

// observe takes from an activity span of n what n's object span repeats: the trace contexts
// its trace_context links point at (each distinct one once: every write to an annotated object
// carries the same context until it changes; at most maxObjectContexts) and the node a Pod span
// names.
func (n *node) observe(s ptrace.Span) {
	if v, ok := s.Attributes().Get(model.AttrNodeName); ok && v.Str() != "" {
		n.nodeName = v.Str()
	}
	for _, l := range s.Links().All() {
		tc, ok := linkedTraceContext(l)
		if !ok {
			continue
		}
		if len(n.contexts) < maxObjectContexts && !slices.ContainsFunc(n.contexts, func(c model.TraceContext) bool { return c.TraceID == tc.TraceID && c.SpanID == tc.SpanID }) {
			n.contexts = append(n.contexts, tc)
		}
	}
}
