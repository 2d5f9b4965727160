package k8sobjectlinkprocessor

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"

	"github.com/kubetrail/kubetrail/internal/model"
)

func TestOwnerLookupsOfOneBatchRunConcurrently(t *testing.T) {
	// Asked one after the other, a batch of new objects waits for the apiserver once per object
	// (up to owner_lookup.timeout each while it is slow or unreachable): the pipeline stalls.
	const objects = 4
	var roots []model.Object
	for i := range objects {
		d := deploy
		d.Name, d.UID = fmt.Sprintf("demo-%d", i), fmt.Sprintf("d-%d", i)
		roots = append(roots, d)
	}
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	inflight, most := 0, 0
	slow := func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		inflight++
		most = max(most, inflight)
		cond.Broadcast()
		// A slow apiserver: each answer waits until all the batch's questions are asked, or
		// gives up after a second (so that the sequential version fails instead of hanging).
		deadline := time.AfterFunc(time.Second, func() { mu.Lock(); cond.Broadcast(); mu.Unlock() })
		start := time.Now()
		for most < objects && time.Since(start) < time.Second {
			cond.Wait()
		}
		deadline.Stop()
		inflight--
		return nil
	}
	fake := slowMetadata{fakeMetadata(t, roots...), slow}
	cfg := memoryConfig()
	cfg.OwnerWait = time.Hour // only the look-ups can settle the roots
	h := newHarness(t, cfg, newFakeClock(t0))
	h.p.lookup = newOwnerLookup(fake, "c1", time.Minute, 5*time.Second, h.clock.Now)
	var acts []activity
	for i, d := range roots {
		acts = append(acts, event(d, fmt.Sprint("ev", i), t0.Add(time.Second)))
	}
	h.consume(acts...)

	mu.Lock()
	got := most
	mu.Unlock()
	if got != objects {
		t.Fatalf("the batch's %d look-ups must be in flight together, at most %d were", objects, got)
	}
	for i, d := range roots {
		assertChild(t, h.one(d.DisplayName()), h.activitySpan(fmt.Sprint("event ev", i)))
	}
}

// slowMetadata calls before on every GET (and fails it with before's error, as a real client
// fails a call whose context is done), outside the fake client's own lock (which would
// serialize concurrent calls).
type slowMetadata struct {
	metadata.Interface
	before func(context.Context) error
}

func (s slowMetadata) Resource(gvr schema.GroupVersionResource) metadata.Getter {
	return slowResource{s.Interface.Resource(gvr), s.before}
}

type slowResource struct {
	metadata.Getter
	before func(context.Context) error
}

func (s slowResource) Namespace(ns string) metadata.ResourceInterface {
	return slowNamespaced{s.Getter.Namespace(ns), s.before}
}

func (s slowResource) Get(ctx context.Context, name string, opts metav1.GetOptions, sub ...string) (*metav1.PartialObjectMetadata, error) {
	if err := s.before(ctx); err != nil {
		return nil, err
	}
	return s.Getter.Get(ctx, name, opts, sub...)
}

type slowNamespaced struct {
	metadata.ResourceInterface
	before func(context.Context) error
}

func (s slowNamespaced) Get(ctx context.Context, name string, opts metav1.GetOptions, sub ...string) (*metav1.PartialObjectMetadata, error) {
	if err := s.before(ctx); err != nil {
		return nil, err
	}
	return s.ResourceInterface.Get(ctx, name, opts, sub...)
}

func TestACancelledCallerDoesNotCacheAnOwnerLookupFailure(t *testing.T) {
	// The webhook request the apiserver gave up on must not leave "unknown" cached for the
	// object for owner_lookup.cache_ttl, making it a root in every window meanwhile.
	realClient := slowMetadata{fakeMetadata(t, podA1), func(ctx context.Context) error { return ctx.Err() }}
	l := newOwnerLookup(realClient, "c1", time.Minute, time.Second, func() time.Time { return t0 })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, owner, err := l.lookup(ctx, podA1)
	if err != nil || res != lookupOwner || owner != podA1.Owner {
		t.Fatalf("the look-up must answer whatever the caller's context: %v %+v %v", res, owner, err)
	}
}
