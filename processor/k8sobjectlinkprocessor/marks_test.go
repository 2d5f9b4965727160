package k8sobjectlinkprocessor

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/idmap"
)

// A replica killed while its batch is on the way to the exporter leaves the batch's duplicate
// marks in Redis and its spans nowhere. The replica that reads the batch again (a Kafka partition
// after the rebalance) must send the spans, not drop them as duplicates; a copy that arrives
// while the first is on its way, and one after the first was taken, are still duplicates.
func TestAMarkOfABatchThatNeverReachedTheExporterIsNoDuplicate(t *testing.T) {
	requireRedis(t)
	base := model.WindowStart(time.Now(), model.DefaultWindow)
	audits := func(ids ...string) []activity {
		var acts []activity
		for i, id := range ids {
			acts = append(acts, audit(deploy, id, base.Add(time.Duration(i+1)*time.Second)))
		}
		return acts
	}
	// killed is a next consumer that takes a batch and never delivers it: the replica dies
	// with the batch in its exporter.
	killed, _ := consumer.NewTraces(func(context.Context, ptrace.Traces) error { return nil })

	t.Run("read again after the replica died: sent", func(t *testing.T) {
		cfg := redisConfig(t, redisAddr)
		clk := newFakeClock(time.Now())
		a := newHarnessConsumer(t, cfg, clk, killed, new(consumertest.TracesSink))
		a.consume(audits("w1", "w2")...)
		clk.Advance(abandonAfter + time.Second) // a session timeout later: the rebalance
		sink := new(consumertest.TracesSink)
		b, reader := newMeteredHarness(t, cfg, clk, sink, sink)
		if err := b.p.Start(context.Background(), componenttest.NewNopHost()); err != nil {
			t.Fatal(err)
		}
		b.consume(audits("w1", "w2")...)
		if b.count("audit w1") != 1 || b.count("audit w2") != 1 {
			t.Fatalf("the spans of the batch the killed replica never delivered must be sent: %d, %d",
				b.count("audit w1"), b.count("audit w2"))
		}
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		if n := sumOf(rm, "otelcol_k8s_object_link_pending_marks", attribute.String("result", "taken_over")); n != 2 {
			t.Fatalf("two pending marks were taken over, pending_marks{result=taken_over} = %d", n)
		}
	})
	t.Run("a copy while the first is on its way: a duplicate", func(t *testing.T) {
		cfg := redisConfig(t, redisAddr)
		clk := newFakeClock(time.Now())
		a := newHarnessConsumer(t, cfg, clk, killed, new(consumertest.TracesSink))
		a.consume(audits("w1")...)
		clk.Advance(abandonAfter / 10)
		b := newHarness(t, cfg, clk)
		b.consume(audits("w1")...)
		if n := b.count("audit w1"); n != 0 {
			t.Fatalf("a copy arriving within %s of the first is a duplicate, sent %d times", abandonAfter, n)
		}
	})
	t.Run("read again after the first was taken and confirmed: a duplicate", func(t *testing.T) {
		cfg := redisConfig(t, redisAddr)
		clk := newFakeClock(time.Now())
		a := newHarness(t, cfg, clk)
		a.consume(audits("w1")...)
		a.consume(audits("later")...) // carries w1's confirmation
		clk.Advance(10 * abandonAfter)
		b := newHarness(t, cfg, clk)
		b.consume(audits("w1")...)
		if a.count("audit w1") != 1 || b.count("audit w1") != 0 {
			t.Fatalf("a confirmed span is a duplicate when read again: a sent %d, b %d", a.count("audit w1"), b.count("audit w1"))
		}
	})
	t.Run("confirmed by the tick when no batch follows", func(t *testing.T) {
		cfg := redisConfig(t, redisAddr)
		clk := newFakeClock(time.Now())
		a := newHarness(t, cfg, clk)
		a.consume(audits("w1")...)
		raw := redis.NewClient(&redis.Options{Addr: redisAddr})
		defer raw.Close()
		key := cfg.IDMap.Redis.KeyPrefix + idmap.DedupKey(a.activitySpan("audit w1").SpanID())
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			clk.FireTickers()
			if v, _ := raw.Get(context.Background(), key).Result(); v == markConfirmed {
				break
			}
			if time.Now().After(deadline) {
				v, err := raw.Get(context.Background(), key).Result()
				t.Fatalf("the mark of a batch the next consumer took must be confirmed by the tick: %q, %v", v, err)
			}
		}
	})
	t.Run("a held span's mark is confirmed at once: it is in our custody", func(t *testing.T) {
		cfg := redisConfig(t, redisAddr)
		cfg.OwnerWait = time.Minute // podA1's ReplicaSet is never seen: held
		clk := newFakeClock(time.Now())
		a := newHarness(t, cfg, clk)
		a.consume(audit(podA1, "held", base.Add(time.Second)))
		a.consume(audits("later")...) // carries the held span's confirmation
		if n := a.count("audit held"); n != 0 {
			t.Fatalf("the span must be held, passed on %d times", n)
		}
		clk.Advance(10 * abandonAfter)
		b := newHarness(t, cfg, clk)
		b.consume(audit(podA1, "held", base.Add(time.Second)))
		if err := b.p.Shutdown(context.Background()); err != nil { // releases what b holds
			t.Fatal(err)
		}
		if n := b.count("audit held"); n != 0 {
			t.Fatalf("a copy of a span another replica holds is a duplicate, sent %d times", n)
		}
	})
	t.Run("confirmed at shutdown", func(t *testing.T) {
		cfg := redisConfig(t, redisAddr)
		clk := newFakeClock(time.Now())
		a := newHarness(t, cfg, clk)
		a.consume(audits("w1")...)
		if err := a.p.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		clk.Advance(10 * abandonAfter)
		b := newHarness(t, cfg, clk)
		b.consume(audits("w1")...)
		if n := b.count("audit w1"); n != 0 {
			t.Fatalf("a span passed on before a graceful stop is a duplicate when read again, sent %d times", n)
		}
	})
}

func TestAbandonedMark(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	for v, want := range map[string]bool{
		"":                                  false, // memory, continuation spans, earlier releases
		markConfirmed:                       false,
		pendingMark(now):                    false,
		pendingMark(now.Add(-abandonAfter)): true,
		"p":                                 false,
		"pxyz":                              false,
	} {
		if got := abandonedMark(v, now); got != want {
			t.Errorf("abandonedMark(%q) = %v, want %v", v, got, want)
		}
	}
}

// A duplicate mark lives duplicate_ttl (up to an eighth longer in memory, where marks expire by
// generation), not the window's records' window + grace: a redelivery within it is dropped, the
// same span later passes again, and Redis is told to expire the mark, pending or confirmed, then.
func TestDuplicateMarksLiveForDuplicateTTL(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		cfg := memoryConfig()
		if cfg.DuplicateTTL != 10*time.Minute {
			t.Fatalf("the default duplicate_ttl is documented as 10m, got %s", cfg.DuplicateTTL)
		}
		clk := newFakeClock(t0)
		h := newHarness(t, cfg, clk)
		same := audit(deploy, "same", t0.Add(time.Second))
		h.consume(same)
		clk.Advance(cfg.DuplicateTTL - time.Minute)
		h.consume(same)
		if n := h.count("audit same"); n != 1 {
			t.Fatalf("a redelivery within duplicate_ttl must be dropped, passed %d times", n)
		}
		// Past the TTL and the generation an eighth of it may add, within the same window (and
		// window + grace, which the marks lived before).
		clk.Advance(time.Minute + cfg.DuplicateTTL/8 + time.Second)
		h.consume(same)
		if n := h.count("audit same"); n != 2 {
			t.Fatalf("a span arriving after its mark expired is passed on again, passed %d times", n)
		}
	})
	t.Run("redis", func(t *testing.T) {
		requireRedis(t)
		cfg := redisConfig(t, redisAddr)
		cfg.DuplicateTTL = 3 * time.Minute
		clk := newFakeClock(time.Now())
		h := newHarness(t, cfg, clk)
		base := model.WindowStart(time.Now(), model.DefaultWindow)
		h.consume(audit(deploy, "w1", base.Add(time.Second)))
		raw := redis.NewClient(&redis.Options{Addr: redisAddr})
		defer raw.Close()
		key := cfg.IDMap.Redis.KeyPrefix + idmap.DedupKey(h.activitySpan("audit w1").SpanID())
		check := func(what string) {
			t.Helper()
			ttl, err := raw.PTTL(context.Background(), key).Result()
			if err != nil || ttl <= cfg.DuplicateTTL-30*time.Second || ttl > cfg.DuplicateTTL {
				t.Fatalf("the %s mark must expire duplicate_ttl (%s) after it was written, expires in %s (%v)", what, cfg.DuplicateTTL, ttl, err)
			}
		}
		check("pending")
		h.consume(audit(deploy, "later", base.Add(2*time.Second))) // carries w1's confirmation
		if v, _ := raw.Get(context.Background(), key).Result(); v != markConfirmed {
			t.Fatalf("the mark must be confirmed by the next batch, holds %q", v)
		}
		check("confirmed")
	})
}

// A confirmation that finds maxConfirms waiting is not queued: its mark stays pending, counted.
func TestConfirmationsPastTheBoundAreCounted(t *testing.T) {
	sink := new(consumertest.TracesSink)
	h, reader := newMeteredHarness(t, memoryConfig(), newFakeClock(t0), sink, sink)
	marks := make([]string, maxConfirms+5)
	for i := range marks {
		marks[i] = idmap.DedupKey([8]byte{byte(i), byte(i >> 8), byte(i >> 16)})
	}
	h.p.confirmMarks(marks)
	if n := len(h.p.confirms.take()); n != maxConfirms {
		t.Fatalf("%d confirmations queued, want the bound, %d", n, maxConfirms)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	if n := sumOf(rm, "otelcol_k8s_object_link_pending_marks", attribute.String("result", "unconfirmed")); n != 5 {
		t.Fatalf("pending_marks{result=unconfirmed} = %d, want 5", n)
	}
}
