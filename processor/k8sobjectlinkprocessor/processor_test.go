package k8sobjectlinkprocessor

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/internal/storagetest"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/metadata"
)

func TestAnObjectsFirstSpanCreatesItsWindowSpan(t *testing.T) {
	h := newHarness(t, memoryConfig(), newFakeClock(t0))
	h.consume(audit(deploy, "a1", t0.Add(time.Minute)))

	obj := h.one("Deployment default/demo")
	assertRoot(t, obj)
	w := t0
	if obj.TraceID() != model.ObjectTraceID(deploy.Key(), w) || obj.SpanID() != model.ObjectSpanID(deploy.Key(), w) {
		t.Fatalf("a root's object span must carry its derived per-object IDs, got %s/%s", obj.TraceID(), obj.SpanID())
	}
	if obj.StartTimestamp().AsTime() != w || obj.EndTimestamp().AsTime() != w.Add(30*time.Minute) {
		t.Fatalf("object span must cover the window, got %s..%s", obj.StartTimestamp(), obj.EndTimestamp())
	}
	if obj.Name() != "Deployment" {
		t.Fatalf("an object span is named by its kind, got %q", obj.Name())
	}
	if o := h.objectOf(obj); o.UID != "d-1" || o.Name != "demo" || o.Namespace != "default" {
		t.Fatalf("object span's Resource must carry the object's identity, got %+v", o)
	}
	assertChild(t, obj, h.activitySpan("audit a1"))
}

func TestNesting(t *testing.T) {
	tests := []struct {
		name    string
		batches [][]activity
		tree    [][2]string // parent, child object span names
		leaves  map[string]string
	}{
		{
			name: "Deployment → ReplicaSet → Pod in one batch",
			batches: [][]activity{{
				audit(deploy, "d", t0.Add(time.Second)),
				audit(rsA, "rs", t0.Add(2*time.Second)),
				audit(podA1, "p", t0.Add(3*time.Second)),
			}},
			tree:   [][2]string{{"Deployment default/demo", "ReplicaSet default/demo-a"}, {"ReplicaSet default/demo-a", "Pod default/demo-a-1"}},
			leaves: map[string]string{"audit p": "Pod default/demo-a-1", "audit rs": "ReplicaSet default/demo-a", "audit d": "Deployment default/demo"},
		},
		{
			name: "Deployment → ReplicaSet → Pod over three batches",
			batches: [][]activity{
				{audit(deploy, "d", t0.Add(time.Second))},
				{audit(rsA, "rs", t0.Add(2*time.Second))},
				{audit(podA1, "p", t0.Add(3*time.Second))},
			},
			tree:   [][2]string{{"Deployment default/demo", "ReplicaSet default/demo-a"}, {"ReplicaSet default/demo-a", "Pod default/demo-a-1"}},
			leaves: map[string]string{"audit p": "Pod default/demo-a-1"},
		},
		{
			name: "a Pod alone brings its ReplicaSet and Deployment spans once the relation is known",
			batches: [][]activity{
				{audit(rsA, "rs", t0.Add(time.Second))},
				{event(podA1, "ev", t0.Add(31*time.Minute))},
			},
			tree: [][2]string{},
		},
		{
			name: "CronJob → Job → Pod, Pod first",
			batches: [][]activity{{
				event(jobPod, "scheduled", t0.Add(time.Second)),
				audit(job, "job", t0.Add(2*time.Second)),
				audit(cron, "cj", t0.Add(3*time.Second)),
			}},
			tree:   [][2]string{{"CronJob default/nightly", "Job default/nightly-1"}, {"Job default/nightly-1", "Pod default/nightly-1-x"}},
			leaves: map[string]string{"event scheduled": "Pod default/nightly-1-x", "audit cj": "CronJob default/nightly"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, memoryConfig(), newFakeClock(t0))
			for _, b := range tt.batches {
				h.consume(b...)
			}
			for _, e := range tt.tree {
				assertChild(t, h.one(e[0]), h.one(e[1]))
			}
			for leaf, parent := range tt.leaves {
				assertChild(t, h.one(parent), h.activitySpan(leaf))
			}
			for _, e := range tt.tree {
				if e[0] == "Deployment default/demo" || e[0] == "CronJob default/nightly" {
					assertRoot(t, h.one(e[0]))
				}
			}
		})
	}
}

func TestAPodAloneEmitsItsAncestorsInANewWindow(t *testing.T) {
	h := newHarness(t, memoryConfig(), newFakeClock(t0))
	h.consume(audit(rsA, "rs", t0.Add(time.Second)))
	// Next window: only an Event about the Pod, which names no owner; the Pod's audit span named
	// its ReplicaSet in the first window, the ReplicaSet's named the Deployment.
	h.consume(audit(podA1, "p", t0.Add(2*time.Second)))
	w2 := t0.Add(30 * time.Minute)
	h.consume(event(withoutOwner(podA1), "ev", w2.Add(time.Minute)))

	byName := h.objectSpans()
	for _, name := range []string{"Deployment default/demo", "ReplicaSet default/demo-a", "Pod default/demo-a-1"} {
		if len(byName[name]) != 2 {
			t.Fatalf("%s: want an object span in each of the two windows, got %d", name, len(byName[name]))
		}
	}
	inW2 := func(name string) ptrace.Span {
		for _, s := range byName[name] {
			if s.StartTimestamp().AsTime().Equal(w2) {
				return s
			}
		}
		t.Fatalf("no %s span in the second window", name)
		return ptrace.Span{}
	}
	assertChild(t, inW2("Deployment default/demo"), inW2("ReplicaSet default/demo-a"))
	assertChild(t, inW2("ReplicaSet default/demo-a"), inW2("Pod default/demo-a-1"))
	assertChild(t, inW2("Pod default/demo-a-1"), h.activitySpan("event ev"))
}

func TestAnObjectActiveAcrossAWindowBoundaryGetsTwoLinkedSpans(t *testing.T) {
	h := newHarness(t, memoryConfig(), newFakeClock(t0))
	h.consume(audit(deploy, "before", t0.Add(29*time.Minute)))
	h.consume(audit(deploy, "after", t0.Add(31*time.Minute)))

	spans := h.objectSpans()["Deployment default/demo"]
	if len(spans) != 2 {
		t.Fatalf("want two object spans, got %d", len(spans))
	}
	first, second := spans[0], spans[1]
	if first.TraceID() == second.TraceID() {
		t.Fatal("each window is its own trace")
	}
	if first.Links().Len() != 0 || second.Links().Len() != 1 {
		t.Fatalf("only the second window links back: %d, %d links", first.Links().Len(), second.Links().Len())
	}
	l := second.Links().At(0)
	if l.TraceID() != first.TraceID() || l.SpanID() != first.SpanID() || linkTypes(second)[0] != model.LinkTypePreviousWindow {
		t.Fatal("the link must point at the previous window's span of the same object")
	}
	assertChild(t, first, h.activitySpan("audit before"))
	assertChild(t, second, h.activitySpan("audit after"))
}

func TestDeleteAndRecreateUnderTheSameNameAreTwoObjects(t *testing.T) {
	h := newHarness(t, memoryConfig(), newFakeClock(t0))
	old := podA1
	recreated := podA1
	recreated.UID = "pod-a1-second"
	h.consume(audit(old, "create-1", t0.Add(time.Second)), audit(old, "delete-1", t0.Add(2*time.Second)))
	h.consume(audit(recreated, "create-2", t0.Add(3*time.Second)))
	// A failed write carries no UID: the name index says which object it concerned.
	h.consume(audit(withoutUID(recreated), "conflict", t0.Add(4*time.Second)))

	spans := h.objectSpans()["Pod default/demo-a-1"]
	if len(spans) != 2 || spans[0].SpanID() == spans[1].SpanID() {
		t.Fatalf("want two distinct object spans for the two UIDs, got %d", len(spans))
	}
	byUID := map[string]ptrace.Span{}
	for _, s := range spans {
		byUID[h.objectOf(s).UID] = s
	}
	assertChild(t, byUID["pod-a1"], h.activitySpan("audit delete-1"))
	assertChild(t, byUID["pod-a1-second"], h.activitySpan("audit create-2"))
	conflict := h.activitySpan("audit conflict")
	assertChild(t, byUID["pod-a1-second"], conflict)
	if v, _ := conflict.Attributes().Get(model.AttrObjectUID); v.Str() != "pod-a1-second" {
		t.Fatal("a span resolved through the name index must carry the resolved UID")
	}
}

func TestOwnerWait(t *testing.T) {
	t.Run("a held span joins its owner's trace when the owner turns up", func(t *testing.T) {
		cfg := memoryConfig()
		cfg.OwnerWait = 3 * time.Second
		clk := newFakeClock(t0.Add(time.Minute))
		h := newHarness(t, cfg, clk)
		// The chain's top waits owner_wait for its own owner, then settles as a root.
		h.consume(audit(deploy, "d", t0.Add(time.Minute)), audit(rsA, "rs", t0.Add(time.Minute)))
		if n := len(h.spans()); n != 0 {
			t.Fatalf("a chain whose top's owner is unknown waits, %d spans passed", n)
		}
		clk.Advance(4 * time.Second)
		if err := h.p.release(context.Background(), false); err != nil {
			t.Fatal(err)
		}
		assertChild(t, h.one("Deployment default/demo"), h.one("ReplicaSet default/demo-a"))

		h.consume(event(withoutOwner(podA1), "scheduled", t0.Add(time.Minute)))
		if n := len(h.spans()); n != 4 {
			t.Fatalf("the Event span must be held while its Pod's owner is unknown, %d spans passed", n)
		}
		h.consume(audit(podA1, "create", t0.Add(time.Minute)))
		clk.Advance(time.Second) // well before the Event span's deadline
		if err := h.p.release(context.Background(), false); err != nil {
			t.Fatal(err)
		}
		assertChild(t, h.one("Pod default/demo-a-1"), h.activitySpan("event scheduled"))
		assertChild(t, h.one("ReplicaSet default/demo-a"), h.one("Pod default/demo-a-1"))
	})
	t.Run("a span whose owner never turns up becomes a root after owner_wait", func(t *testing.T) {
		cfg := memoryConfig()
		cfg.OwnerWait = 3 * time.Second
		clk := newFakeClock(t0.Add(time.Minute))
		h := newHarness(t, cfg, clk)
		h.consume(event(withoutOwner(podA1), "scheduled", t0.Add(time.Minute)))
		clk.Advance(2 * time.Second)
		_ = h.p.release(context.Background(), false)
		if n := len(h.spans()); n != 0 {
			t.Fatalf("released before owner_wait: %d spans", n)
		}
		clk.Advance(2 * time.Second)
		clk.FireTickers() // through the release goroutine this time
		waitFor(t, func() bool { return len(h.spans()) == 2 })
		assertRoot(t, h.one("Pod default/demo-a-1"))
		assertChild(t, h.one("Pod default/demo-a-1"), h.activitySpan("event scheduled"))
	})
	t.Run("a root whose body shows no owner is never held", func(t *testing.T) {
		cfg := memoryConfig()
		cfg.OwnerWait = time.Hour
		h := newHarness(t, cfg, newFakeClock(t0.Add(time.Minute)))
		root := deploy
		root.NoOwner = true
		h.consume(audit(root, "d", t0.Add(time.Minute)), audit(rsA, "rs", t0.Add(time.Minute)))
		if len(h.p.held) != 0 {
			t.Fatalf("%d entries held: a body without ownerReferences is a definitive root", len(h.p.held))
		}
		assertRoot(t, h.one("Deployment default/demo"))
		assertChild(t, h.one("Deployment default/demo"), h.one("ReplicaSet default/demo-a"))
		assertChild(t, h.one("Deployment default/demo"), h.activitySpan("audit d"))
	})
	t.Run("shutdown releases every held span", func(t *testing.T) {
		cfg := memoryConfig()
		cfg.OwnerWait = time.Hour
		h := newHarness(t, cfg, newFakeClock(t0.Add(time.Minute)))
		h.consume(event(withoutOwner(podA1), "e1", t0.Add(time.Minute)), event(withoutOwner(podB1), "e2", t0.Add(time.Minute)))
		if err := h.p.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		h.activitySpan("event e1")
		h.activitySpan("event e2")
	})
	t.Run("shutdown counts and logs the held spans a refusing next consumer loses", func(t *testing.T) {
		o := newObserved(t)
		cfg := memoryConfig()
		cfg.OwnerWait = time.Hour
		refuse := false
		sink := new(consumertest.TracesSink)
		p, err := newProcessor(o.set, cfg, refusingConsumer(sink, &refuse), newFakeClock(t0.Add(time.Minute)))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(context.Background(), componenttest.NewNopHost()); err != nil {
			t.Fatal(err)
		}
		h := &harness{t: t, p: p, sink: sink}
		h.consume(event(withoutOwner(podA1), "e1", t0.Add(time.Minute)), event(withoutOwner(podB1), "e2", t0.Add(time.Minute)))
		refuse = true
		if err := p.Shutdown(context.Background()); err == nil {
			t.Fatal("Shutdown must return the next consumer's refusal")
		}
		// Two activity spans and the two Pods' object spans: each counted once.
		if n := o.counter(t, "otelcol_k8s_object_link_spans_dropped", reason("shutdown_refused")); n != 4 {
			t.Fatalf("spans_dropped{reason=shutdown_refused} = %d, want 4", n)
		}
		if o.logs.FilterMessageSnippet("they are lost").Len() == 0 {
			t.Fatal("the loss must be logged")
		}
	})
	t.Run("with storage, spans refused at shutdown wait there for the next start", func(t *testing.T) {
		o := newObserved(t)
		cfg := memoryConfig()
		cfg.OwnerWait = time.Hour
		storageID := component.MustNewID("file_storage")
		cfg.Storage = &storageID
		disk := storagetest.NewMemClient()
		host := &storagetest.Host{Host: componenttest.NewNopHost(), Extensions: map[component.ID]component.Component{
			storageID: &storagetest.Extension{Client: disk},
		}}
		refuse := true
		sink := new(consumertest.TracesSink)
		run := func() *objectLinkProcessor {
			p, err := newProcessor(o.set, cfg, refusingConsumer(sink, &refuse), newFakeClock(t0.Add(time.Minute)))
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Start(context.Background(), host); err != nil {
				t.Fatal(err)
			}
			return p
		}
		p := run()
		h := &harness{t: t, p: p, sink: sink}
		h.consume(event(withoutOwner(podA1), "e1", t0.Add(time.Minute)), event(withoutOwner(podB1), "e2", t0.Add(time.Minute)))
		if err := p.Shutdown(context.Background()); err != nil {
			t.Fatalf("nothing is lost, so Shutdown succeeds: %v", err)
		}
		if disk.Keys() != 1 || sink.SpanCount() != 0 {
			t.Fatalf("want the refused spans in storage (keys %d) and none delivered (%d)", disk.Keys(), sink.SpanCount())
		}
		// Restarted while the next consumer still refuses: kept again, through a second restart.
		p = run()
		if err := p.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		refuse = false
		p = run()
		h.p = p
		defer func() { _ = p.Shutdown(context.Background()) }()
		assertChild(t, h.one("Pod default/demo-a-1"), h.activitySpan("event e1"))
		assertChild(t, h.one("Pod default/demo-b-1"), h.activitySpan("event e2"))
		if disk.Keys() != 0 {
			t.Fatal("the stored spans must be cleared once delivered")
		}
		if n := o.counter(t, "otelcol_k8s_object_link_spans_dropped", reason("shutdown_refused")); n != 0 {
			t.Fatalf("spans_dropped{reason=shutdown_refused} = %d, want 0", n)
		}
	})
	t.Run("beyond max_held_spans spans are released at once", func(t *testing.T) {
		cfg := memoryConfig()
		cfg.OwnerWait = time.Hour
		cfg.MaxHeldSpans = 1
		h := newHarness(t, cfg, newFakeClock(t0.Add(time.Minute)))
		h.consume(event(withoutOwner(podA1), "e1", t0.Add(time.Minute)), event(withoutOwner(podB1), "e2", t0.Add(time.Minute)))
		h.activitySpan("event e2")
		if len(h.p.held) != 1 {
			t.Fatalf("want one held span, have %d", len(h.p.held))
		}
	})
}

// waitFor polls for the release goroutine, which the fake clock has already triggered.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCyclesAndSelfReferencesCannotHang(t *testing.T) {
	a := model.Object{Cluster: "c1", Group: "example.com", Version: "v1", Resource: "widgets", Kind: "Widget", Namespace: "ns", Name: "a", UID: "a"}
	b := a
	b.Name, b.UID = "b", "b"
	a.Owner = ownerOf(b)
	b.Owner = ownerOf(a)
	self := a
	self.Name, self.UID = "self", "self"
	self.Owner = ownerOf(self)
	h := newHarness(t, memoryConfig(), newFakeClock(t0))
	h.consume(audit(a, "a", t0.Add(time.Second)), audit(b, "b", t0.Add(time.Second)), audit(self, "self", t0.Add(time.Second)))

	for _, n := range []string{"audit a", "audit b", "audit self"} {
		h.activitySpan(n)
	}
	assertRoot(t, h.one("Widget ns/self"))
	wa, wb := h.one("Widget ns/a"), h.one("Widget ns/b")
	if wa.TraceID() != wb.TraceID() {
		t.Fatal("a two-object cycle is broken at one point and stays one trace")
	}
	if wa.ParentSpanID().IsEmpty() == wb.ParentSpanID().IsEmpty() {
		t.Fatal("exactly one of the two objects of a cycle must be the root")
	}
}

func TestDuplicateActivitySpansAreDroppedOnce(t *testing.T) {
	h := newHarness(t, memoryConfig(), newFakeClock(t0))
	h.consume(audit(deploy, "same", t0.Add(time.Second)), audit(deploy, "same", t0.Add(time.Second)))
	h.consume(audit(deploy, "same", t0.Add(time.Second)), audit(deploy, "other", t0.Add(time.Second)))
	if count := h.count("audit same"); count != 1 {
		t.Fatalf("a redelivered audit span must pass exactly once, passed %d times", count)
	}
	h.activitySpan("audit other")
}

func TestSpansWithoutIdentityPassThroughUntouched(t *testing.T) {
	h := newHarness(t, memoryConfig(), newFakeClock(t0))
	td := ptrace.NewTraces()
	s := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	s.SetName("GET /healthz")
	s.SetTraceID(pcommon.TraceID{1})
	s.SetSpanID(pcommon.SpanID{2})
	s.SetParentSpanID(pcommon.SpanID{3})
	want := ptrace.NewTraces()
	td.CopyTo(want)
	if err := h.p.ConsumeTraces(trustedCtx, td); err != nil {
		t.Fatal(err)
	}
	got := h.sink.AllTraces()
	if len(got) != 1 || got[0].SpanCount() != 1 {
		t.Fatal("the span must pass, alone")
	}
	g := got[0].ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0)
	if g.TraceID() != s.TraceID() || g.ParentSpanID() != (pcommon.SpanID{3}) || g.Links().Len() != 0 {
		t.Fatal("the span must be untouched")
	}
}

func TestFirstWriterWinsAndALaterOwnerAppliesFromTheNextWindow(t *testing.T) {
	h := newHarness(t, memoryConfig(), newFakeClock(t0))
	// The ReplicaSet is first seen without its owner: it becomes a root for this window.
	h.consume(event(withoutOwner(rsA), "early", t0.Add(time.Second)))
	h.consume(audit(rsA, "late", t0.Add(2*time.Second)), audit(deploy, "d", t0.Add(2*time.Second)))

	rsSpans := h.objectSpans()["ReplicaSet default/demo-a"]
	if len(rsSpans) != 1 {
		t.Fatalf("the assignment, once written, is never changed: %d spans", len(rsSpans))
	}
	assertRoot(t, rsSpans[0])
	late := h.activitySpan("audit late")
	assertChild(t, rsSpans[0], late)
	if got := linkTypes(late); len(got) != 1 || got[0] != model.LinkTypeOwner {
		t.Fatalf("the span that revealed the owner must link to the owner's span now, links %v", got)
	}
	if late.Links().At(0).SpanID() != h.one("Deployment default/demo").SpanID() {
		t.Fatal("owner link points elsewhere")
	}
	// Next window: nested.
	h.consume(audit(rsA, "next", t0.Add(31*time.Minute)))
	for _, s := range h.objectSpans()["ReplicaSet default/demo-a"] {
		if s.StartTimestamp().AsTime().Equal(t0.Add(30 * time.Minute)) {
			for _, d := range h.objectSpans()["Deployment default/demo"] {
				if d.StartTimestamp().AsTime().Equal(t0.Add(30 * time.Minute)) {
					assertChild(t, d, s)
					return
				}
			}
		}
	}
	t.Fatal("no nested ReplicaSet/Deployment pair in the next window")
}

func TestARefusedBatchIsNotMistakenForADuplicateWhenRedelivered(t *testing.T) {
	sink := new(consumertest.TracesSink)
	refuse := true
	next := refusingConsumer(sink, &refuse)
	h := newHarnessConsumer(t, memoryConfig(), newFakeClock(t0), next, sink)
	if err := h.p.ConsumeTraces(trustedCtx, batch(audit(deploy, "a1", t0.Add(time.Second)))); err == nil {
		t.Fatal("the refusal must reach the receiver")
	}
	refuse = false
	h.consume(audit(deploy, "a1", t0.Add(time.Second)))
	assertChild(t, h.one("Deployment default/demo"), h.activitySpan("audit a1"))
}

func TestOwnerLookupAsksTheAPIServerWhenNothingElseKnows(t *testing.T) {
	cfg := memoryConfig()
	cfg.OwnerWait = time.Hour // the look-up must answer, not the wait
	h := newHarness(t, cfg, newFakeClock(t0))
	h.p.lookup = newOwnerLookup(fakeMetadata(t, podA1, rsA, deploy), "c1", time.Minute, time.Second, h.clock.Now)
	h.consume(event(withoutOwner(podA1), "ev", t0.Add(time.Second)))
	assertChild(t, h.one("ReplicaSet default/demo-a"), h.one("Pod default/demo-a-1"))
	assertChild(t, h.one("Pod default/demo-a-1"), h.activitySpan("event ev"))
	// The apiserver says the Deployment has no owner: a root at once, nothing waits.
	assertRoot(t, h.one("Deployment default/demo"))
}

func TestLifecycleStartStopTwice(t *testing.T) {
	for _, backend := range []string{BackendMemory, BackendRedis} {
		t.Run(backend, func(t *testing.T) {
			f := NewFactory()
			cfg := f.CreateDefaultConfig().(*Config)
			if backend == BackendRedis {
				requireRedis(t)
				cfg.IDMap.Backend = BackendRedis
				cfg.IDMap.Redis.Addresses = []string{redisAddr}
				cfg.IDMap.Redis.KeyPrefix = uniquePrefix(t)
				cleanupPrefix(t, redisAddr, cfg.IDMap.Redis.KeyPrefix)
			}
			for range 2 {
				p, err := f.CreateTraces(context.Background(), processortest.NewNopSettings(metadata.Type), cfg, consumertest.NewNop())
				if err != nil {
					t.Fatal(err)
				}
				if err := p.Start(context.Background(), componenttest.NewNopHost()); err != nil {
					t.Fatal(err)
				}
				if err := p.ConsumeTraces(trustedCtx, batch(audit(deploy, "x", time.Now()))); err != nil {
					t.Fatal(err)
				}
				if err := p.Shutdown(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestAHeldSpanIsNotPassedTwiceWhenItsBatchIsRefusedAndRedelivered(t *testing.T) {
	sink := new(consumertest.TracesSink)
	refuse := false
	next := refusingConsumer(sink, &refuse)
	cfg := memoryConfig()
	cfg.OwnerWait = 3 * time.Second
	clk := newFakeClock(t0.Add(time.Minute))
	h := newHarnessConsumer(t, cfg, clk, next, sink)
	h.consume(audit(deploy, "d", t0.Add(time.Minute)))
	clk.Advance(4 * time.Second)
	if err := h.p.release(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	redelivered := func() ptrace.Traces {
		return batch(audit(deploy, "x", t0.Add(time.Minute)), event(withoutOwner(podB1), "held", t0.Add(time.Minute)))
	}
	refuse = true
	if err := h.p.ConsumeTraces(trustedCtx, redelivered()); err == nil {
		t.Fatal("the refusal must reach the receiver")
	}
	refuse = false
	if err := h.p.ConsumeTraces(trustedCtx, redelivered()); err != nil {
		t.Fatal(err)
	}
	clk.Advance(4 * time.Second)
	if err := h.p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.activitySpan("audit x")    // the refused span passed once, on redelivery
	h.activitySpan("event held") // the held one once, from custody
}

func TestReleasedSpansRefusedByTheNextConsumerAreHeldAgain(t *testing.T) {
	sink := new(consumertest.TracesSink)
	refuse := false
	next := refusingConsumer(sink, &refuse)
	cfg := memoryConfig()
	cfg.OwnerWait = 3 * time.Second
	clk := newFakeClock(t0.Add(time.Minute))
	h := newHarnessConsumer(t, cfg, clk, next, sink)
	h.consume(event(withoutOwner(podA1), "e", t0.Add(time.Minute)))
	clk.Advance(4 * time.Second)
	refuse = true
	if err := h.p.release(context.Background(), false); err == nil {
		t.Fatal("the refusal must be returned")
	}
	refuse = false
	if err := h.p.release(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	h.activitySpan("event e")
	assertChild(t, h.one("Pod default/demo-a-1"), h.activitySpan("event e"))
}

func TestAReceiverWindowOtherThanTheProcessorsIsWarnedAboutNamingBoth(t *testing.T) {
	o := newObserved(t)
	cfg := memoryConfig() // window 30m
	sink := new(consumertest.TracesSink)
	clk := newFakeClock(t0)
	p, err := newProcessor(o.set, cfg, sink, clk)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	warnings := func() []observer.LoggedEntry {
		return o.logs.FilterMessageSnippet("another window than k8s_object_link's").All()
	}

	// Receivers with the same window: no warning, nothing counted.
	at := t0.Add(40 * time.Minute) // in the second half hour: 30m and 1h windows start apart
	if err := p.ConsumeTraces(trustedCtx, batch(audit(deploy, "same", at))); err != nil {
		t.Fatal(err)
	}
	if len(warnings()) != 0 || o.counter(t, "otelcol_k8s_object_link_window_mismatches") != 0 {
		t.Fatal("equal windows must not warn")
	}

	// A receiver configured with window: 1h.
	hourly := func(id string) ptrace.Traces {
		td := batch(audit(rsA, id, at))
		s := td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0)
		w := model.WindowStart(at, time.Hour)
		s.SetTraceID(model.ObjectTraceID(rsA.Key(), w))
		s.SetParentSpanID(model.ObjectSpanID(rsA.Key(), w))
		return td
	}
	for _, id := range []string{"h1", "h2", "h3"} {
		if err := p.ConsumeTraces(trustedCtx, hourly(id)); err != nil {
			t.Fatal(err)
		}
	}
	w := warnings()
	if len(w) != 1 || w[0].Level != zapcore.WarnLevel {
		t.Fatalf("want one WARN (rate-limited) for three mismatched batches, got %v", w)
	}
	if f := w[0].ContextMap(); f["processor_window"] != 30*time.Minute || f["receiver_window"] != time.Hour {
		t.Fatalf("the warning must name both windows, got %v", f)
	}
	if n := o.counter(t, "otelcol_k8s_object_link_window_mismatches"); n != 3 {
		t.Fatalf("window_mismatches = %d, want 3", n)
	}
	// The spans still go on, re-parented under the processor's object spans.
	assertChild(t, (&harness{t: t, p: p, sink: sink}).one("ReplicaSet default/demo-a"), (&harness{t: t, p: p, sink: sink}).activitySpan("audit h1"))
}

// A resolver's indexes go back for the next batch cleared: a node or a name → UID pair of one
// batch must not be found by the next.
func TestResolverIndexesComeBackCleared(t *testing.T) {
	r := newResolver(context.Background(), resolverDeps{}, time.Now())
	w := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	r.node(rsA, w)
	r.names[rsA.NameKey()] = rsA.UID
	nodes, names, order := r.nodes, r.names, r.order
	if len(nodes) != 1 || len(names) != 1 || len(order) != 1 {
		t.Fatalf("before release: %d nodes, %d names, %d in order; want 1 each", len(nodes), len(names), len(order))
	}
	r.release()
	if len(nodes) != 0 || len(names) != 0 || order[0] != nil {
		t.Errorf("after release: %d nodes, %d names, order[0] = %v; want all cleared", len(nodes), len(names), order[0])
	}
	if r.nodes != nil || r.names != nil || r.order != nil {
		t.Error("the released resolver still holds its indexes")
	}
}

// During an upgrade a processor of span model 1.0 may receive spans of older receivers, whose
// identity is on every span and whose Resource names only the cluster and kind: it nests them
// as it nests its own (model.ObjectFromAttributes reads the identity there).
func TestSpansOfReceiversBeforeSpanModel1AreNested(t *testing.T) {
	h := newHarness(t, memoryConfig(), newFakeClock(t0))
	td := batch(audit(deploy, "d", t0.Add(time.Second)), audit(rsA, "rs", t0.Add(2*time.Second)), audit(podA1, "p", t0.Add(3*time.Second)))
	for _, rs := range td.ResourceSpans().All() {
		for _, ss := range rs.ScopeSpans().All() {
			for _, s := range ss.Spans().All() {
				for k, v := range rs.Resource().Attributes().All() {
					if k != model.AttrClusterName && k != model.AttrServiceName && !strings.HasPrefix(k, "k8s.pod.") &&
						!strings.HasPrefix(k, "k8s.replicaset.") && !strings.HasPrefix(k, "k8s.deployment.") {
						v.CopyTo(s.Attributes().PutEmpty(k))
					}
				}
			}
		}
		rs.Resource().Attributes().RemoveIf(func(k string, _ pcommon.Value) bool {
			return k != model.AttrClusterName && k != model.AttrServiceName
		})
		rs.SetSchemaUrl("")
	}
	if err := h.p.ConsumeTraces(trustedCtx, td); err != nil {
		t.Fatal(err)
	}
	d, rs, pod := h.one("Deployment default/demo"), h.one("ReplicaSet default/demo-a"), h.one("Pod default/demo-a-1")
	assertRoot(t, d)
	assertChild(t, d, rs)
	assertChild(t, rs, pod)
	assertChild(t, pod, h.activitySpan("audit p"))
}

func TestALateSpanOfAnOldWindowEmitsItsObjectSpanOnce(t *testing.T) {
	// The collector reads an audit log hours after it was written (a restart, a backlog): the
	// window's records must still last long enough to mark the object span as emitted.
	clk := newFakeClock(t0.Add(3 * time.Hour))
	h := newHarness(t, memoryConfig(), clk)
	h.consume(audit(deploy, "late-1", t0.Add(time.Minute)))
	clk.Advance(time.Second)
	h.consume(audit(deploy, "late-2", t0.Add(2*time.Minute)))

	obj := h.one("Deployment default/demo")
	assertChild(t, obj, h.activitySpan("audit late-1"))
	assertChild(t, obj, h.activitySpan("audit late-2"))
}

func TestAUIDLessSpanBeforeItsObjectsUIDSpanInOneBatchJoinsTheSameObject(t *testing.T) {
	// A failed write (no UID) and then a successful one (UID known) of the same new object,
	// delivered in one batch: the batch itself names the UID, so both spans are one object.
	h := newHarness(t, memoryConfig(), newFakeClock(t0))
	h.consume(audit(withoutUID(deploy), "conflict", t0.Add(time.Second)), audit(deploy, "create", t0.Add(2*time.Second)))

	obj := h.one("Deployment default/demo")
	assertChild(t, obj, h.activitySpan("audit create"))
	assertChild(t, obj, h.activitySpan("audit conflict"))
}

func TestAUIDLessSpanBeforeARecreateInOneBatchStaysWithTheObjectTheNameIndexKnew(t *testing.T) {
	// The name index names the object the name belonged to before this batch; a UID only seen
	// later in the batch (the recreated object) must not take over the spans that precede it.
	h := newHarness(t, memoryConfig(), newFakeClock(t0))
	recreated := podA1
	recreated.UID = "pod-a1-second"
	h.consume(audit(podA1, "create-1", t0.Add(time.Second)))
	h.consume(audit(withoutUID(podA1), "conflict", t0.Add(2*time.Second)), audit(recreated, "create-2", t0.Add(3*time.Second)))

	conflict := h.activitySpan("audit conflict")
	if v, _ := conflict.Attributes().Get(model.AttrObjectUID); v.Str() != "pod-a1" {
		t.Fatalf("the span before the recreate belongs to the first object, got UID %q", v.Str())
	}
}
