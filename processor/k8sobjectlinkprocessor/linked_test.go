package k8sobjectlinkprocessor

import (
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/kubetrail/kubetrail/internal/model"
)

// linkingBatch is one span of another component (service svc) that links to the given
// contexts, as KEP-5915's consumers do: the scheduler's SchedulePod to the Pod's context.
func linkingBatch(svc, name string, at time.Time, to ...model.TraceContext) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr(model.AttrServiceName, svc)
	s := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	s.SetTraceID(newTraceID())
	s.SetSpanID(spanIDOf(name))
	s.SetName(name)
	s.SetStartTimestamp(pcommon.NewTimestampFromTime(at))
	s.SetEndTimestamp(pcommon.NewTimestampFromTime(at.Add(3 * time.Millisecond)))
	for _, tc := range to {
		l := s.Links().AppendEmpty()
		l.SetTraceID(tc.TraceID)
		l.SetSpanID(tc.SpanID)
	}
	return td
}

// A span of another door that links to a trace context a Pod's write carried gets a linked span
// under the Pod's object span, linking back to it; it passes as it came; a span linking to a
// context no object carried gets nothing; the ID map is only read.
func TestASpanLinkingToAnObjectsContextIsFoundFromTheObject(t *testing.T) {
	backends(t, func(t *testing.T, cfg func() *Config) {
		now := time.Now()
		w := model.WindowStart(now, model.DefaultWindow)
		h := newHarness(t, cfg(), newFakeClock(now))
		root := deploy
		root.NoOwner = true
		podCtx := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		h.consume(audit(root, "create", w.Add(time.Second)), audit(rsA, "rs", w.Add(2*time.Second)),
			withContext(audit(podA1, "pod", w.Add(3*time.Second)), podCtx))
		pod := h.one("Pod default/demo-a-1")
		records := len(h.records())
		tc, _ := model.ParseTraceparent(podCtx)
		other, _ := model.ParseTraceparent("00-11111111111111111111111111111111-2222222222222222-01")

		in := linkingBatch("kube-scheduler", "SchedulePod", w.Add(4*time.Second), other, tc)
		from := ptrace.NewSpan()
		in.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0).CopyTo(from)
		for range 2 { // delivered twice: the same linked span, by its ID
			again := ptrace.NewTraces()
			in.CopyTo(again)
			h.consumeUntrusted(again)
		}
		h.consumeUntrusted(linkingBatch("kube-scheduler", "Unrelated", w.Add(5*time.Second), other))

		var linked []outSpan
		for _, o := range h.spans() {
			if spanType(o.span) == model.SpanTypeLinked {
				linked = append(linked, o)
			}
		}
		if len(linked) != 2 || linked[0].span.SpanID() != linked[1].span.SpanID() {
			t.Fatalf("%d linked spans (one per delivery, the same span ID), want 2", len(linked))
		}
		l := linked[0]
		assertChild(t, pod, l.span)
		if l.span.Name() != "SchedulePod" || l.span.StartTimestamp() != from.StartTimestamp() || l.span.EndTimestamp() != from.EndTimestamp() {
			t.Fatalf("linked span %q %v–%v", l.span.Name(), l.span.StartTimestamp(), l.span.EndTimestamp())
		}
		if svc, _ := l.resource.Get(model.AttrServiceName); svc.Str() != "kube-scheduler" {
			t.Fatalf("service %q", svc.Str())
		}
		if l.span.Links().Len() != 1 || l.span.Links().At(0).SpanID() != from.SpanID() || l.span.Links().At(0).TraceID() != from.TraceID() ||
			linkTypes(l.span)[0] != model.LinkTypeLinkedSpan {
			t.Fatalf("links %v", linkTypes(l.span))
		}
		passed := 0
		for _, s := range h.outByName("SchedulePod") {
			if spanType(s) == model.SpanTypeLinked {
				continue
			}
			passed++
			if s.TraceID() != from.TraceID() || s.ParentSpanID() != from.ParentSpanID() {
				t.Fatal("the linking span moved")
			}
		}
		if passed != 2 || onlyOut(t, h, "Unrelated").TraceID() == pod.TraceID() {
			t.Fatalf("the linking spans must pass as they came: %d", passed)
		}
		if got := len(h.records()); got != records {
			t.Fatalf("the ID map changed: %d records, %d before", got, records)
		}
	})
}

func TestLinkSpansOff(t *testing.T) {
	now := time.Now()
	w := model.WindowStart(now, model.DefaultWindow)
	cfg := memoryConfig()
	cfg.TraceContext.LinkSpans = false
	h := newHarness(t, cfg, newFakeClock(now))
	root := deploy
	root.NoOwner = true
	podCtx := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	h.consume(audit(root, "create", w.Add(time.Second)), withContext(audit(podA1, "pod", w.Add(3*time.Second)), podCtx))
	tc, _ := model.ParseTraceparent(podCtx)
	h.consumeUntrusted(linkingBatch("kube-scheduler", "SchedulePod", w.Add(4*time.Second), tc))
	for _, o := range h.spans() {
		if spanType(o.span) == model.SpanTypeLinked {
			t.Fatal("trace_context.link_spans: false emits no linked span")
		}
	}
}

// A context that passes from an object to the ones it makes (a Deployment's annotations are
// copied to its ReplicaSets) stays the first object's: the linked span goes under the Deployment.
func TestASharedContextStaysWithTheFirstObject(t *testing.T) {
	backends(t, func(t *testing.T, cfg func() *Config) {
		now := time.Now()
		w := model.WindowStart(now, model.DefaultWindow)
		c := cfg()
		c.TraceContext.Nest = false
		h := newHarness(t, c, newFakeClock(now))
		root := deploy
		root.NoOwner = true
		ctx := "00-0af7651916cd43dd8448eb211c80319c-c7ad6b7169203331-01"
		h.consume(withContext(audit(root, "create", w.Add(time.Second)), ctx))
		h.consume(withContext(audit(rsA, "rs", w.Add(2*time.Second)), ctx))
		tc, _ := model.ParseTraceparent(ctx)
		h.consumeUntrusted(linkingBatch("rollout-checker", "CheckRollout", w.Add(3*time.Second), tc))
		var linked []ptrace.Span
		for _, o := range h.spans() {
			if spanType(o.span) == model.SpanTypeLinked {
				linked = append(linked, o.span)
			}
		}
		if len(linked) != 1 {
			t.Fatalf("%d linked spans", len(linked))
		}
		assertChild(t, h.one("Deployment default/demo"), linked[0])
	})
}
