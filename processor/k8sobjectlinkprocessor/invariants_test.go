package k8sobjectlinkprocessor

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/kubetrail/kubetrail/internal/model"
)

// The tests below feed random streams (objects with and without owner or UID, three windows,
// redelivered spans, refusals, holding, two replicas) and check what must hold for any stream.

// randomBatch draws up to six activity spans; a fifth of them repeat an earlier span ID when
// repeats is set.
func randomBatch(rng *rand.Rand, n *int, base time.Time, repeats bool) []activity {
	objs := []model.Object{deploy, rsA, rsB, podA1, podB1, cron, job, jobPod}
	var acts []activity
	for range 1 + rng.IntN(6) {
		o := objs[rng.IntN(len(objs))]
		switch rng.IntN(4) {
		case 0:
			o = withoutOwner(o)
		case 1:
			o = withoutUID(o)
		}
		id := fmt.Sprint(*n)
		if repeats && *n > 0 && rng.IntN(5) == 0 {
			id = fmt.Sprint(rng.IntN(*n))
		}
		*n++
		at := base.Add(time.Duration(rng.IntN(70)) * time.Minute)
		a := audit(o, id, at)
		if rng.IntN(3) == 0 {
			a = event(o, id, at)
		}
		acts = append(acts, a)
	}
	return acts
}

func spanIDs(td ptrace.Traces, into map[pcommon.SpanID]bool) {
	for _, rs := range td.ResourceSpans().All() {
		for _, ss := range rs.ScopeSpans().All() {
			for _, s := range ss.Spans().All() {
				into[s.SpanID()] = true
			}
		}
	}
}

// checkInvariants: every distinct activity span passed exactly once; no object span twice;
// every span's parent is an object span that was emitted, in the same trace.
func checkInvariants(t *testing.T, out []outSpan, sent map[pcommon.SpanID]bool) {
	t.Helper()
	objects := map[pcommon.SpanID]ptrace.Span{}
	passed := map[pcommon.SpanID]int{}
	for _, o := range out {
		if spanType(o.span) != model.SpanTypeObject {
			passed[o.span.SpanID()]++
			continue
		}
		if _, dup := objects[o.span.SpanID()]; dup {
			t.Fatalf("object span %q emitted twice", o.name())
		}
		objects[o.span.SpanID()] = o.span
	}
	for id := range sent {
		if passed[id] != 1 {
			t.Fatalf("activity span %s passed %d times, want once", id, passed[id])
		}
	}
	for _, o := range out {
		p := o.span.ParentSpanID()
		if p.IsEmpty() {
			if spanType(o.span) != model.SpanTypeObject {
				t.Fatalf("activity span %q has no parent", o.name())
			}
			continue
		}
		parent, ok := objects[p]
		if !ok {
			t.Fatalf("%s span %q has a parent that was never emitted", spanType(o.span), o.name())
		}
		if parent.TraceID() != o.span.TraceID() {
			t.Fatalf("%q is not in the trace of its parent %q", o.name(), parent.Name())
		}
	}
}

func TestAnyStreamThroughOneReplicaPassesEverySpanOnceInOneTreePerWindow(t *testing.T) {
	for seed := range uint64(1000) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			cfg := memoryConfig()
			if rng.IntN(2) == 0 {
				cfg.OwnerWait = 2 * time.Second
			}
			cfg.MaxHeldSpans = rng.IntN(4)
			clk := newFakeClock(t0)
			sink := new(consumertest.TracesSink)
			refuse := false
			next := refusingConsumer(sink, &refuse)
			h := newHarnessConsumer(t, cfg, clk, next, sink)
			sent := map[pcommon.SpanID]bool{}
			n := 0
			for range 6 {
				td := batch(randomBatch(rng, &n, t0, true)...)
				spanIDs(td, sent)
				redelivery := ptrace.NewTraces()
				td.CopyTo(redelivery)
				refuse = rng.IntN(3) == 0
				if err := h.p.ConsumeTraces(trustedCtx, td); err != nil {
					refuse = false
					if err := h.p.ConsumeTraces(trustedCtx, redelivery); err != nil {
						t.Fatal(err)
					}
				}
				clk.Advance(time.Duration(rng.IntN(3)) * time.Second)
				refuse = rng.IntN(3) == 0
				_ = h.p.release(context.Background(), false) // a refusal keeps them held
				refuse = false
			}
			if err := h.p.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			checkInvariants(t, h.spans(), sent)
		})
	}
}

func TestAnyStreamSplitOverTwoReplicasSharingRedisIsOneTreePerWindow(t *testing.T) {
	requireRedis(t)
	for seed := range uint64(200) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 9))
			cfg := redisConfig(t, redisAddr)
			if rng.IntN(2) == 0 {
				cfg.OwnerWait = 2 * time.Second
			}
			cfg.MaxHeldSpans = rng.IntN(4)
			now := time.Now()
			// An hour back: the windows are read late, as from a backlog.
			base := model.WindowStart(now, model.DefaultWindow).Add(-time.Hour)
			clk := newFakeClock(now)
			sink := new(consumertest.TracesSink)
			a, b := newHarnessWithNext(t, cfg, clk, sink), newHarnessWithNext(t, cfg, clk, sink)
			sent := map[pcommon.SpanID]bool{}
			n := 0
			for range 6 {
				// Both replicas at once, each with its part of the stream.
				tdA, tdB := batch(randomBatch(rng, &n, base, false)...), batch(randomBatch(rng, &n, base, false)...)
				spanIDs(tdA, sent)
				spanIDs(tdB, sent)
				var wg sync.WaitGroup
				for _, r := range []struct {
					h  *harness
					td ptrace.Traces
				}{{a, tdA}, {b, tdB}} {
					wg.Go(func() {
						if err := r.h.p.ConsumeTraces(trustedCtx, r.td); err != nil {
							t.Error(err)
						}
					})
				}
				wg.Wait()
				clk.Advance(time.Duration(rng.IntN(3)) * time.Second)
				for _, h := range []*harness{a, b} {
					if err := h.p.release(context.Background(), false); err != nil {
						t.Fatal(err)
					}
				}
			}
			for _, h := range []*harness{a, b} {
				if err := h.p.Shutdown(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			checkInvariants(t, a.spans(), sent)
		})
	}
}
