package k8sobjectlinkprocessor

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/internal/redistest"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/idmap"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/metadata"
)

const redisAddr = redistest.SharedAddr

var requireRedis = redistest.RequireShared

// cleanupPrefix deletes every key under prefix when the test ends.
func cleanupPrefix(t testing.TB, addr, prefix string) {
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		ctx := context.Background()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if len(keys) > 0 {
			c.Del(ctx, keys...)
		}
	})
}

func redisConfig(t testing.TB, addr string) *Config {
	cfg := memoryConfig()
	cfg.IDMap.Backend = BackendRedis
	cfg.IDMap.Redis.Addresses = []string{addr}
	cfg.IDMap.Redis.KeyPrefix = uniquePrefix(t.(*testing.T))
	cleanupPrefix(t, addr, cfg.IDMap.Redis.KeyPrefix)
	return cfg
}

// statusHost records the component status events the processor reports.
type statusHost struct {
	component.Host
	mu     sync.Mutex
	events []componentstatus.Status
}

func (h *statusHost) Report(e *componentstatus.Event) {
	h.mu.Lock()
	h.events = append(h.events, e.Status())
	h.mu.Unlock()
}

func (h *statusHost) statuses() []componentstatus.Status {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]componentstatus.Status(nil), h.events...)
}

func TestTwoProcessorsRacingOnTheSameStreamAgreeOnEveryTraceID(t *testing.T) {
	requireRedis(t)
	cfg := redisConfig(t, redisAddr)
	// Redis expires records by its own wall clock, so the injected clock starts at the real time.
	base := model.WindowStart(time.Now(), model.DefaultWindow)
	clk := newFakeClock(time.Now())
	h1 := newHarness(t, cfg, clk)
	h2 := newHarness(t, cfg, clk)
	stream := scenarioStream(base)

	// Both replicas see the whole stream concurrently (an audit webhook and a log tailer, say):
	// the union must hold every span once and one tree.
	var wg sync.WaitGroup
	for _, h := range []*harness{h1, h2} {
		wg.Go(func() {
			for _, b := range stream {
				if err := h.p.ConsumeTraces(trustedCtx, batch(b...)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	assertOneTree(t, append(h1.spans(), h2.spans()...), stream)

	// And split between them: every span once, the same tree.
	cfg2 := redisConfig(t, redisAddr)
	h3, h4 := newHarness(t, cfg2, clk), newHarness(t, cfg2, clk)
	// The apiserver's webhook sends one batch at a time; a load balancer alternates replicas.
	for i, b := range stream {
		h := h3
		if i%2 == 1 {
			h = h4
		}
		if err := h.p.ConsumeTraces(trustedCtx, batch(b...)); err != nil {
			t.Fatal(err)
		}
	}
	split := append(h3.spans(), h4.spans()...)
	assertOneTree(t, split, stream)
	// Identical trace IDs whichever pair processed the stream.
	if rootTrace(t, split) != rootTrace(t, append(h1.spans(), h2.spans()...)) {
		t.Fatal("the two pairs of replicas must derive the same Deployment trace")
	}
}

// scenarioStream is a Deployment rollout as batches of receiver spans.
func scenarioStream(base time.Time) [][]activity {
	at := func(s int) time.Time { return base.Add(time.Duration(s) * time.Second) }
	podA2 := podA1
	podA2.Name, podA2.UID = "demo-a-2", "pod-a2"
	return [][]activity{
		{audit(deploy, "create-deploy", at(1))},
		{audit(rsA, "create-rs-a", at(2)), event(withoutOwner(deploy), "scaled-up", at(2))},
		{audit(podA1, "create-pod-a1", at(3)), audit(podA2, "create-pod-a2", at(3))},
		{event(withoutOwner(podA1), "scheduled-a1", at(4)), event(withoutOwner(podA2), "scheduled-a2", at(4))},
		{audit(deploy, "patch-image", at(10)), audit(rsB, "create-rs-b", at(11))},
		{audit(podB1, "create-pod-b1", at(12)), event(withoutOwner(podB1), "scheduled-b1", at(13))},
		{audit(podA1, "delete-pod-a1", at(14)), audit(podA2, "delete-pod-a2", at(14))},
	}
}

// assertOneTree checks the union of replicas' output: each activity span exactly once, one
// object span per object, one root Deployment whose children are the ReplicaSets, whose
// children are the Pods, and each activity span under its object's span.
func assertOneTree(t *testing.T, spans []outSpan, stream [][]activity) {
	t.Helper()
	objects := map[string]ptrace.Span{}
	byID := map[pcommon.SpanID]ptrace.Span{}
	activities := map[string]int{}
	for _, o := range spans {
		if spanType(o.span) == model.SpanTypeObject {
			if _, dup := objects[o.name()]; dup {
				t.Fatalf("object span %q emitted more than once across replicas", o.name())
			}
			objects[o.name()] = o.span
			byID[o.span.SpanID()] = o.span
			continue
		}
		activities[o.name()]++
	}
	for _, b := range stream {
		for _, a := range b {
			if activities[a.name] != 1 {
				t.Fatalf("%s passed %d times, want exactly once", a.name, activities[a.name])
			}
		}
	}
	d := objects["Deployment default/demo"]
	assertRoot(t, d)
	for _, rs := range []string{"ReplicaSet default/demo-a", "ReplicaSet default/demo-b"} {
		assertChild(t, d, objects[rs])
	}
	assertChild(t, objects["ReplicaSet default/demo-a"], objects["Pod default/demo-a-1"])
	assertChild(t, objects["ReplicaSet default/demo-a"], objects["Pod default/demo-a-2"])
	assertChild(t, objects["ReplicaSet default/demo-b"], objects["Pod default/demo-b-1"])
	for _, o := range spans {
		if spanType(o.span) == model.SpanTypeObject {
			continue
		}
		parent, ok := byID[o.span.ParentSpanID()]
		if !ok {
			t.Fatalf("%s has no object span parent", o.name())
		}
		assertChild(t, parent, o.span)
	}
}

func rootTrace(t *testing.T, spans []outSpan) pcommon.TraceID {
	for _, o := range spans {
		if o.name() == "Deployment default/demo" {
			return o.span.TraceID()
		}
	}
	t.Fatal("no Deployment span")
	return pcommon.TraceID{}
}

// throwawayRedis is a private redis-server for tests that kill it; the shared one on 6379
// is never touched.
type throwawayRedis = redistest.Server

func startThrowawayRedis(t *testing.T, port int, args ...string) *throwawayRedis {
	t.Helper()
	return redistest.Start(t, port, args...)
}

func TestRedisOutageLosesNoSpanAndReconciles(t *testing.T) {
	srv := startThrowawayRedis(t, 0)
	cfg := redisConfig(t, srv.Addr())
	cfg.IDMap.Redis.Timeout = 200 * time.Millisecond
	cfg.IDMap.Redis.RetryMaxBackoff = 100 * time.Millisecond
	base := model.WindowStart(time.Now(), model.DefaultWindow)
	clk := newFakeClock(time.Now())
	host := &statusHost{Host: componenttest.NewNopHost()}
	sink := new(consumertest.TracesSink)
	p, err := newProcessor(processortest.NewNopSettings(metadata.Type), cfg, sink, clk)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background(), host); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, p: p, sink: sink, clock: clk}
	defer func() { _ = p.Shutdown(context.Background()) }()

	stream := scenarioStream(base)
	h.consume(stream[0]...)
	h.consume(stream[1]...)
	srv.Stop()
	for _, b := range stream[2:5] {
		start := time.Now()
		h.consume(b...)
		if d := time.Since(start); d > 2*cfg.IDMap.Redis.Timeout+time.Second {
			t.Fatalf("a batch during the outage blocked %s", d)
		}
	}
	srv2 := startThrowawayRedis(t, srv.Port)
	waitFor(t, func() bool {
		st := host.statuses()
		return len(st) >= 2 && st[len(st)-1] == componentstatus.StatusOK
	})
	if st := host.statuses(); st[0] != componentstatus.StatusRecoverableError {
		t.Fatalf("the outage must be reported as a recoverable error first, got %v", st)
	}
	for _, b := range stream[5:] {
		h.consume(b...)
	}
	assertOneTree(t, h.spans(), stream)
	// The records written from memory during the outage are in the restarted (empty) Redis.
	raw := redis.NewClient(&redis.Options{Addr: srv2.Addr()})
	defer raw.Close()
	key := cfg.IDMap.Redis.KeyPrefix + idmap.AssignmentKey(podA1.Key(), base)
	if raw.Exists(context.Background(), key).Val() != 1 {
		t.Fatal("the Pod's assignment made during the outage must be reconciled into Redis")
	}
}

func TestANameRecreatedOnAnotherReplicaResolvesToTheNewUID(t *testing.T) {
	requireRedis(t)
	cfg := redisConfig(t, redisAddr)
	base := model.WindowStart(time.Now(), model.DefaultWindow)
	clk := newFakeClock(time.Now())
	a, b := newHarness(t, cfg, clk), newHarness(t, cfg, clk)
	recreated := podA1
	recreated.UID = "pod-a1-second"
	a.consume(audit(podA1, "create-1", base.Add(time.Second)))
	b.consume(audit(podA1, "delete-1", base.Add(2*time.Second)), audit(recreated, "create-2", base.Add(3*time.Second)))
	a.consume(audit(withoutUID(recreated), "conflict", base.Add(4*time.Second)))

	conflict := a.activitySpan("audit conflict")
	if v, _ := conflict.Attributes().Get(model.AttrObjectUID); v.Str() != "pod-a1-second" {
		t.Fatalf("replica a must resolve the name through Redis to the UID replica b saw last, got %q", v.Str())
	}
	var second ptrace.Span
	for _, o := range append(a.spans(), b.spans()...) {
		if spanType(o.span) == model.SpanTypeObject {
			if obj, _ := model.ObjectFromAttributes(o.resource, o.span.Attributes()); obj.UID == "pod-a1-second" {
				second = o.span
			}
		}
	}
	assertChild(t, second, conflict)
}

func TestAForeignKeyUnderThePrefixDoesNotStopTheBatch(t *testing.T) {
	requireRedis(t)
	cfg := redisConfig(t, redisAddr)
	base := model.WindowStart(time.Now(), model.DefaultWindow)
	raw := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer raw.Close()
	// Someone else's list where the Deployment's assignment would go: GET answers WRONGTYPE.
	key := cfg.IDMap.Redis.KeyPrefix + idmap.AssignmentKey(deploy.Key(), base)
	if err := raw.RPush(context.Background(), key, "x").Err(); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, cfg, newFakeClock(time.Now()))
	h.consume(audit(deploy, "d", base.Add(time.Second)))
	h.activitySpan("audit d")
	if h.p.redis.Down() {
		t.Fatal("a per-key reply error must not be taken for an outage")
	}
}

func TestAnAssignmentReadFromRedisIsCachedInFront(t *testing.T) {
	// Replica b reads the assignment replica a wrote; it never changes in its window, so b's
	// next batches must find it in the memory cache instead of asking Redis again.
	requireRedis(t)
	cfg := redisConfig(t, redisAddr)
	now := time.Now()
	base := model.WindowStart(now, model.DefaultWindow)
	clk := newFakeClock(now)
	a, b := newHarness(t, cfg, clk), newHarness(t, cfg, clk)
	a.consume(audit(deploy, "on-a", base.Add(time.Second)))
	b.consume(audit(deploy, "on-b", base.Add(2*time.Second)))

	if !b.p.redis.Cached(idmap.AssignmentKey(deploy.Key(), base)) {
		t.Fatal("the assignment b read from Redis must be in b's memory cache")
	}
	assertChild(t, a.one("Deployment default/demo"), b.activitySpan("audit on-b"))
}

func TestARedisThatRefusesEveryWriteIsAnOutageNotAStreamOfWonAssignments(t *testing.T) {
	// maxmemory reached (OOM), a replica after failover (READONLY), a dataset loading (LOADING),
	// a user without the commands (NOPERM): reply errors about the server, not one record. Taken
	// per record, every SET NX "wins" and every batch emits its object spans again.
	srv := startThrowawayRedis(t, 0)
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer raw.Close()
	if err := raw.ConfigSet(context.Background(), "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	cfg := redisConfig(t, srv.Addr())
	cfg.IDMap.Redis.RetryMaxBackoff = time.Hour // stay down for the test: the probe's ping would pass
	now := time.Now()
	base := model.WindowStart(now, model.DefaultWindow)
	host := &statusHost{Host: componenttest.NewNopHost()}
	sink := new(consumertest.TracesSink)
	p, err := newProcessor(processortest.NewNopSettings(metadata.Type), cfg, sink, newFakeClock(now))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background(), host); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	h := &harness{t: t, p: p, sink: sink}
	h.consume(audit(deploy, "d1", base.Add(time.Second)))
	h.consume(audit(deploy, "d2", base.Add(2*time.Second)), audit(deploy, "d1", base.Add(time.Second)))

	obj := h.one("Deployment default/demo")
	assertChild(t, obj, h.activitySpan("audit d1"))
	assertChild(t, obj, h.activitySpan("audit d2"))
	if st := host.statuses(); len(st) == 0 || st[0] != componentstatus.StatusRecoverableError {
		t.Fatalf("a Redis refusing writes must be reported as a recoverable error, got %v", st)
	}
}

func TestACancelledCallerIsNotARedisOutage(t *testing.T) {
	// The audit webhook's request context ends when the apiserver gives up on the request; that
	// says nothing about Redis, and taking it for an outage would send this replica to memory,
	// where its assignments can disagree with the other replicas'.
	requireRedis(t)
	cfg := redisConfig(t, redisAddr)
	now := time.Now()
	base := model.WindowStart(now, model.DefaultWindow)
	other := newHarness(t, cfg, newFakeClock(now))
	other.consume(audit(deploy, "first", base.Add(time.Second)))

	h := newHarness(t, cfg, newFakeClock(now))
	ctx, cancel := context.WithCancel(trustedCtx)
	cancel()
	if err := h.p.ConsumeTraces(ctx, batch(audit(deploy, "second", base.Add(2*time.Second)))); err != nil {
		t.Fatal(err)
	}
	if h.p.redis.Down() {
		t.Fatal("a cancelled caller must not mark Redis down")
	}
	if len(h.objectSpans()) != 0 {
		t.Fatal("the other replica wrote the assignment first: this one must not emit the object span")
	}
	assertChild(t, other.one("Deployment default/demo"), h.activitySpan("audit second"))
}
