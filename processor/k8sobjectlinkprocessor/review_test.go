package k8sobjectlinkprocessor

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/idmap"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/metadata"
)

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

func TestTheHeldSpansGaugeReturnsToZeroAfterARefusedRelease(t *testing.T) {
	sink := new(consumertest.TracesSink)
	refuse := false
	next := refusingConsumer(sink, &refuse)
	cfg := memoryConfig()
	cfg.OwnerWait = 3 * time.Second
	clk := newFakeClock(t0.Add(time.Minute))
	h, reader := newMeteredHarness(t, cfg, clk, next, sink)
	p := h.p
	h.consume(event(withoutOwner(podA1), "e1", t0.Add(time.Minute)), event(withoutOwner(podB1), "e2", t0.Add(time.Minute)))
	clk.Advance(4 * time.Second)
	refuse = true
	_ = p.release(context.Background(), false)
	refuse = false
	if err := p.release(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	h.activitySpan("event e1")
	h.activitySpan("event e2")

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "otelcol_k8s_object_link_held_spans" {
				continue
			}
			found = true
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if dp.Value != 0 {
					t.Fatalf("no span is held any more, the gauge says %d", dp.Value)
				}
			}
		}
	}
	if !found {
		t.Fatal("the held spans gauge must be reported")
	}
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
