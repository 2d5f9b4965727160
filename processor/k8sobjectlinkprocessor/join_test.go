package k8sobjectlinkprocessor

import (
	"context"
	"encoding/binary"
	"fmt"
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
	if err := h.p.ConsumeTraces(trustedCtx, td); err != nil {
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
		trips := a.p.redis.RoundTrips()
		a.consume(auditOf(deploy, id, t0.Add(time.Second)))
		if got := a.p.redis.RoundTrips() - trips; got != 1 {
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

// The join's Redis records ride on the round trip a batch makes anyway. Over a stream like
// BenchmarkProcess's (a fifth of the spans about Pods new to the processor, the rest about
// known Pods and ReplicaSets; every audit span's request span one batch before or one batch
// after it), each batch costs exactly the round trips it costs with the join off, on one
// replica joining in memory and on two replicas joining only through Redis.
func TestAPIServerJoinAddsNoRedisRoundTrip(t *testing.T) {
	requireRedis(t)
	const batches, size = 30, 50
	at := model.WindowStart(t0, model.DefaultWindow).Add(time.Minute)
	fleet := newBenchFleet(10, 20)
	fleet.apiserver = true
	// batchAt's stream: its kubetrail spans, and the apiserver's request spans.
	stream := func(i int) (kubetrail, requests ptrace.Traces) {
		td := fleet.batchAt(i, size, at)
		requests = ptrace.NewTraces()
		td.ResourceSpans().RemoveIf(func(rs ptrace.ResourceSpans) bool {
			if v, _ := rs.Resource().Attributes().Get(model.AttrServiceName); v.Str() != "apiserver" {
				return false
			}
			rs.MoveTo(requests.ResourceSpans().AppendEmpty())
			return true
		})
		return td, requests
	}
	// Each pair whose two sides are both in the stream gives one link.
	wantLinks := 0
	for i := range batches {
		for j := range size {
			if j%5 != 1 && (j%2 == 0 && i+1 < batches || j%2 == 1 && i > 0) {
				wantLinks++
			}
		}
	}
	replica := func(t *testing.T, prefix string, join bool) *harness {
		cfg := redisConfig(t, redisAddr)
		if prefix != "" {
			cfg.IDMap.Redis.KeyPrefix = prefix
		}
		cfg.IDMap.Redis.Timeout = 10 * time.Second // a loaded machine must not take Redis for down
		cfg.APIServerJoin.Enabled = join
		h := newHarness(t, cfg, newFakeClock(t0))
		// As in a running collector, the fleet's ReplicaSets and Deployments are known.
		var warm []activity
		for k, rs := range fleet.rss {
			warm = append(warm, audit(fleet.deploys[k], fmt.Sprintf("warm-d-%d", k), at), audit(rs, fmt.Sprintf("warm-rs-%d", k), at))
		}
		h.consume(warm...)
		return h
	}
	trips := func(h *harness, td ptrace.Traces) int64 {
		h.t.Helper()
		before := h.p.redis.RoundTrips()
		h.consumeTraces(td)
		return h.p.redis.RoundTrips() - before
	}
	links := func(hs ...*harness) int {
		n := 0
		for _, h := range hs {
			for _, o := range h.spans() {
				n += len(joinLinks(o.span))
			}
		}
		return n
	}
	stayedUp := func(t *testing.T, hs ...*harness) {
		t.Helper()
		for _, h := range hs {
			if h.p.redis.Down() {
				t.Fatal("Redis was marked down during the test: round trips were not counted")
			}
		}
	}

	t.Run("one replica", func(t *testing.T) {
		on, off := replica(t, "", true), replica(t, "", false)
		for i := range batches {
			td, requests := stream(i)
			requests.ResourceSpans().MoveAndAppendTo(td.ResourceSpans())
			offTD := ptrace.NewTraces()
			td.CopyTo(offTD)
			got, want := trips(on, td), trips(off, offTD)
			if got != want {
				t.Fatalf("batch %d: %d round trips with the join, %d without", i, got, want)
			}
			// The first batch meets Events naming Pods new to Redis without their owner: one
			// round trip finds neither an assignment nor a relation, a second writes them, with
			// the join or without. Every later batch costs one.
			if i > 0 && got != 1 {
				t.Fatalf("batch %d: %d round trips, want 1", i, got)
			}
		}
		stayedUp(t, on, off)
		if n := links(on); n != wantLinks {
			t.Fatalf("%d apiserver_request links, want %d", n, wantLinks)
		}
	})

	t.Run("two replicas joining through Redis", func(t *testing.T) {
		// Replica A takes the audit webhook's batches, replica B the apiserver's; A0 takes A's
		// stream with the join off.
		shared := uniquePrefix(t)
		cleanupPrefix(t, redisAddr, shared)
		a, b, a0 := replica(t, shared, true), replica(t, shared, true), replica(t, "", false)
		foreign := func() ptrace.Traces {
			td := ptrace.NewTraces()
			rs := td.ResourceSpans().AppendEmpty()
			rs.Resource().Attributes().PutStr(model.AttrServiceName, "checkout")
			s := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
			s.SetTraceID(pcommon.TraceID{1})
			s.SetSpanID(pcommon.SpanID{2})
			s.SetKind(ptrace.SpanKindServer)
			s.SetName("GET /cart")
			return td
		}
		for i := range batches {
			td, requests := stream(i)
			offTD := ptrace.NewTraces()
			td.CopyTo(offTD)
			got, want := trips(a, td), trips(a0, offTD)
			if got != want || i > 0 && got != 1 {
				t.Fatalf("batch %d: %d round trips with the join, %d without, want 1 after the first", i, got, want)
			}
			// A batch of spans that are not kubetrail's nor request spans makes no round trip,
			// though A holds audit records of new objects for its next one.
			if n := trips(a, foreign()); n != 0 {
				t.Fatalf("batch %d: a batch of other spans made %d round trips", i, n)
			}
			// B's batches hold only request spans: their records are their round trip (one;
			// with the join off such a batch makes none).
			if n := trips(b, requests); n != 1 {
				t.Fatalf("batch %d: the request spans' batch made %d round trips, want 1", i, n)
			}
		}
		stayedUp(t, a, b, a0)
		if n := links(a, b); n != wantLinks {
			t.Fatalf("%d apiserver_request links, want %d", n, wantLinks)
		}
	})
}
