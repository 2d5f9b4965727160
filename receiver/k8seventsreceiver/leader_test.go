package k8seventsreceiver

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes/fake"
)

func TestLeaderElectionRunsOneReplicaAtATime(t *testing.T) {
	client := fake.NewClientset()
	cfg := &LeaderElectionConfig{LeaseName: "events", LeaseNamespace: "default", LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 50 * time.Millisecond}
	var leading, maxLeading, terms atomic.Int32
	type replica struct {
		cancel context.CancelFunc
		done   chan struct{}
		leads  atomic.Int32
	}
	start := func() *replica {
		ctx, cancel := context.WithCancel(context.Background())
		r := &replica{cancel: cancel, done: make(chan struct{})}
		go func() {
			defer close(r.done)
			runWithLeaderElection(ctx, zap.NewNop(), client, cfg, func(term context.Context) {
				n := leading.Add(1)
				for m := maxLeading.Load(); n > m; m = maxLeading.Load() {
					if maxLeading.CompareAndSwap(m, n) {
						break
					}
				}
				terms.Add(1)
				r.leads.Add(1)
				<-term.Done()
				leading.Add(-1)
			})
		}()
		return r
	}
	a, b := start(), start()
	waitFor(t, "a leader", func() bool { return terms.Load() == 1 })
	first, second := a, b
	if b.leads.Load() == 1 {
		first, second = b, a
	}
	// The leader shuts down and releases the Lease; the other replica takes over.
	first.cancel()
	<-first.done
	waitFor(t, "the second replica to lead", func() bool { return second.leads.Load() == 1 })
	second.cancel()
	<-second.done
	if maxLeading.Load() != 1 {
		t.Fatalf("%d replicas watched at the same time, want 1", maxLeading.Load())
	}
}
