package k8sobjectlinkprocessor

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/internal/objid"
)

const ciStep = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func ciContext(t *testing.T) model.TraceContext {
	t.Helper()
	tc, reason := model.ParseTraceparent(ciStep)
	if reason != "" {
		t.Fatal(reason)
	}
	return tc
}

// placedAndPointer returns the object's span in the trace it was placed in and its pointer span
// in its derived trace, failing unless there are exactly these two.
func (h *harness) placedAndPointer(name string) (placed, pointer ptrace.Span) {
	h.t.Helper()
	spans := h.objectSpans()[name]
	if len(spans) != 2 {
		h.t.Fatalf("want the object span and its pointer for %q, got %d (have %v)", name, len(spans), names(h.objectSpans()))
	}
	placed, pointer = spans[0], spans[1]
	if _, ok := placed.Attributes().Get(model.AttrTracePlacedIn); ok {
		placed, pointer = pointer, placed
	}
	if _, ok := pointer.Attributes().Get(model.AttrTracePlacedIn); !ok {
		h.t.Fatalf("neither span of %q says where it was placed", name)
	}
	return placed, pointer
}

func TestAFreshTraceContextPlacesARootWindowInItsTrace(t *testing.T) {
	tc := ciContext(t)
	h := newHarness(t, memoryConfig(), newFakeClock(t0))
	h.consume(withContext(audit(deploy, "apply", t0.Add(time.Second)), ciStep),
		audit(rsA, "rs", t0.Add(2*time.Second)), audit(podA1, "pod", t0.Add(3*time.Second)))
	dep, pointer := h.placedAndPointer("Deployment default/demo")
	if dep.TraceID() != tc.TraceID || dep.ParentSpanID() != tc.SpanID {
		t.Fatalf("Deployment: trace %s parent %s, want the context's %s %s", dep.TraceID(), dep.ParentSpanID(), tc.TraceID, tc.SpanID)
	}
	rs, pod := h.one("ReplicaSet default/demo-a"), h.one("Pod default/demo-a-1")
	assertChild(t, dep, rs)
	assertChild(t, rs, pod)
	assertChild(t, pod, h.activitySpan("audit pod"))
	assertChild(t, dep, h.activitySpan("audit apply"))

	w := model.WindowStart(t0, model.DefaultWindow)
	derived := model.ObjectTraceID(deploy.Key(), w)
	if pointer.TraceID() != derived || !pointer.ParentSpanID().IsEmpty() || pointer.SpanID() == dep.SpanID() {
		t.Fatalf("pointer: trace %s parent %s span %s; want a root of the derived trace %s with a span ID of its own",
			pointer.TraceID(), pointer.ParentSpanID(), pointer.SpanID(), derived)
	}
	if v, _ := pointer.Attributes().Get(model.AttrTracePlacedIn); v.Str() != tc.TraceID.String() {
		t.Fatalf("%s = %q, want %s", model.AttrTracePlacedIn, v.Str(), tc.TraceID)
	}
	if got := traceContextLinks(pointer); len(got) != 1 || got[0] != tc.TraceID.String()+"-"+tc.SpanID.String() {
		t.Fatalf("pointer links = %v", got)
	}
}

func TestTraceContextNestingBounds(t *testing.T) {
	tc := ciContext(t)
	t.Run("a context first seen longer than nest_for ago only links", func(t *testing.T) {
		clk := newFakeClock(t0)
		h := newHarness(t, memoryConfig(), clk)
		h.consume(withContext(audit(deploy, "apply", t0.Add(time.Second)), ciStep))
		later := t0.Add(2 * time.Hour) // four windows on, past the default nest_for (1h)
		clk.Advance(2 * time.Hour)
		h.consume(withContext(audit(deploy, "status", later), ciStep))
		var inDerived bool
		for _, s := range h.objectSpans()["Deployment default/demo"] {
			if s.TraceID() == model.ObjectTraceID(deploy.Key(), model.WindowStart(later, model.DefaultWindow)) {
				inDerived = true
				if got := traceContextLinks(s); len(got) != 1 || !s.ParentSpanID().IsEmpty() {
					t.Fatalf("the later window: links %v, parent %s", got, s.ParentSpanID())
				}
			}
		}
		if !inDerived {
			t.Fatalf("the later window is not in its derived trace: %v", names(h.objectSpans()))
		}
	})
	t.Run("an owned object carrying a context nests under its owner, not the context", func(t *testing.T) {
		h := newHarness(t, memoryConfig(), newFakeClock(t0))
		h.consume(audit(deploy, "create", t0.Add(time.Second)), withContext(audit(rsA, "rs", t0.Add(2*time.Second)), ciStep))
		assertChild(t, h.one("Deployment default/demo"), h.one("ReplicaSet default/demo-a"))
	})
	t.Run("a window settled before the context came keeps its trace and links", func(t *testing.T) {
		h := newHarness(t, memoryConfig(), newFakeClock(t0))
		h.consume(audit(deploy, "status", t0.Add(time.Second)))
		h.consume(withContext(audit(deploy, "apply", t0.Add(2*time.Second)), ciStep))
		d := h.one("Deployment default/demo")
		if d.TraceID() == tc.TraceID {
			t.Fatal("a settled window moved")
		}
		assertChild(t, d, h.activitySpan("audit apply"))
	})
	t.Run("nest off: the root keeps its derived trace", func(t *testing.T) {
		h := newHarness(t, linkOnlyConfig(), newFakeClock(t0))
		h.consume(withContext(audit(deploy, "apply", t0.Add(time.Second)), ciStep))
		if d := h.one("Deployment default/demo"); d.TraceID() == tc.TraceID || !d.ParentSpanID().IsEmpty() {
			t.Fatalf("placed with nest off: trace %s parent %s", d.TraceID(), d.ParentSpanID())
		}
	})
}

// followedSpan is a span of another source carrying the kubetrail trace-state member for obj,
// as pkg/objecttrace starts it (a controller span when controller is set) or as a descendant
// (the apiserver's request span, a client span) inherits it.
type followedSpan struct {
	name       string
	obj        model.Object
	at         time.Time
	controller bool
	parent     pcommon.SpanID // default: the object span as derived
	traceState string         // default: the member for obj
	server     string         // an apiserver request span with this audit ID
}

func followedBatch(t *testing.T, spans ...followedSpan) ptrace.Traces {
	t.Helper()
	td := ptrace.NewTraces()
	for i, f := range spans {
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("service.name", "childmaker")
		s := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
		w := model.WindowStart(f.at, model.DefaultWindow)
		key := f.obj.Key()
		s.SetTraceID(model.ObjectTraceID(key, w))
		s.SetSpanID(pcommon.SpanID{0xc0, byte(i + 1)})
		s.SetParentSpanID(model.ObjectSpanID(key, w))
		if !f.parent.IsEmpty() {
			s.SetParentSpanID(f.parent)
		}
		s.SetName(f.name)
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(f.at))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(f.at.Add(time.Millisecond)))
		ts := f.traceState
		if ts == "" {
			v, err := objid.EncodeTraceState(objid.ObjectRef{Cluster: f.obj.Cluster, UID: f.obj.UID, Window: w})
			if err != nil {
				t.Fatal(err)
			}
			ts = "congo=t61rcWkgMzE," + objid.TraceStateKey + "=" + v
		}
		s.TraceState().FromRaw(ts)
		if f.controller {
			a := s.Attributes()
			a.PutStr(model.AttrSpanType, model.SpanTypeController)
			a.PutStr(model.AttrControllerName, "childmaker")
			a.PutStr(model.AttrObjectAPIGroup, f.obj.Group)
			a.PutStr(model.AttrObjectKind, f.obj.Kind)
			a.PutStr(model.AttrNamespaceName, f.obj.Namespace)
			a.PutStr(model.AttrObjectName, f.obj.Name)
			a.PutStr(model.AttrObjectUID, f.obj.UID)
			f.obj.PutOwner(a)
		}
		if f.server != "" {
			s.SetKind(ptrace.SpanKindServer)
			s.Attributes().PutStr(attrAPIServerAuditID, f.server)
		}
	}
	return td
}

func TestSpansCarryingTheTraceStateMemberJoinTheirObjectsTrace(t *testing.T) {
	reconcile := func(at time.Time) []followedSpan {
		return []followedSpan{
			{name: "reconcile", obj: rsA, at: at, controller: true},
			{name: "create child", obj: rsA, at: at, parent: pcommon.SpanID{0xc0, 1}},
			{name: "apiserver POST", obj: rsA, at: at, parent: pcommon.SpanID{0xc0, 2}, server: "req-1"},
		}
	}
	check := func(t *testing.T, h *harness) {
		t.Helper()
		dep, rs := h.one("Deployment default/demo"), h.one("ReplicaSet default/demo-a")
		rec, child, api := h.activitySpan("reconcile"), h.activitySpan("create child"), h.activitySpan("apiserver POST")
		assertChild(t, rs, rec)
		assertChild(t, rec, child)
		assertChild(t, child, api)
		if rec.TraceID() != dep.TraceID() {
			t.Fatal("the reconcile is not in the root's trace")
		}
	}
	t.Run("after the object's own spans", func(t *testing.T) {
		h := newHarness(t, memoryConfig(), newFakeClock(t0))
		h.consume(audit(deploy, "create", t0.Add(time.Second)), audit(rsA, "rs", t0.Add(2*time.Second)))
		if err := h.p.ConsumeTraces(trustedCtx, followedBatch(t, reconcile(t0.Add(3*time.Second))...)); err != nil {
			t.Fatal(err)
		}
		check(t, h)
	})
	t.Run("before them: the controller span names the owner", func(t *testing.T) {
		h := newHarness(t, memoryConfig(), newFakeClock(t0))
		if err := h.p.ConsumeTraces(trustedCtx, followedBatch(t, reconcile(t0.Add(time.Second))...)); err != nil {
			t.Fatal(err)
		}
		h.consume(audit(deploy, "create", t0.Add(2*time.Second)), audit(rsA, "rs", t0.Add(3*time.Second)))
		check(t, h)
	})
	t.Run("descendants in a later window stay in the member's window", func(t *testing.T) {
		h := newHarness(t, memoryConfig(), newFakeClock(t0))
		h.consume(audit(deploy, "create", t0.Add(time.Second)), audit(rsA, "rs", t0.Add(2*time.Second)))
		spans := reconcile(t0.Add(29*time.Minute + 59*time.Second))
		late := followedBatch(t, spans...)
		// The API call crossed into the next window; its member still names the first.
		api := late.ResourceSpans().At(2).ScopeSpans().At(0).Spans().At(0)
		api.SetStartTimestamp(pcommon.NewTimestampFromTime(t0.Add(30*time.Minute + time.Second)))
		if err := h.p.ConsumeTraces(trustedCtx, late); err != nil {
			t.Fatal(err)
		}
		check(t, h)
	})
	t.Run("follow_trace_state off, or a malformed member: the spans pass as they are", func(t *testing.T) {
		for _, tt := range []struct {
			name   string
			cfg    *Config
			member string
		}{
			{"off", func() *Config { c := memoryConfig(); c.TraceContext.FollowTraceState = false; return c }(), ""},
			{"malformed", memoryConfig(), "kubetrail=1/zz!/x/c1"},
		} {
			h := newHarness(t, tt.cfg, newFakeClock(t0))
			h.consume(audit(deploy, "create", t0.Add(time.Second)), audit(rsA, "rs", t0.Add(2*time.Second)))
			in := followedSpan{name: "reconcile", obj: rsA, at: t0.Add(3 * time.Second), controller: true, traceState: tt.member}
			td := followedBatch(t, in)
			want := td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0)
			wantTrace, wantParent := want.TraceID(), want.ParentSpanID()
			if err := h.p.ConsumeTraces(trustedCtx, td); err != nil {
				t.Fatal(err)
			}
			got := h.activitySpan("reconcile")
			if got.TraceID() != wantTrace || got.ParentSpanID() != wantParent {
				t.Fatalf("%s: the span moved to %s under %s", tt.name, got.TraceID(), got.ParentSpanID())
			}
		}
	})
}

func TestTraceContextTelemetry(t *testing.T) {
	sink := new(consumertest.TracesSink)
	h, reader := newMeteredHarness(t, memoryConfig(), newFakeClock(t0), sink, sink)
	p := h.p

	h.consume(withContext(audit(deploy, "apply", t0.Add(time.Second)), ciStep), audit(rsA, "rs", t0.Add(2*time.Second)))
	spans := []followedSpan{
		{name: "reconcile", obj: rsA, at: t0.Add(3 * time.Second), controller: true},
		{name: "child", obj: rsA, at: t0.Add(3 * time.Second), parent: pcommon.SpanID{0xc0, 1}},
		{name: "bad", obj: rsA, at: t0.Add(3 * time.Second), traceState: "kubetrail=1/zz!/x/c1"},
	}
	if err := p.ConsumeTraces(trustedCtx, followedBatch(t, spans...)); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		metric string
		attrs  []attribute.KeyValue
		want   int64
	}{
		{"otelcol_k8s_object_link_trace_context_windows_placed", nil, 1},
		{"otelcol_k8s_object_link_trace_state_spans", []attribute.KeyValue{attribute.String(attrResult, resultFollowed)}, 2},
		{"otelcol_k8s_object_link_trace_state_spans", []attribute.KeyValue{attribute.String(attrResult, resultInvalid)}, 1},
		// The Deployment's object span, its pointer and the ReplicaSet's.
		{"otelcol_k8s_object_link_object_spans_emitted", nil, 3},
	} {
		if got := sumOf(rm, tt.metric, tt.attrs...); got != tt.want {
			t.Errorf("%s%v = %d, want %d", tt.metric, tt.attrs, got, tt.want)
		}
	}
}

// configMap is the attacker's root object: whoever may create one ConfigMap may annotate it.
var configMap = model.Object{Cluster: "c1", Version: "v1", Resource: "configmaps", Kind: "ConfigMap",
	Namespace: "default", Name: "graft", UID: "cm-graft", NoOwner: true}

func traceparent(trace pcommon.TraceID, span pcommon.SpanID) string {
	return "00-" + trace.String() + "-" + span.String() + "-01"
}

func TestATraceContextNamingAnObjectsTraceDoesNotGraft(t *testing.T) {
	backends(t, func(t *testing.T, cfg func() *Config) {
		now := time.Now()
		w := model.WindowStart(now, model.DefaultWindow)
		for _, tt := range []struct {
			name string
			// victim settles the victim's window and returns the context that names its object span.
			victim func(h *harness) string
			// sameBatch sends the victim's spans in the attacker's batch.
			sameBatch bool
		}{
			{name: "its derived trace", victim: func(h *harness) string {
				h.consume(audit(withoutOwner(deploy), "victim", w.Add(time.Second)))
				return traceparent(model.ObjectTraceID(deploy.Key(), w), model.ObjectSpanID(deploy.Key(), w))
			}},
			{name: "its assigned trace, a CI step's", victim: func(h *harness) string {
				h.consume(withContext(audit(withoutOwner(deploy), "victim", w.Add(time.Second)), ciStep))
				tc, _ := model.ParseTraceparent(ciStep)
				return traceparent(tc.TraceID, model.ObjectSpanID(deploy.Key(), w))
			}},
			{name: "an owned object's span in its root's trace", victim: func(h *harness) string {
				h.consume(audit(withoutOwner(deploy), "victim", w.Add(time.Second)), audit(rsA, "victim-rs", w.Add(time.Second)))
				return traceparent(model.ObjectTraceID(deploy.Key(), w), model.ObjectSpanID(rsA.Key(), w))
			}},
			{name: "its derived trace, in the same batch", sameBatch: true, victim: func(*harness) string {
				return traceparent(model.ObjectTraceID(deploy.Key(), w), model.ObjectSpanID(deploy.Key(), w))
			}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				sink := new(consumertest.TracesSink)
				c := cfg()
				h, reader := newMeteredHarness(t, c, newFakeClock(now), sink, sink)
				if err := h.p.Start(context.Background(), nil); err != nil {
					t.Fatal(err)
				}
				tp := tt.victim(h)
				acts := []activity{withContext(audit(configMap, "graft", w.Add(2*time.Second)), tp)}
				if tt.sameBatch {
					acts = append([]activity{audit(withoutOwner(deploy), "victim", w.Add(time.Second))}, acts...)
				}
				h.consume(acts...)
				named, _ := model.ParseTraceparent(tp)
				victim := named.TraceID // the trace the victim's object span is in
				budgetBefore := h.p.budget.known[victim].total
				h.consume(audit(configMap, "update", w.Add(3*time.Second)), audit(configMap, "update-2", w.Add(4*time.Second)))
				cm := h.one("ConfigMap default/graft")
				if cm.TraceID() != model.ObjectTraceID(configMap.Key(), w) || !cm.ParentSpanID().IsEmpty() {
					t.Fatalf("the ConfigMap went to trace %s under %s: grafted into the Deployment's (%s)", cm.TraceID(), cm.ParentSpanID(), victim)
				}
				if links := traceContextLinks(cm); len(links) != 1 {
					t.Fatalf("the ConfigMap's span links %v, want its context", links)
				}
				for _, s := range h.spans() {
					if s.span.TraceID() == victim && (strings.Contains(s.span.Name(), "graft") || strings.Contains(s.span.Name(), "update")) {
						t.Fatalf("%s is in the Deployment's trace", s.span.Name())
					}
				}
				if got := h.p.budget.known[victim].total; got != budgetBefore {
					t.Fatalf("the Deployment's trace budget went from %d to %d spans", budgetBefore, got)
				}
				var rm metricdata.ResourceMetrics
				if err := reader.Collect(context.Background(), &rm); err != nil {
					t.Fatal(err)
				}
				if got := sumOf(rm, "otelcol_k8s_object_link_trace_context_grafts"); got != 1 {
					t.Fatalf("trace_context_grafts = %d, want 1", got)
				}
			})
		}
	})
}

func TestAContextOfAnotherProgramStillNestsBesideAnObjectPlacedThere(t *testing.T) {
	backends(t, func(t *testing.T, cfg func() *Config) {
		now := time.Now()
		w := model.WindowStart(now, model.DefaultWindow)
		h := newHarness(t, cfg(), newFakeClock(now))
		// One CI step applies two objects: both nest under its span.
		h.consume(withContext(audit(withoutOwner(deploy), "apply", w.Add(time.Second)), ciStep))
		h.consume(withContext(audit(configMap, "apply-cm", w.Add(2*time.Second)), ciStep))
		tc, _ := model.ParseTraceparent(ciStep)
		for _, name := range []string{"Deployment default/demo", "ConfigMap default/graft"} {
			placed, _ := h.placedAndPointer(name)
			if placed.TraceID() != tc.TraceID || placed.ParentSpanID() != tc.SpanID {
				t.Fatalf("%s: trace %s under %s, want the CI step's", name, placed.TraceID(), placed.ParentSpanID())
			}
		}
	})
}
