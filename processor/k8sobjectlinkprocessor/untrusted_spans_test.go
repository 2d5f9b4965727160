package k8sobjectlinkprocessor

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/internal/objid"
)

// A span of an untrusted door (an otlp receiver) must not write the trail (docs/security.md,
// Doors): each attack against the memory ID map and real Redis.

// untrusted is the context of a span of an otlp receiver: no mark of kubetrail's own doors.
var untrusted = context.Background()

// huge is 200 KB: the owner strings of a forged span.
var huge = strings.Repeat("x", 200<<10)

// forgedController is a forged span: a controller span naming a Pod no receiver saw, its
// owner strings 200 KB each, with a kubetrail member for the window at.
func forgedController(t *testing.T, at time.Time) ptrace.Traces {
	t.Helper()
	pod := model.Object{Cluster: "c1", Version: "v1", Resource: "pods", Kind: "Pod", Namespace: "default",
		Name: "never-seen", UID: "pod-never-seen",
		Owner: model.Owner{APIVersion: huge, Kind: huge, Name: huge, UID: huge}}
	return followedBatch(t, followedSpan{name: "reconcile", obj: pod, at: at, controller: true})
}

func TestAnUntrustedDoorWritesNothing(t *testing.T) {
	backends(t, func(t *testing.T, cfg func() *Config) {
		c := cfg()
		c.OwnerWait = 2 * time.Second
		now := time.Now()
		h := newHarness(t, c, newFakeClock(now))
		inputs := map[string]ptrace.Traces{
			"a forged controller span naming an unseen Pod, this window": forgedController(t, now),
			"the same, a day ahead":  forgedController(t, now.Add(24*time.Hour)),
			"the same, in year 2200": forgedController(t, time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)),
			"a span of another source with an object's identity and 200 KB owner strings": func() ptrace.Traces {
				td := batch(activity{obj: model.Object{Cluster: "c1", Version: "v1", Resource: "pods", Kind: "Pod",
					Namespace: "default", Name: "p", UID: "pod-p", Owner: model.Owner{APIVersion: huge, Kind: huge, Name: huge, UID: huge}},
					id: "x", at: now})
				td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0).Attributes().Remove(model.AttrSpanType)
				return td
			}(),
		}
		for name, td := range inputs {
			want := ptrace.NewTraces()
			td.CopyTo(want)
			if err := h.p.ConsumeTraces(untrusted, td); err != nil {
				t.Fatal(err)
			}
			if recs := h.records(); len(recs) != 0 {
				t.Fatalf("%s: the ID map holds %d records, want none", name, len(recs))
			}
			if got := len(h.objectSpans()); got != 0 {
				t.Fatalf("%s: %d object spans emitted", name, got)
			}
			// The span waits for an assignment (its own hold) or passes as it came; either way it
			// is unchanged.
			h.clock.Advance(3 * time.Second)
			if err := h.p.release(context.Background(), false); err != nil {
				t.Fatal(err)
			}
			if recs := h.records(); len(recs) != 0 {
				t.Fatalf("%s: after the wait the ID map holds %d records, want none", name, len(recs))
			}
			all := h.sink.AllTraces()
			got := all[len(all)-1]
			ws := want.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0)
			gs := got.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0)
			if gs.TraceID() != ws.TraceID() || gs.ParentSpanID() != ws.ParentSpanID() || gs.Name() != ws.Name() {
				t.Fatalf("%s: the span did not pass as it came: trace %s parent %s, want %s %s", name,
					gs.TraceID(), gs.ParentSpanID(), ws.TraceID(), ws.ParentSpanID())
			}
		}
	})
}

func TestSpansClaimingToBeKubetrailsThroughAnUntrustedDoorAreRefusedAndCounted(t *testing.T) {
	backends(t, func(t *testing.T, cfg func() *Config) {
		sink := new(consumertest.TracesSink)
		h, reader := newMeteredHarness(t, cfg(), newFakeClock(t0), sink, sink)
		if err := h.p.Start(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
		claims := batch(audit(deploy, "forged", t0.Add(time.Second)), event(rsA, "forged-event", t0.Add(time.Second)))
		obj := batch(audit(podA1, "object", t0.Add(time.Second)))
		obj.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0).Attributes().PutStr(model.AttrSpanType, model.SpanTypeObject)
		obj.ResourceSpans().MoveAndAppendTo(claims.ResourceSpans())
		// A forged linked span (only k8s_object_link emits them, linked.go) is refused too.
		linked := batch(audit(podA1, "linked", t0.Add(time.Second)))
		linked.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0).Attributes().PutStr(model.AttrSpanType, model.SpanTypeLinked)
		linked.ResourceSpans().MoveAndAppendTo(claims.ResourceSpans())
		other := claims.ResourceSpans().AppendEmpty()
		other.Resource().Attributes().PutStr("service.name", "ci")
		other.ScopeSpans().AppendEmpty().Spans().AppendEmpty().SetName("deploy step")
		if err := h.p.ConsumeTraces(untrusted, claims); err != nil {
			t.Fatal(err)
		}
		if recs := h.records(); len(recs) != 0 {
			t.Fatalf("the ID map holds %d records, want none", len(recs))
		}
		var names []string
		for _, s := range h.spans() {
			names = append(names, s.span.Name())
		}
		if len(names) != 1 || names[0] != "deploy step" {
			t.Fatalf("passed on %v, want only the span that claimed nothing", names)
		}
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		if got := sumOf(rm, "otelcol_k8s_object_link_spans_dropped", attribute.String(attrReason, reasonUntrustedClaim)); got != 4 {
			t.Fatalf("spans_dropped{untrusted_claim} = %d, want 4", got)
		}
		// The same spans through kubetrail's own door are placed, as always.
		h.consume(audit(deploy, "real", t0.Add(time.Second)))
		if len(h.records()) == 0 {
			t.Fatal("a trusted span wrote nothing")
		}
	})
}

func TestAnUntrustedSpanFollowsOnlyAnExistingAssignmentNearNow(t *testing.T) {
	backends(t, func(t *testing.T, cfg func() *Config) {
		now := time.Now()
		w := model.WindowStart(now, model.DefaultWindow)
		h := newHarness(t, cfg(), newFakeClock(now))
		h.consume(audit(deploy, "create", w.Add(time.Second)), audit(rsA, "rs", w.Add(2*time.Second)))
		before := len(h.records())
		if err := h.p.ConsumeTraces(untrusted, followedBatch(t,
			followedSpan{name: "reconcile", obj: rsA, at: w.Add(3 * time.Second), controller: true},
			followedSpan{name: "child", obj: rsA, at: w.Add(3 * time.Second), parent: pcommon.SpanID{0xc0, 1}},
		)); err != nil {
			t.Fatal(err)
		}
		dep, rs := h.one("Deployment default/demo"), h.one("ReplicaSet default/demo-a")
		rec, child := h.activitySpan("reconcile"), h.activitySpan("child")
		assertChild(t, rs, rec)
		assertChild(t, rec, child)
		if rec.TraceID() != dep.TraceID() {
			t.Fatal("the reconcile is not in the root's trace")
		}
		if after := len(h.records()); after != before {
			t.Fatalf("following wrote the ID map: %d records, %d before", after, before)
		}
		// A window outside doors.follow_windows is not followed, even of a known object.
		for _, at := range []time.Time{w.Add(-3 * model.DefaultWindow), w.Add(2 * model.DefaultWindow)} {
			td := followedBatch(t, followedSpan{name: "far " + at.String(), obj: rsA, at: at, controller: true})
			wantTrace := td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0).TraceID()
			if err := h.p.ConsumeTraces(untrusted, td); err != nil {
				t.Fatal(err)
			}
			if got := h.activitySpan("far " + at.String()); got.TraceID() != wantTrace {
				t.Fatalf("a span of the window at %s was moved", at)
			}
		}
		if after := len(h.records()); after != before {
			t.Fatalf("far windows wrote the ID map: %d records, %d before", after, before)
		}
	})
}

func TestUntrustedSpansWaitInAHoldOfTheirOwn(t *testing.T) {
	backends(t, func(t *testing.T, cfg func() *Config) {
		c := cfg()
		c.OwnerWait = 2 * time.Second
		c.MaxHeldSpans = 2
		c.Doors.MaxWaitingSpans = 3
		now := time.Now()
		w := model.WindowStart(now, model.DefaultWindow)
		h := newHarness(t, c, newFakeClock(now))
		// Spans of 50 objects no receiver saw: at most 3 wait, the rest pass as they came.
		var unknown []followedSpan
		for i := range 50 {
			obj := rsA
			obj.UID = "unseen-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
			unknown = append(unknown, followedSpan{name: "unknown", obj: obj, at: now, controller: true})
		}
		if err := h.p.ConsumeTraces(untrusted, followedBatch(t, unknown...)); err != nil {
			t.Fatal(err)
		}
		h.p.heldMu.Lock()
		waiting, held := len(h.p.waiting), len(h.p.held)
		h.p.heldMu.Unlock()
		if waiting != 3 || held != 0 {
			t.Fatalf("%d spans wait and %d are held, want 3 and 0", waiting, held)
		}
		if got := h.sink.SpanCount(); got != 47 {
			t.Fatalf("%d spans passed on, want 47", got)
		}
		// A real span whose owner is unknown is held, as before, and not released early.
		h.consume(audit(withoutOwner(rsB), "rs-b", w.Add(time.Second)))
		h.p.heldMu.Lock()
		held = len(h.p.held)
		h.p.heldMu.Unlock()
		if held != 1 {
			t.Fatalf("the real span is not held (%d held)", held)
		}
		// The object of a waiting span gets its assignment: the span follows it once released.
		h.p.heldMu.Lock()
		firstUID := h.p.waiting[0].td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0).TraceState().AsRaw()
		h.p.heldMu.Unlock()
		v, _ := objid.FindTraceState(firstUID)
		ref, err := objid.DecodeTraceState(v)
		if err != nil {
			t.Fatal(err)
		}
		seen := withoutOwner(rsA)
		seen.UID, seen.NoOwner = ref.UID, true
		h.consume(audit(seen, "seen", w.Add(2*time.Second)))
		if err := h.p.release(context.Background(), false); err != nil {
			t.Fatal(err)
		}
		obj := h.one("ReplicaSet default/demo-a")
		followed := 0
		for _, s := range h.spans() {
			if s.span.Name() == "unknown" && s.span.TraceID() == obj.TraceID() && s.span.ParentSpanID() == obj.SpanID() {
				followed++
			}
		}
		if followed != 1 {
			t.Fatalf("%d waiting spans followed the new assignment, want 1", followed)
		}
	})
}

func TestATrustedHopIsTrustedByItsSecretOnly(t *testing.T) {
	c := memoryConfig()
	c.Doors.TrustedHop.Secret = "0123456789abcdef0123"
	with := func(v string) context.Context {
		return client.NewContext(context.Background(), client.Info{Metadata: client.NewMetadata(map[string][]string{"X-Kubetrail-Door": {v}})})
	}
	for _, tt := range []struct {
		name string
		ctx  context.Context
		want bool
	}{
		{"the secret", with("0123456789abcdef0123"), true},
		{"another value", with("0123456789abcdef0124"), false},
		{"no header", context.Background(), false},
		{"kubetrail's own receivers", trustedCtx, true},
	} {
		h := newHarness(t, c, newFakeClock(t0))
		if err := h.p.ConsumeTraces(tt.ctx, batch(audit(deploy, "hop", t0.Add(time.Second)))); err != nil {
			t.Fatal(err)
		}
		if got := len(h.records()) > 0; got != tt.want {
			t.Errorf("%s: trusted = %v, want %v", tt.name, got, tt.want)
		}
	}
}
