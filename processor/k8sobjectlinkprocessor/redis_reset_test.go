package k8sobjectlinkprocessor

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/idmap"
)

// TestRedisRestartedEmptyMidStream restarts a real redis-server without persistence between two
// batches of a stream shared by two processors. The client reconnects silently, so only the
// epoch record tells a replica that the first-writer-wins records are gone.
//
// First the documented race: a replica that never held a Pod's assignment writes it before the
// replica that held it has made a round trip since the restart; the Pod's window span then goes
// out twice, as an identical copy (same trace, span, parent and start). Then the case the
// write-back covers: once the holder has made a round trip, it has written back the records it
// used last, and the other replica's next write of another such Pod emits nothing again.
func TestRedisRestartedEmptyMidStream(t *testing.T) {
	srv := startThrowawayRedis(t, 0)
	cfg := redisConfig(t, srv.Addr())
	base := model.WindowStart(time.Now(), model.DefaultWindow)
	clk := newFakeClock(time.Now())
	at := func(s int) time.Time { return base.Add(time.Duration(s) * time.Second) }
	pod := func(name string) model.Object {
		p := podA1
		p.Name, p.UID = name, "uid-"+name
		return p
	}
	podX, podY, podZ := pod("demo-a-x"), pod("demo-a-y"), pod("demo-a-z")

	o1, o2 := newObserved(t), newObserved(t)
	h1, h2 := observedHarness(t, o1, cfg, clk), observedHarness(t, o2, cfg, clk)
	// Before the restart: h1 sees the Deployment, its ReplicaSet and Pods X and Y; h2 only Pod Z
	// (and through Redis the ReplicaSet and Deployment above it).
	h1.consume(audit(deploy, "create-deploy", at(1)))
	h1.consume(audit(rsA, "create-rs", at(2)))
	h1.consume(audit(podX, "create-x", at(3)), audit(podY, "create-y", at(3)))
	h2.consume(audit(podZ, "create-z", at(4)))

	srv.Stop()
	restarted := startThrowawayRedis(t, srv.Port)

	// The race: h2 writes Pod X first.
	h2.consume(audit(podX, "patch-x", at(5)))
	// h1 makes a round trip (its own Pod Y again), notices, and writes back what it used last,
	// in the background.
	h1.consume(audit(podY, "patch-y", at(6)))
	waitFor(t, func() bool { return !h1.p.redis.WritingBack() })
	// h2 now writes Pod Y: its record is back, so h2 does not emit Y's window span again.
	h2.consume(audit(podY, "patch-y-again", at(7)))
	// h2 noticed the restart at its first round trip (patch-x) and writes back Pod Z, which it
	// held, in the background: once that is done, h1's write of Z emits nothing again. (Without
	// this wait a slow write-back made Z's span go out twice under load.)
	waitFor(t, func() bool { return !h2.p.redis.WritingBack() })
	h1.consume(audit(podZ, "patch-z", at(8)))

	for name, o := range map[string]*observed{"h1": o1, "h2": o2} {
		if n := o.counter(t, "otelcol_k8s_object_link_redis_resets"); n != 1 {
			t.Errorf("%s counted %d Redis resets, want 1 (each knew the epoch before the restart)", name, n)
		}
	}
	if o1.logs.FilterMessageSnippet("Redis lost the ID map's records").Len() == 0 {
		t.Error("h1 must log the loss")
	}

	spans := append(h1.spans(), h2.spans()...)
	copies := map[pcommon.SpanID][]ptrace.Span{}
	names := map[pcommon.SpanID]string{}
	objects := map[pcommon.SpanID]ptrace.Span{}
	activities := map[string]int{}
	for _, o := range spans {
		if spanType(o.span) == model.SpanTypeObject {
			copies[o.span.SpanID()] = append(copies[o.span.SpanID()], o.span)
			names[o.span.SpanID()] = o.name()
			objects[o.span.SpanID()] = o.span
			continue
		}
		activities[o.name()]++
	}
	for id, c := range copies {
		name := names[id]
		want := 1
		if name == "Pod default/demo-a-x" {
			want = 2 // the documented race
		}
		if len(c) != want {
			t.Errorf("object span %q (%s) emitted %d times, want %d", name, id, len(c), want)
		}
		for _, dup := range c[1:] {
			if dup.TraceID() != c[0].TraceID() || dup.ParentSpanID() != c[0].ParentSpanID() || dup.StartTimestamp() != c[0].StartTimestamp() {
				t.Errorf("the copy of %q differs from the first: trace %s/%s, parent %s/%s", name,
					c[0].TraceID(), dup.TraceID(), c[0].ParentSpanID(), dup.ParentSpanID())
			}
		}
	}
	if len(copies) != 5 {
		t.Errorf("want the window spans of 5 objects (Deployment, ReplicaSet, 3 Pods), got %d", len(copies))
	}
	for _, id := range []string{"create-deploy", "create-rs", "create-x", "create-y", "create-z", "patch-x", "patch-y", "patch-y-again", "patch-z"} {
		if activities["audit "+id] != 1 {
			t.Errorf("audit %s passed %d times, want once", id, activities["audit "+id])
		}
	}
	// One tree: every span's parent is an object span of the same trace, and the Pods hang
	// under the one ReplicaSet whatever replica emitted them after the restart.
	for _, o := range spans {
		if o.span.ParentSpanID().IsEmpty() {
			if o.name() != "Deployment default/demo" {
				t.Errorf("%q is a root; only the Deployment is", o.name())
			}
			continue
		}
		parent, ok := objects[o.span.ParentSpanID()]
		if !ok || parent.TraceID() != o.span.TraceID() {
			t.Errorf("%q has no parent object span in its trace", o.name())
		}
	}

	// The write-back put h1's records into the restarted Redis.
	raw := redis.NewClient(&redis.Options{Addr: restarted.Addr()})
	defer raw.Close()
	for _, obj := range []model.Object{deploy, rsA, podY} {
		if raw.Exists(context.Background(), cfg.IDMap.Redis.KeyPrefix+idmap.AssignmentKey(obj.Key(), base)).Val() != 1 {
			t.Errorf("the assignment of %s must be back in Redis", obj.Name)
		}
	}
}

// TestRedisRestartedEmptyIsNoticedByTheReplicaThatWroteTheEpoch covers one replica alone, the
// writer of the epoch record, finding Redis empty: it must notice (its token is gone, even though
// it writes the same token again) and write its records back.
func TestRedisRestartedEmptyIsNoticedByTheReplicaThatWroteTheEpoch(t *testing.T) {
	srv := startThrowawayRedis(t, 0)
	cfg := redisConfig(t, srv.Addr())
	base := model.WindowStart(time.Now(), model.DefaultWindow)
	clk := newFakeClock(time.Now())
	o := newObserved(t)
	h := observedHarness(t, o, cfg, clk)
	h.consume(audit(deploy, "create-deploy", base.Add(time.Second)))
	h.consume(audit(rsA, "create-rs", base.Add(2*time.Second)))
	if n := o.counter(t, "otelcol_k8s_object_link_redis_resets"); n != 0 {
		t.Fatalf("%d resets counted before any restart", n)
	}

	srv.Stop()
	restarted := startThrowawayRedis(t, srv.Port)
	h.consume(audit(podA1, "create-pod", base.Add(3*time.Second)))
	waitFor(t, func() bool { return !h.p.redis.WritingBack() })
	if n := o.counter(t, "otelcol_k8s_object_link_redis_resets"); n != 1 {
		t.Fatalf("the only replica counted %d resets, want 1", n)
	}
	raw := redis.NewClient(&redis.Options{Addr: restarted.Addr()})
	defer raw.Close()
	for _, obj := range []model.Object{deploy, rsA} {
		if raw.Exists(context.Background(), cfg.IDMap.Redis.KeyPrefix+idmap.AssignmentKey(obj.Key(), base)).Val() != 1 {
			t.Errorf("the assignment of %s must be back in Redis", obj.Name)
		}
	}
	if n := o.counter(t, "otelcol_k8s_object_link_redis_reconciled", attribute.String(attrResult, idmap.ResultWritten)); n < 2 {
		t.Errorf("redis_reconciled{result=written} = %d, want the written-back records counted", n)
	}
}

// observedHarness is a harness whose processor reports to o's logger and meter provider.
func observedHarness(t *testing.T, o *observed, cfg *Config, clk *fakeClock) *harness {
	t.Helper()
	sink := new(consumertest.TracesSink)
	p, err := newProcessor(o.set, cfg, sink, clk)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	return &harness{t: t, p: p, sink: sink, clock: clk}
}

// TestAnUnreadableEpochRecordIsCountedAndTheBatchGoesOn: a foreign record of another type where
// the epoch record belongs turns loss detection off, says so (a counted reply error, a WARN) and
// costs no span.
func TestAnUnreadableEpochRecordIsCountedAndTheBatchGoesOn(t *testing.T) {
	requireRedis(t)
	cfg := redisConfig(t, redisAddr)
	raw := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer raw.Close()
	if err := raw.HSet(context.Background(), cfg.IDMap.Redis.KeyPrefix+idmap.EpochKey, "not", "a token").Err(); err != nil {
		t.Fatal(err)
	}
	base := model.WindowStart(time.Now(), model.DefaultWindow)
	o := newObserved(t)
	h := observedHarness(t, o, cfg, newFakeClock(time.Now()))
	h.consume(audit(deploy, "create-deploy", base.Add(time.Second)))
	h.one("Deployment default/demo")
	if n := o.counter(t, redisErrors, reason(idmap.ReasonReply)); n < 1 {
		t.Errorf("redis_errors{reason=reply} = %d, want the unreadable epoch record counted", n)
	}
	if o.logs.FilterMessageSnippet("epoch record unreadable").Len() == 0 {
		t.Error("the unreadable epoch record must be logged")
	}
}

// TestAnOutageLongerThanMaxPendingWritesIsCounted: writes made from memory during an outage
// beyond max_pending_writes are counted (and logged) as not to be replayed, and the spans flow.
func TestAnOutageLongerThanMaxPendingWritesIsCounted(t *testing.T) {
	srv := startThrowawayRedis(t, 0)
	cfg := redisConfig(t, srv.Addr())
	cfg.IDMap.Redis.Timeout = 200 * time.Millisecond
	cfg.IDMap.Redis.MaxPendingWrites = 1
	srv.Stop()
	base := model.WindowStart(time.Now(), model.DefaultWindow)
	o := newObserved(t)
	h := observedHarness(t, o, cfg, newFakeClock(time.Now()))
	h.consume(audit(deploy, "create-deploy", base.Add(time.Second)), audit(rsA, "create-rs", base.Add(time.Second)))
	h.one("Deployment default/demo")
	h.one("ReplicaSet default/demo-a")
	if n := o.counter(t, redisErrors, reason(idmap.ReasonPendingFull)); n < 1 {
		t.Errorf("redis_errors{reason=pending_full} = %d, want the writes past max_pending_writes counted", n)
	}
}
