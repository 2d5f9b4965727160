package k8sobjectlinkprocessor

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/internal/objid"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/idmap"
)

// The attacks of issue 40 (docs/security.md, Doors), each against the memory ID map and real
// Redis: a span of an untrusted door (an otlp receiver) must not write the trail.

// idMapRecord is one record of the ID map as a test reads it back.
type idMapRecord struct {
	key    string // Redis only: the memory map keeps hashes
	value  string
	expire time.Time
}

// backends runs f against the memory ID map and against real Redis.
func backends(t *testing.T, f func(t *testing.T, cfg func() *Config)) {
	t.Run("memory", func(t *testing.T) { f(t, memoryConfig) })
	t.Run("redis", func(t *testing.T) {
		requireRedis(t)
		f(t, func() *Config { return redisConfig(t, redisAddr) })
	})
}

// records returns every record of h's ID map: Redis's keys under the processor's prefix with
// their values and expiries (the epoch marker aside), or the memory map's entries (duplicate marks counted as records
// without value).
func (h *harness) records() []idMapRecord {
	h.t.Helper()
	if h.p.redis != nil {
		ctx := context.Background()
		c := redis.NewClient(&redis.Options{Addr: redisAddr})
		defer c.Close()
		var out []idMapRecord
		iter := c.Scan(ctx, 0, h.p.cfg.IDMap.Redis.KeyPrefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			if k == h.p.cfg.IDMap.Redis.KeyPrefix+idmap.EpochKey {
				continue // the store's own marker of a Redis that lost its records
			}
			v, err := c.Get(ctx, k).Result()
			if err != nil {
				h.t.Fatalf("reading %q: %v", k, err)
			}
			ttl, err := c.PTTL(ctx, k).Result()
			if err != nil {
				h.t.Fatal(err)
			}
			out = append(out, idMapRecord{key: strings.TrimPrefix(k, h.p.cfg.IDMap.Redis.KeyPrefix), value: v, expire: time.Now().Add(ttl)})
		}
		return out
	}
	records, marks := h.p.store.(*idmap.MemoryStore).Records()
	var out []idMapRecord
	for _, r := range records {
		out = append(out, idMapRecord{value: r.Value, expire: r.Expire})
	}
	for range marks {
		out = append(out, idMapRecord{value: "(duplicate mark)"})
	}
	return out
}

// untrusted is the context of a span of an otlp receiver: no mark of kubetrail's own doors.
var untrusted = context.Background()

// huge is 200 KB: the owner strings of the forged span.
var huge = strings.Repeat("x", 200<<10)

// forgedController is the span: a controller span naming a Pod no receiver saw, its
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
		if got := sumOf(rm, "otelcol_k8s_object_link_spans_dropped", attribute.String(attrReason, reasonUntrustedClaim)); got != 3 {
			t.Fatalf("spans_dropped{untrusted_claim} = %d, want 3", got)
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

func TestStringsThatBecomeIDMapRecordsAreBounded(t *testing.T) {
	backends(t, func(t *testing.T, cfg func() *Config) {
		h := newHarness(t, cfg(), newFakeClock(t0))
		pod := podA1
		pod.Name = huge
		pod.Owner = model.Owner{APIVersion: huge, Kind: huge, Name: huge, UID: huge}
		h.consume(audit(pod, "big", t0.Add(time.Second)))
		recs := h.records()
		if len(recs) == 0 {
			t.Fatal("no records")
		}
		for _, r := range recs {
			// The largest: a relation of four bounded owner strings, a name key of a bounded name.
			if len(r.key) > 2<<10 || len(r.value) > 2<<10 {
				t.Fatalf("a record of %d key and %d value bytes", len(r.key), len(r.value))
			}
		}
	})
}

func TestRecordLivesAreBoundedRelativeToNow(t *testing.T) {
	backends(t, func(t *testing.T, cfg func() *Config) {
		now := time.Now()
		c := cfg()
		h := newHarness(t, c, newFakeClock(now))
		year2200 := time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
		h.consume(withContext(audit(withoutOwner(cron), "future", year2200), ciStep))
		limit := now.Add(contextRecordLife + time.Minute)
		recs := h.records()
		if len(recs) == 0 {
			t.Fatal("no records")
		}
		for _, r := range recs {
			if r.expire.After(limit) {
				t.Fatalf("a record (%q) lives until %s, past now + 7 days", r.key, r.expire)
			}
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
