package k8sobjectlinkprocessor

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/kubetrail/kubetrail/internal/model"
)

// auditOf is an audit span as k8s_audit writes it: with its audit ID as k8s.audit.id.
func auditOf(obj model.Object, id string, at time.Time) activity {
	a := audit(obj, id, at)
	a.with = func(s ptrace.Span) { s.Attributes().PutStr(model.AttrAuditID, id) }
	return a
}

// apiserverRequest is what kube-apiserver exports for one traced request (k8s.io/apiserver
// endpoints/filters/traces.go, endpoints/handlers, storage/etcd3): the server span with the
// audit ID, the handler's span and an etcd call under it.
func apiserverRequest(auditID string, n uint64, at time.Time) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr(model.AttrServiceName, "apiserver")
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName("k8s.io/apiserver/pkg/endpoints/filters")
	var tid pcommon.TraceID
	binary.BigEndian.PutUint64(tid[8:], n)
	tid[0] = 0xa5
	sid := func(k uint64) pcommon.SpanID {
		var s pcommon.SpanID
		binary.BigEndian.PutUint64(s[:], n<<8|k)
		return s
	}
	add := func(name string, kind ptrace.SpanKind, id, parent pcommon.SpanID, attrs map[string]string) {
		s := ss.Spans().AppendEmpty()
		s.SetTraceID(tid)
		s.SetSpanID(id)
		s.SetParentSpanID(parent)
		s.SetName(name)
		s.SetKind(kind)
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(at))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(at.Add(3 * time.Millisecond)))
		for k, v := range attrs {
			s.Attributes().PutStr(k, v)
		}
	}
	add("POST /apis/apps/v1/namespaces/{:namespace}/deployments", ptrace.SpanKindServer, sid(1), pcommon.SpanID{},
		map[string]string{attrAPIServerAuditID: auditID, "http.target": "/apis/apps/v1/namespaces/default/deployments"})
	add("Create", ptrace.SpanKindInternal, sid(2), sid(1), map[string]string{attrAPIServerAuditID: auditID, "verb": "POST"})
	add("Create etcd3", ptrace.SpanKindInternal, sid(3), sid(2), map[string]string{"key": "/deployments/default/demo"})
	return td
}

func (h *harness) consumeTraces(td ptrace.Traces) {
	h.t.Helper()
	if err := h.p.ConsumeTraces(context.Background(), td); err != nil {
		h.t.Fatal(err)
	}
}

// joinLinks returns the span's apiserver_request links.
func joinLinks(s ptrace.Span) []ptrace.SpanLink {
	var out []ptrace.SpanLink
	for _, l := range s.Links().All() {
		if v, _ := l.Attributes().Get(model.AttrLinkType); v.Str() == model.LinkTypeAPIServerRequest {
			out = append(out, l)
		}
	}
	return out
}

// assertJoined checks that from has exactly one apiserver_request link, to the span to.
func assertJoined(t *testing.T, from, to ptrace.Span, auditID string) {
	t.Helper()
	links := joinLinks(from)
	if len(links) != 1 {
		t.Fatalf("%q has %d apiserver_request links, want 1", from.Name(), len(links))
	}
	l := links[0]
	if l.TraceID() != to.TraceID() || l.SpanID() != to.SpanID() {
		t.Fatalf("%q links to %s/%s, want %q at %s/%s", from.Name(), l.TraceID(), l.SpanID(), to.Name(), to.TraceID(), to.SpanID())
	}
	if v, _ := l.Attributes().Get(model.AttrAuditID); v.Str() != auditID {
		t.Fatalf("link audit ID = %q", v.Str())
	}
}

func TestAPIServerRequestSpansJoinAuditSpans(t *testing.T) {
	const id = "6f1c2b57-0d4e-4a59-9a53-1c1f0b6a8e21"
	request := "POST /apis/apps/v1/namespaces/{:namespace}/deployments"
	t.Run("an audit span after its request span links to it", func(t *testing.T) {
		h := newHarness(t, joinConfig(memoryConfig()), newFakeClock(t0))
		h.consumeTraces(apiserverRequest(id, 1, t0.Add(time.Second)))
		h.consume(auditOf(deploy, id, t0.Add(time.Second)))
		req, aud := h.activitySpan(request), h.activitySpan("audit "+id)
		assertJoined(t, aud, req, id)
		if len(joinLinks(req)) != 0 {
			t.Fatal("the earlier span gets no link")
		}
	})
	t.Run("a request span after its audit span links to it where the processor put it", func(t *testing.T) {
		h := newHarness(t, joinConfig(memoryConfig()), newFakeClock(t0))
		h.consume(auditOf(rsA, id, t0.Add(time.Second)), audit(deploy, "d", t0))
		h.consumeTraces(apiserverRequest(id, 1, t0.Add(time.Second)))
		aud, req := h.activitySpan("audit "+id), h.activitySpan(request)
		if aud.TraceID() != h.one("Deployment default/demo").TraceID() {
			t.Fatal("the audit span moved into its owner's trace")
		}
		assertJoined(t, req, aud, id)
		if len(joinLinks(aud)) != 0 {
			t.Fatal("the earlier span gets no link")
		}
	})
	t.Run("both in one batch: the audit span links to the request span", func(t *testing.T) {
		h := newHarness(t, joinConfig(memoryConfig()), newFakeClock(t0))
		td := apiserverRequest(id, 1, t0.Add(time.Second))
		batch(auditOf(deploy, id, t0.Add(time.Second))).ResourceSpans().MoveAndAppendTo(td.ResourceSpans())
		h.consumeTraces(td)
		req, aud := h.activitySpan(request), h.activitySpan("audit "+id)
		assertJoined(t, aud, req, id)
		if len(joinLinks(req)) != 0 {
			t.Fatal("one link per pair")
		}
	})
	t.Run("the apiserver's spans pass through unchanged but for the link", func(t *testing.T) {
		h := newHarness(t, joinConfig(memoryConfig()), newFakeClock(t0))
		h.consume(auditOf(deploy, id, t0.Add(time.Second)))
		want := apiserverRequest(id, 1, t0.Add(time.Second))
		h.consumeTraces(apiserverRequest(id, 1, t0.Add(time.Second)))
		for _, w := range want.ResourceSpans().At(0).ScopeSpans().At(0).Spans().All() {
			got := h.activitySpan(w.Name())
			if w.Name() == request {
				if got.Links().Len() != 1 {
					t.Fatalf("%d links", got.Links().Len())
				}
				got.Links().RemoveIf(func(ptrace.SpanLink) bool { return true })
			} else if got.Links().Len() != 0 {
				t.Fatalf("%q got a link", w.Name())
			}
			if got.TraceID() != w.TraceID() || got.SpanID() != w.SpanID() || got.ParentSpanID() != w.ParentSpanID() ||
				got.Name() != w.Name() || got.Kind() != w.Kind() || !got.Attributes().Equal(w.Attributes()) {
				t.Fatalf("%q changed", w.Name())
			}
		}
	})
	t.Run("a request span without its audit span and an audit span without its request span get no link", func(t *testing.T) {
		h := newHarness(t, joinConfig(memoryConfig()), newFakeClock(t0))
		h.consumeTraces(apiserverRequest("other", 1, t0))
		h.consume(auditOf(deploy, id, t0.Add(time.Second)))
		if len(joinLinks(h.activitySpan(request))) != 0 || len(joinLinks(h.activitySpan("audit "+id))) != 0 {
			t.Fatal("unrelated spans joined")
		}
	})
	t.Run("a side waits at most apiserver_join.ttl", func(t *testing.T) {
		clk := newFakeClock(t0)
		h := newHarness(t, joinConfig(memoryConfig()), clk)
		h.consumeTraces(apiserverRequest(id, 1, t0))
		clk.Advance(h.p.cfg.APIServerJoin.TTL + time.Second)
		h.consume(auditOf(deploy, id, t0.Add(time.Second)))
		if len(joinLinks(h.activitySpan("audit "+id))) != 0 {
			t.Fatal("joined after the TTL")
		}
	})
	t.Run("off, nothing joins", func(t *testing.T) {
		cfg := memoryConfig()
		cfg.APIServerJoin.Enabled = false
		h := newHarness(t, cfg, newFakeClock(t0))
		h.consumeTraces(apiserverRequest(id, 1, t0))
		h.consume(auditOf(deploy, id, t0.Add(time.Second)))
		if len(joinLinks(h.activitySpan("audit "+id))) != 0 {
			t.Fatal("joined while off")
		}
	})
}

func TestJoinMapBounds(t *testing.T) {
	var evicted []string
	clk := newFakeClock(t0)
	m := newJoinMap(APIServerJoinConfig{TTL: time.Minute, MaxEntries: 2, MaxBytes: 1 << 20}, clk.Now, func(r string) { evicted = append(evicted, r) })
	rec := joinRecord{side: sideRequest}
	m.claim("a", rec)
	m.claim("b", rec)
	m.claim("c", rec)
	if _, ok := m.peek("a"); ok || m.len() != 2 || len(evicted) != 1 || evicted[0] != "max_entries" {
		t.Fatalf("count bound: len %d, evicted %v", m.len(), evicted)
	}
	clk.Advance(2 * time.Minute)
	m.claim("d", rec)
	if m.len() != 1 || len(evicted) != 3 || evicted[2] != "expired" {
		t.Fatalf("ttl: len %d, evicted %v", m.len(), evicted)
	}
	small := newJoinMap(APIServerJoinConfig{TTL: time.Minute, MaxEntries: 100, MaxBytes: 2 * (joinEntryOverhead + 1)}, clk.Now, func(r string) { evicted = append(evicted, r) })
	for _, id := range []string{"x", "y", "z"} {
		small.claim(id, rec)
	}
	if small.len() != 2 || evicted[len(evicted)-1] != "max_bytes" {
		t.Fatalf("byte bound: len %d, evicted %v", small.len(), evicted)
	}
	if other, ok := small.claim("z", joinRecord{side: sideAudit}); !ok || other.side != sideRequest || small.len() != 1 {
		t.Fatal("the second side takes the first out")
	}
	if _, ok := small.claim("y", rec); ok || small.len() != 1 {
		t.Fatal("the same side seen again changes nothing")
	}
}

func TestAPIServerJoinThroughRedis(t *testing.T) {
	requireRedis(t)
	const id = "0b8e2f6a-8d5c-4c1e-b0c2-7a1e5d9f3c44"
	request := "POST /apis/apps/v1/namespaces/{:namespace}/deployments"
	pair := func(t *testing.T) (*harness, *harness) {
		cfg := joinConfig(redisConfig(t, redisAddr))
		a := newHarness(t, cfg, newFakeClock(t0))
		cfgB := *cfg
		b := newHarness(t, &cfgB, newFakeClock(t0))
		return a, b
	}
	t.Run("replica B's request span links to the audit span replica A saw first", func(t *testing.T) {
		a, b := pair(t)
		a.consume(auditOf(deploy, id, t0.Add(time.Second)))
		// A's record of a new object goes out with its next batch's round trip.
		a.consume(audit(rsA, "next", t0.Add(2*time.Second)))
		b.consumeTraces(apiserverRequest(id, 1, t0.Add(time.Second)))
		assertJoined(t, b.activitySpan(request), a.activitySpan("audit "+id), id)
	})
	t.Run("records still waiting for a round trip go out at shutdown", func(t *testing.T) {
		a, b := pair(t)
		a.consume(auditOf(deploy, id, t0.Add(time.Second)))
		audited := a.activitySpan("audit " + id)
		if err := a.p.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		b.consumeTraces(apiserverRequest(id, 1, t0.Add(time.Second)))
		assertJoined(t, b.activitySpan(request), audited, id)
	})
	t.Run("replica A's audit span of a known object links at once to the request span B saw first", func(t *testing.T) {
		a, b := pair(t)
		a.consume(audit(deploy, "first", t0))
		b.consumeTraces(apiserverRequest(id, 1, t0.Add(time.Second)))
		a.consume(auditOf(deploy, id, t0.Add(time.Second)))
		assertJoined(t, a.activitySpan("audit "+id), b.activitySpan(request), id)
	})
	t.Run("an audit span of an object new to the replica still links to a waiting request span", func(t *testing.T) {
		a, b := pair(t)
		b.consumeTraces(apiserverRequest(id, 1, t0.Add(time.Second)))
		a.consume(auditOf(deploy, id, t0.Add(time.Second)))
		assertJoined(t, a.activitySpan("audit "+id), b.activitySpan(request), id)
	})
	t.Run("the audit side when known in memory goes out in the same single round trip", func(t *testing.T) {
		a, b := pair(t)
		a.consume(audit(deploy, "first", t0))
		trips := a.p.redis.roundTrips.Load()
		a.consume(auditOf(deploy, id, t0.Add(time.Second)))
		if got := a.p.redis.roundTrips.Load() - trips; got != 1 {
			t.Fatalf("%d round trips for a batch of a known object, want 1", got)
		}
		b.consumeTraces(apiserverRequest(id, 1, t0.Add(time.Second)))
		assertJoined(t, b.activitySpan(request), a.activitySpan("audit "+id), id)
	})
}

// joinConfig turns apiserver_join on (it is off by default).
func joinConfig(cfg *Config) *Config {
	cfg.APIServerJoin.Enabled = true
	return cfg
}
