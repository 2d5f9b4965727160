package k8sobjectlinkprocessor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kubetrail/kubetrail/internal/model"
	olmetadata "github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/metadata"
)

// fakeMetadata serves the given objects' metadata, with their owners as controller references.
func fakeMetadata(t *testing.T, objs ...model.Object) metadata.Interface {
	t.Helper()
	var rt []runtime.Object
	scheme := metadatafake.NewTestScheme()
	for _, o := range objs {
		gv := schema.GroupVersion{Group: o.Group, Version: o.Version}
		scheme.AddKnownTypeWithName(gv.WithKind(o.Kind), &metav1.PartialObjectMetadata{})
		m := &metav1.PartialObjectMetadata{
			TypeMeta:   metav1.TypeMeta{APIVersion: o.APIVersion(), Kind: o.Kind},
			ObjectMeta: metav1.ObjectMeta{Name: o.Name, Namespace: o.Namespace, UID: types.UID(o.UID)},
		}
		if !o.Owner.IsZero() {
			yes := true
			m.OwnerReferences = []metav1.OwnerReference{{APIVersion: o.Owner.APIVersion, Kind: o.Owner.Kind,
				Name: o.Owner.Name, UID: types.UID(o.Owner.UID), Controller: &yes}}
		}
		rt = append(rt, m)
	}
	return metadatafake.NewSimpleMetadataClient(scheme, rt...)
}

func TestOwnerLookupAnswers(t *testing.T) {
	recreated := podA1
	recreated.UID = "another-uid"
	tests := []struct {
		name  string
		obj   model.Object
		want  lookupResult
		owner string
	}{
		{"an object with a controller reference names its owner", withoutOwner(podA1), lookupOwner, "rs-a"},
		{"an object without one is a root", deploy, lookupRoot, ""},
		{"a missing object is unknown", withoutOwner(podB1), lookupUnknown, ""},
		{"an object recreated under the same name is unknown", withoutOwner(recreated), lookupUnknown, ""},
	}
	l := newOwnerLookup(fakeMetadata(t, podA1, deploy), "c1", time.Minute, time.Second, func() time.Time { return t0 })
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, owner, err := l.lookup(context.Background(), tt.obj)
			if err != nil || res != tt.want || owner.UID != tt.owner {
				t.Fatalf("lookup = %v, %+v, %v; want %v owner %q", res, owner, err, tt.want, tt.owner)
			}
		})
	}
}

// observedLookups is a started processor (memory ID map, cluster c1) whose owner look-ups go to
// client, with cache_ttl ttl and owner_lookup.resources resources; its log is observed and the
// status events it reports are recorded.
func observedLookups(t *testing.T, client metadata.Interface, ttl time.Duration, resources ...string) (*harness, *observer.ObservedLogs, *statusHost) {
	t.Helper()
	host := &statusHost{Host: componenttest.NewNopHost()}
	core, logs := observer.New(zapcore.InfoLevel)
	set := processortest.NewNopSettings(olmetadata.Type)
	set.Logger = zap.New(core)
	sink := new(consumertest.TracesSink)
	clk := newFakeClock(t0)
	p, err := newProcessor(set, memoryConfig(), sink, clk)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background(), host); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	p.lookup = newOwnerLookup(client, "c1", ttl, time.Second, clk.Now, resources...)
	return &harness{t: t, p: p, sink: sink, clock: clk}, logs, host
}

// A 403 leaves the spans flowing. Where owner_lookup.resources lists the resource, the RBAC
// contradicts the configuration: an error and one permanent status. Where every resource is
// looked up (no list), a forbidden resource is the normal case of partial RBAC: a warning naming
// it, once, and no status. Either way the resource is not asked about again for cache_ttl.
func TestForbiddenOwnerLookups(t *testing.T) {
	for _, tc := range []struct {
		name       string
		resources  []string
		wantStatus []componentstatus.Status
		wantLevel  zapcore.Level
	}{
		{"every resource looked up", nil, nil, zapcore.WarnLevel},
		{"the resource listed", []string{"pods", "replicasets.apps"}, []componentstatus.Status{componentstatus.StatusPermanentError}, zapcore.ErrorLevel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := fakeMetadata(t).(*metadatafake.FakeMetadataClient)
			var gets atomic.Int64
			fake.PrependReactor("get", "*", func(clienttesting.Action) (bool, runtime.Object, error) {
				gets.Add(1)
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "demo-a-1", errors.New("RBAC"))
			})
			h, logs, host := observedLookups(t, fake, time.Minute, tc.resources...)
			h.consume(event(withoutOwner(podA1), "e1", t0.Add(time.Second)))
			h.consume(event(withoutOwner(podB1), "e2", t0.Add(2*time.Second)))
			assertChild(t, h.one("Pod default/demo-a-1"), h.activitySpan("event e1"))
			assertChild(t, h.one("Pod default/demo-b-1"), h.activitySpan("event e2"))
			if n := gets.Load(); n != 1 {
				t.Errorf("%d GETs; want 1: pods are not asked about again within cache_ttl after a 403", n)
			}
			if st := host.statuses(); !slices.Equal(st, tc.wantStatus) {
				t.Errorf("statuses %v, want %v", st, tc.wantStatus)
			}
			msgs := logs.FilterMessageSnippet("forbidden").All()
			if len(msgs) != 1 || msgs[0].Level != tc.wantLevel || msgs[0].ContextMap()["resource"] != "pods" {
				t.Errorf("want one %v naming the resource pods, got %v", tc.wantLevel, msgs)
			}
		})
	}
}

// Look-ups that fail (an apiserver that answers 503, is unreachable or slow) are not silent: a
// warning once per lookupFailedLogEvery says so, with the count of failures in between; the
// objects are placed from what the spans say, and no status is reported (nothing is lost).
func TestFailingOwnerLookupsWarnOncePerInterval(t *testing.T) {
	fake := fakeMetadata(t).(*metadatafake.FakeMetadataClient)
	fake.PrependReactor("get", "*", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("apiserver overloaded")
	})
	// cache_ttl shorter than the steps, so that every batch asks again.
	h, logs, host := observedLookups(t, fake, time.Millisecond, "pods")
	clk := h.clock
	pod := func(name string) model.Object { // a new object each batch: each one is looked up
		o := withoutOwner(podA1)
		o.Name, o.UID = name, "uid-"+name
		return o
	}
	h.consume(event(pod("p1"), "e1", t0.Add(time.Second)))
	clk.Step(10 * time.Second)
	h.consume(event(pod("p2"), "e2", t0.Add(11*time.Second)))
	clk.Step(time.Minute)
	h.consume(event(pod("p3"), "e3", t0.Add(71*time.Second)))
	assertChild(t, h.one("Pod default/p1"), h.activitySpan("event e1"))
	warnings := logs.FilterMessageSnippet("Owner look-ups are failing").All()
	if len(warnings) != 2 || warnings[0].Level != zapcore.WarnLevel {
		t.Fatalf("want two warnings a minute apart, got %v", warnings)
	}
	if n := warnings[1].ContextMap()["similar_errors_not_logged"]; n != int64(1) {
		t.Errorf("the second warning counts %v failures held back, want 1", n)
	}
	if st := host.statuses(); len(st) != 0 {
		t.Errorf("statuses %v, want none: failing look-ups lose nothing", st)
	}
}

// A resource owner_lookup.resources does not list is never asked about: its objects wait
// owner_wait as those of another cluster do.
func TestOwnerLookupAsksOnlyAboutTheListedResources(t *testing.T) {
	client, gets := getCounter(t, podA1, rsA, deploy)
	cfg := memoryConfig()
	h := newHarness(t, cfg, newFakeClock(t0))
	h.p.lookup = newOwnerLookup(client, "c1", time.Minute, time.Second, h.clock.Now, "replicasets.apps", "deployments.apps")
	h.consume(event(withoutOwner(podA1), "e1", t0.Add(time.Second)))
	if n := gets.Load(); n != 0 {
		t.Fatalf("a Pod caused %d GETs; owner_lookup.resources lists only replicasets.apps and deployments.apps", n)
	}
	h.p.lookup = newOwnerLookup(client, "c1", time.Minute, time.Second, h.clock.Now, "pods")
	h.consume(event(withoutOwner(podB1), "e2", t0.Add(2*time.Second)))
	if n := gets.Load(); n != 1 {
		t.Fatalf("a Pod caused %d GETs with pods listed; want 1", n)
	}
}

// getCounter is a metadata client that counts the GETs it is sent, answering from the
// fake underneath.
func getCounter(t *testing.T, objs ...model.Object) (metadata.Interface, *atomic.Int64) {
	t.Helper()
	fake := fakeMetadata(t, objs...).(*metadatafake.FakeMetadataClient)
	var gets atomic.Int64
	fake.PrependReactor("get", "*", func(clienttesting.Action) (bool, runtime.Object, error) {
		gets.Add(1)
		return false, nil, nil // counted, then answered by the fake's tracker
	})
	return fake, &gets
}

func TestOwnerLookupAsksOnlyAboutItsOwnClustersObjects(t *testing.T) {
	// The client reaches cluster c1's apiserver, which has a Pod default/demo-a-1 owned by
	// rs-a. Cluster c2 has a namesake Pod (another UID would not even be needed to go wrong:
	// c1's answer says nothing about c2).
	client, gets := getCounter(t, podA1, rsA, deploy)
	cfg := memoryConfig()
	cfg.OwnerWait = time.Hour
	h := newHarness(t, cfg, newFakeClock(t0))
	h.p.lookup = newOwnerLookup(client, "c1", time.Minute, time.Second, h.clock.Now)

	other := withoutOwner(podA1)
	other.Cluster = "c2"
	h.consume(event(other, "ev-c2", t0.Add(time.Second)))
	if n := gets.Load(); n != 0 {
		t.Fatalf("a span of cluster c2 caused %d GETs against cluster c1's apiserver", n)
	}
	if h.sink.SpanCount() != 0 {
		t.Fatal("the c2 span must wait for its owner (owner_wait), not be settled by c1's apiserver")
	}
	h.p.lookup.mu.Lock()
	cached := len(h.p.lookup.cache)
	h.p.lookup.mu.Unlock()
	if cached != 0 {
		t.Fatalf("a c2 object was put in the look-up cache (%d entries)", cached)
	}
	// Direct callers get the same answer: unknown, no GET.
	if res, _, err := h.p.lookup.lookup(context.Background(), other); res != lookupUnknown || err != nil || gets.Load() != 0 {
		t.Fatalf("lookup of a c2 object = %v, %v after %d GETs; want unknown without a GET", res, err, gets.Load())
	}

	// The configured cluster's objects are still looked up.
	h.consume(event(withoutOwner(podA1), "ev-c1", t0.Add(time.Second)))
	if gets.Load() == 0 {
		t.Fatal("a span of cluster c1 was not looked up")
	}
	assertChild(t, h.one("ReplicaSet default/demo-a"), h.one("Pod default/demo-a-1"))
}

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
