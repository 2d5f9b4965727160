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

	"github.com/kubetrail/kubetrail/internal/model"
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
	cfg := redisConfig(t, srv.addr())
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

	srv.stop()
	restarted := startThrowawayRedis(t, srv.port)

	// The race: h2 writes Pod X first.
	h2.consume(audit(podX, "patch-x", at(5)))
	// h1 makes a round trip (its own Pod Y again), notices, and writes back what it used last.
	h1.consume(audit(podY, "patch-y", at(6)))
	// h2 now writes Pod Y: its record is back, so h2 does not emit Y's window span again.
	h2.consume(audit(podY, "patch-y-again", at(7)))
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
	objects := map[pcommon.SpanID]ptrace.Span{}
	activities := map[string]int{}
	for _, o := range spans {
		if spanType(o.span) == model.SpanTypeObject {
			copies[o.span.SpanID()] = append(copies[o.span.SpanID()], o.span)
			objects[o.span.SpanID()] = o.span
			continue
		}
		activities[o.span.Name()]++
	}
	for id, c := range copies {
		name := c[0].Name()
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
			if o.span.Name() != "Deployment default/demo" {
				t.Errorf("%q is a root; only the Deployment is", o.span.Name())
			}
			continue
		}
		parent, ok := objects[o.span.ParentSpanID()]
		if !ok || parent.TraceID() != o.span.TraceID() {
			t.Errorf("%q has no parent object span in its trace", o.span.Name())
		}
	}

	// The write-back put h1's records into the restarted Redis.
	raw := redis.NewClient(&redis.Options{Addr: restarted.addr()})
	defer raw.Close()
	for _, obj := range []model.Object{deploy, rsA, podY} {
		if raw.Exists(context.Background(), cfg.IDMap.Redis.KeyPrefix+assignmentKey(obj.Key(), base)).Val() != 1 {
			t.Errorf("the assignment of %s must be back in Redis", obj.Name)
		}
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
