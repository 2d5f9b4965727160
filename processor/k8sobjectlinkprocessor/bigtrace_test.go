package k8sobjectlinkprocessor

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/idmap"
)

// A DaemonSet rolled out over thousands of nodes (issue 22, item 9): its window's trace would
// hold every Pod's span and activity, tens of thousands of spans, which backends refuse or cut.

// daemonSetRollout is the activity of a rollout of pods Pods of one DaemonSet, in webhook-sized
// batches, within one window: each Pod is created, bound and reported running in turn; the
// DaemonSet's status is updated every 100 Pods; at the end every Pod is reported ready, long
// after the trace its span is in filled up.
func daemonSetRollout(pods, batchSize int, start time.Time) (ds model.Object, batches [][]activity) {
	ds = model.Object{Cluster: "c1", Group: "apps", Version: "v1", Resource: "daemonsets", Kind: "DaemonSet",
		Namespace: "kube-system", Name: "node-agent", UID: "ds-1", NoOwner: true}
	var acts []activity
	at := start
	pod := func(i int) model.Object {
		return model.Object{Cluster: "c1", Version: "v1", Resource: "pods", Kind: "Pod", Namespace: "kube-system",
			Name: fmt.Sprintf("node-agent-%05d", i), UID: fmt.Sprintf("pod-%05d", i), Owner: ownerOf(ds)}
	}
	acts = append(acts, audit(ds, "ds-update", at))
	for i := range pods {
		at = at.Add(200 * time.Millisecond)
		p := pod(i)
		acts = append(acts, audit(p, fmt.Sprintf("create-%d", i), at), audit(p, fmt.Sprintf("bind-%d", i), at.Add(time.Millisecond)),
			event(p, fmt.Sprintf("scheduled-%d", i), at.Add(2*time.Millisecond)), audit(p, fmt.Sprintf("running-%d", i), at.Add(3*time.Millisecond)))
		if i%100 == 99 {
			acts = append(acts, audit(ds, fmt.Sprintf("ds-status-%d", i), at.Add(4*time.Millisecond)))
		}
	}
	for i := range pods {
		at = at.Add(10 * time.Millisecond)
		acts = append(acts, audit(pod(i), fmt.Sprintf("ready-%d", i), at))
	}
	for len(acts) > 0 {
		n := min(batchSize, len(acts))
		batches, acts = append(batches, acts[:n]), acts[n:]
	}
	return ds, batches
}

// tracesOf groups the spans passed on by trace.
func tracesOf(sink *consumertest.TracesSink) map[pcommon.TraceID][]ptrace.Span {
	out := map[pcommon.TraceID][]ptrace.Span{}
	for _, td := range sink.AllTraces() {
		for _, rs := range td.ResourceSpans().All() {
			for _, ss := range rs.ScopeSpans().All() {
				for _, s := range ss.Spans().All() {
					out[s.TraceID()] = append(out[s.TraceID()], s)
				}
			}
		}
	}
	return out
}

// checkTraceChain checks what a reader relies on: every trace is the window's trace or one of
// its continuations, within the bound and one batch; every span's parent is in its trace; every
// continuation span names and links to an object span of the trace before it; every activity
// span was passed on once.
func checkTraceChain(t *testing.T, traces map[pcommon.TraceID][]ptrace.Span, first pcommon.TraceID, limit, slack int, activities int) {
	t.Helper()
	chain := map[pcommon.TraceID]int{}
	for i, id := 0, first; i <= maxContinuations; i, id = i+1, model.ContinuationTraceID(id) {
		chain[id] = i
	}
	byID := map[[2]string]ptrace.Span{}
	for id, spans := range traces {
		for _, s := range spans {
			byID[[2]string{id.String(), s.SpanID().String()}] = s
		}
	}
	seen := map[pcommon.SpanID]int{}
	for id, spans := range traces {
		if _, ok := chain[id]; !ok {
			t.Fatalf("trace %s of %d spans is neither the window's trace nor one of its continuations", id, len(spans))
		}
		if len(spans) > limit+slack {
			t.Errorf("trace %s (part %d) holds %d spans, past the bound %d and one batch (%d)", id, chain[id]+1, len(spans), limit, slack)
		}
		for _, s := range spans {
			if spanType(s) != model.SpanTypeObject {
				seen[s.SpanID()]++
			}
			if p := s.ParentSpanID(); !p.IsEmpty() {
				if _, ok := byID[[2]string{id.String(), p.String()}]; !ok {
					t.Fatalf("span %q in trace %s has its parent %s in no span of that trace", s.Name(), id, p)
				}
			}
			if v, ok := s.Attributes().Get(model.AttrTraceContinues); ok {
				links := linkTypes(s)
				if len(links) != 1 || links[0] != model.LinkTypeContinuation {
					t.Fatalf("continuation span %q links %v, want one continuation link", s.Name(), links)
				}
				l := s.Links().At(0)
				prev, ok := byID[[2]string{l.TraceID().String(), l.SpanID().String()}]
				if !ok || l.TraceID().String() != v.Str() || spanType(prev) != model.SpanTypeObject || prev.Name() != s.Name() || !s.ParentSpanID().IsEmpty() {
					t.Fatalf("continuation span %q (continues %s) must be a root linked to its object's span in that trace; link %s/%s found=%v", s.Name(), v.Str(), l.TraceID(), l.SpanID(), ok)
				}
			}
		}
	}
	if len(seen) != activities {
		t.Errorf("%d distinct activity spans passed on, want %d", len(seen), activities)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("activity span %s passed on %d times", id, n)
		}
	}
}

// TestDaemonSetOf5000PodsIsCutIntoTracesWithinTheBound rolls a DaemonSet out over 5,000 Pods
// through one processor with the default bound: the window's trace and its continuations each
// stay within max_spans_per_trace (and one batch), nothing is lost, and the chain holds together.
func TestDaemonSetOf5000PodsIsCutIntoTracesWithinTheBound(t *testing.T) {
	const pods, batchSize = 5000, 200
	start := t0.Add(time.Minute)
	ds, batches := daemonSetRollout(pods, batchSize, start)
	o := newObserved(t)
	cfg := memoryConfig()
	sink := new(consumertest.TracesSink)
	p, err := newProcessor(o.set, cfg, sink, newFakeClock(start))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	activities := 0
	for _, b := range batches {
		activities += len(b)
		if err := p.ConsumeTraces(trustedCtx, batch(b...)); err != nil {
			t.Fatal(err)
		}
	}
	traces := tracesOf(sink)
	first := model.ObjectTraceID(ds.Key(), model.WindowStart(start, cfg.Window))
	if len(traces[first]) == 0 {
		t.Fatal("nothing in the DaemonSet's window trace")
	}
	// A batch adds at most its activity spans, an object span per activity span, and a
	// continuation span per object.
	checkTraceChain(t, traces, first, cfg.MaxSpansPerTrace, 3*batchSize, activities)
	total := 0
	for _, spans := range traces {
		total += len(spans)
	}
	if want := activities + pods + 1; total < want || len(traces) < (want+cfg.MaxSpansPerTrace-1)/cfg.MaxSpansPerTrace {
		t.Fatalf("%d spans in %d traces, want at least %d in at least %d", total, len(traces), want, (want+cfg.MaxSpansPerTrace-1)/cfg.MaxSpansPerTrace)
	}
	moved := o.counter(t, "otelcol_k8s_object_link_trace_continuations", attribute.String(attrSpan, spanActivity))
	conts := o.counter(t, "otelcol_k8s_object_link_trace_continuations", attribute.String(attrSpan, spanContinuation))
	if moved == 0 || conts == 0 {
		t.Fatalf("trace_continuations activity=%d continuation=%d, want both counted", moved, conts)
	}
	// Each continuation span emitted set its mark first; the memory store keeps those marks apart.
	if marks := p.store.(*idmap.MemoryStore).Marks().Continuation; marks != int(conts) {
		t.Fatalf("%d continuation marks held for %d continuation spans emitted", marks, conts)
	}
	// What a pipeline's accounting relies on: spans out = spans in + object spans emitted.
	if emitted := o.counter(t, "otelcol_k8s_object_link_object_spans_emitted"); int(emitted) != total-activities {
		t.Fatalf("object_spans_emitted = %d, but %d spans went out for %d activity spans in", emitted, total, activities)
	}
	t.Logf("%d activity spans and %d object spans in %d traces (largest %d); %d activity spans and %d continuation spans counted as continued",
		activities, pods+1, len(traces), largest(traces), moved, conts)
}

// TestNoBoundKeepsOneTrace: max_spans_per_trace 0 keeps today's single window trace.
func TestNoBoundKeepsOneTrace(t *testing.T) {
	start := t0.Add(time.Minute)
	_, batches := daemonSetRollout(600, 200, start)
	cfg := memoryConfig()
	cfg.MaxSpansPerTrace = 0
	h := newHarness(t, cfg, newFakeClock(start))
	for _, b := range batches {
		h.consume(b...)
	}
	if traces := tracesOf(h.sink); len(traces) != 1 {
		t.Fatalf("%d traces without a bound, want the one window trace", len(traces))
	}
}

func largest(traces map[pcommon.TraceID][]ptrace.Span) int {
	n := 0
	for _, s := range traces {
		n = max(n, len(s))
	}
	return n
}

// TestTwoReplicasShareTheTraceBoundThroughRedis deals the rollout's batches to two processors on
// one real redis-server in turn: the counts they share keep every trace within the bound and
// one batch per replica, and both continue into the same traces.
func TestTwoReplicasShareTheTraceBoundThroughRedis(t *testing.T) {
	requireRedis(t)
	const pods, batchSize = 2000, 100
	start := t0.Add(time.Minute)
	ds, batches := daemonSetRollout(pods, batchSize, start)
	cfg := redisConfig(t, redisAddr)
	cfg.MaxSpansPerTrace = 1000
	sink := new(consumertest.TracesSink)
	clk := newFakeClock(start)
	a, b := newHarnessWithNext(t, cfg, clk, sink), newHarnessWithNext(t, cfg, clk, sink)
	activities := 0
	for i, bt := range batches {
		activities += len(bt)
		if err := []*harness{a, b}[i%2].p.ConsumeTraces(trustedCtx, batch(bt...)); err != nil {
			t.Fatal(err)
		}
	}
	traces := tracesOf(sink)
	checkTraceChain(t, traces, model.ObjectTraceID(ds.Key(), model.WindowStart(start, cfg.Window)), cfg.MaxSpansPerTrace, 2*3*batchSize, activities)
	if len(traces) < 3 {
		t.Fatalf("%d traces for %d spans at a bound of %d", len(traces), activities, cfg.MaxSpansPerTrace)
	}
}

// TestARefusedBatchOwesItsContinuationSpans: the batch that first puts objects in a continuation
// trace is refused by the next consumer and redelivered; the continuation span their object
// spans hang from is still passed on (owed, like object spans), so no span is left without its
// parent.
func TestARefusedBatchOwesItsContinuationSpans(t *testing.T) {
	start := t0.Add(time.Minute)
	ds, batches := daemonSetRollout(200, 50, start)
	cfg := memoryConfig()
	cfg.MaxSpansPerTrace = 100
	sink := new(consumertest.TracesSink)
	refuse := false
	h := newHarnessConsumer(t, cfg, newFakeClock(start), refusingConsumer(sink, &refuse), sink)
	first := model.ObjectTraceID(ds.Key(), model.WindowStart(start, cfg.Window))
	refused := false
	activities := 0
	for _, b := range batches {
		activities += len(b)
		// Refuse the first batch after the window's trace is full: it creates Pods in the
		// continuation, under the DaemonSet's continuation span.
		if !refused && len(tracesOf(sink)[first]) >= cfg.MaxSpansPerTrace {
			refused, refuse = true, true
			if err := h.p.ConsumeTraces(trustedCtx, batch(b...)); err == nil {
				t.Fatal("the refusing consumer accepted the batch")
			}
			refuse = false
		}
		if err := h.p.ConsumeTraces(trustedCtx, batch(b...)); err != nil {
			t.Fatal(err)
		}
	}
	if !refused {
		t.Fatal("the window's trace never filled: nothing was refused")
	}
	checkTraceChain(t, tracesOf(sink), first, cfg.MaxSpansPerTrace, 3*50, activities)
}
