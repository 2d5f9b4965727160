package k8seventsreceiver

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver/receivertest"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/internal/storagetest"
	"github.com/kubetrail/kubetrail/receiver/k8seventsreceiver/internal/metadata"
)

var storageID = component.MustNewIDWithName("file_storage", "test")

// newFakeClient serves events.k8s.io/v1 (or only core/v1 when eventsV1 is false) with objs.
func newFakeClient(eventsV1 bool, objs ...runtime.Object) *fake.Clientset {
	c := fake.NewClientset(objs...)
	disc := c.Discovery().(*fakediscovery.FakeDiscovery)
	disc.Resources = []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "events", Kind: "Event", Namespaced: true}}}}
	if eventsV1 {
		disc.Resources = append(disc.Resources, &metav1.APIResourceList{GroupVersion: "events.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "events", Kind: "Event", Namespaced: true}}})
	}
	return c
}

// testHost offers a storage extension and records reported statuses.
type testHost struct {
	component.Host
	exts map[component.ID]component.Component

	mu       sync.Mutex
	statuses []*componentstatus.Event
}

func newTestHost(st storage.Client) *testHost {
	h := &testHost{Host: componenttest.NewNopHost(), exts: map[component.ID]component.Component{}}
	if st != nil {
		h.exts[storageID] = &storagetest.Extension{Client: st}
	}
	return h
}

func (h *testHost) GetExtensions() map[component.ID]component.Component { return h.exts }

func (h *testHost) Report(ev *componentstatus.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.statuses = append(h.statuses, ev)
}

// firstError is the error of the first status reported with st, nil if none was.
func (h *testHost) firstError(st componentstatus.Status) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ev := range h.statuses {
		if ev.Status() == st {
			return ev.Err()
		}
	}
	return nil
}

// last is the status reported last (StatusNone before any).
func (h *testHost) last() componentstatus.Status {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.statuses) == 0 {
		return componentstatus.StatusNone
	}
	return h.statuses[len(h.statuses)-1].Status()
}

type harness struct {
	t    *testing.T
	r    *eventsReceiver
	tm   *telemetry
	host *testHost
}

func startReceiver(t *testing.T, client kubernetes.Interface, next consumer.Traces, st storage.Client, mutate func(*Config, *eventsReceiver)) *harness {
	t.Helper()
	tm := newTelemetry(t)
	cfg := createDefaultConfig().(*Config)
	cfg.Cluster = "test"
	cfg.Backoff = BackoffConfig{InitialInterval: 10 * time.Millisecond, MaxInterval: 40 * time.Millisecond}
	// The test Events happened at t0; max_event_age has its own test.
	cfg.MaxEventAge = 0
	if st != nil {
		cfg.Storage = &storageID
	}
	set := receivertest.NewNopSettings(metadata.Type)
	set.TelemetrySettings = tm.set
	r, err := newReceiver(cfg, set, next)
	if err != nil {
		t.Fatal(err)
	}
	r.newClient = func(*Config) (kubernetes.Interface, error) { return client, nil }
	if mutate != nil {
		mutate(cfg, r)
	}
	h := &harness{t: t, r: r, tm: tm, host: newTestHost(st)}
	if err := r.Start(context.Background(), h.host); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Shutdown(context.Background()) })
	return h
}

func (h *harness) stop() {
	if err := h.r.Shutdown(context.Background()); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) metric(name, reason string) int64 { return h.tm.value(h.t, name, reason) }

// waitFor polls an asynchronous outcome; it bounds the wait, it does not measure time.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func spanIDs(sink *consumertest.TracesSink) []pcommon.SpanID {
	var ids []pcommon.SpanID
	for _, td := range sink.AllTraces() {
		eachSpan(td, func(_ pcommon.Map, s ptrace.Span) { ids = append(ids, s.SpanID()) })
	}
	return ids
}

func assertUnique(t *testing.T, ids []pcommon.SpanID) {
	t.Helper()
	seen := map[pcommon.SpanID]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("span ID %s emitted twice", id)
		}
		seen[id] = true
	}
}

func TestReceiverNewEventAndSeriesIncrements(t *testing.T) {
	client := newFakeClient(true, testEvent("a", "10"))
	sink := new(consumertest.TracesSink)
	h := startReceiver(t, client, sink, nil, nil)
	waitFor(t, "the listed Event's span", func() bool { return sink.SpanCount() == 1 })

	// The Event recurs: its series waits for series_quiet (TestASeriesIsOneSpan), or here for
	// the Event's deletion.
	ev := testEvent("a", "11", withSeries(3, t0.Add(2*time.Second)))
	if _, err := client.EventsV1().Events("default").Update(context.Background(), ev, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the series to be pending", func() bool { return h.metric("otelcol_k8s_event_spans_pending_series", "") == 1 })

	// A new Event arriving on the watch is one span; a deleted one is forgotten, its series
	// closed.
	if _, err := client.EventsV1().Events("default").Create(context.Background(), testEvent("b", "12"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the watched new Event's span", func() bool { return sink.SpanCount() == 2 })
	if err := client.EventsV1().Events("default").Delete(context.Background(), "web-1.a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deleted Event's series span", func() bool { return sink.SpanCount() == 3 })
	waitFor(t, "the deleted Event to be forgotten", func() bool {
		return h.metric("otelcol_k8s_event_spans_tracked_events", "") == 1
	})
	assertUnique(t, spanIDs(sink))
	last := sink.AllTraces()[len(sink.AllTraces())-1]
	eachSpan(last, func(res pcommon.Map, s ptrace.Span) {
		if s.Name() != "Scheduled" || !s.StartTimestamp().AsTime().Equal(t0) || !s.EndTimestamp().AsTime().Equal(t0.Add(2*time.Second)) {
			t.Errorf("series span %q [%v, %v], want Scheduled from eventTime to the series' lastObservedTime", s.Name(), s.StartTimestamp().AsTime(), s.EndTimestamp().AsTime())
		}
		obj, _ := model.ObjectFromAttributes(res, s.Attributes())
		if obj.Kind != "Pod" || obj.Resource != "pods" || obj.UID != "pod-uid-1" {
			t.Errorf("span is on %+v, want the regarding Pod", obj)
		}
	})
	h.stop()
	if got := h.metric("otelcol_k8s_event_spans_series_closed", seriesDeleted); got != 1 {
		t.Errorf("series_closed{deleted} = %d, want 1", got)
	}
	// The collector's own receiver metric counts the spans the next consumer accepted.
	if got := h.metric("otelcol_receiver_accepted_spans", ""); got != 3 {
		t.Errorf("otelcol_receiver_accepted_spans = %d, want 3", got)
	}
}

func TestReceiverStartsFreshOnAnUnreadableCheckpoint(t *testing.T) {
	st := storagetest.NewMemClient()
	must(t, st.Set(context.Background(), checkpointStateKey, []byte("{not json")))
	sink := new(consumertest.TracesSink)
	h := startReceiver(t, newFakeClient(true, testEvent("a", "10")), sink, st, nil)
	waitFor(t, "the span despite the bad checkpoint", func() bool { return sink.SpanCount() == 1 })
	h.stop()
	if got := h.metric("otelcol_k8s_event_spans_errors", errorCheckpointRead); got != 1 {
		t.Errorf("errors{checkpoint_read} = %d, want 1", got)
	}
}

func TestReceiverFallsBackToCoreV1(t *testing.T) {
	core := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "web.1", Namespace: "default", UID: "core-1", ResourceVersion: "5"},
		InvolvedObject: corev1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "default", Name: "web", UID: "dep-1"},
		Reason:         "ScalingReplicaSet",
		Message:        "Scaled up replica set web-1 to 2",
		Type:           corev1.EventTypeNormal,
		Source:         corev1.EventSource{Component: "deployment-controller"},
		Count:          1,
		FirstTimestamp: metav1.NewTime(t0),
		LastTimestamp:  metav1.NewTime(t0),
	}
	sink := new(consumertest.TracesSink)
	startReceiver(t, newFakeClient(false, core), sink, nil, nil)
	waitFor(t, "the core/v1 Event's span", func() bool { return sink.SpanCount() == 1 })
	eachSpan(sink.AllTraces()[0], func(res pcommon.Map, s ptrace.Span) {
		note, _ := s.Attributes().Get(model.AttrEventNote)
		ctrl, _ := s.Attributes().Get(model.AttrEventReportingCtrl)
		res2, _ := res.Get(model.AttrObjectResource)
		if s.Name() != "ScalingReplicaSet" || note.Str() != core.Message || ctrl.Str() != "deployment-controller" || res2.Str() != "deployments" {
			t.Errorf("core/v1 Event converted to %q note=%q controller=%q resource=%q", s.Name(), note.Str(), ctrl.Str(), res2.Str())
		}
	})
}

func TestReceiverRelistAfterGoneEmitsNoDuplicates(t *testing.T) {
	client := newFakeClient(true, testEvent("a", "10"), testEvent("b", "11"))
	watchers := make(chan *watch.FakeWatcher, 10)
	client.PrependWatchReactor("events", func(k8stesting.Action) (bool, watch.Interface, error) {
		w := watch.NewFakeWithChanSize(10, false)
		watchers <- w
		return true, w, nil
	})
	sink := new(consumertest.TracesSink)
	h := startReceiver(t, client, sink, nil, nil)
	waitFor(t, "the listed Events' spans", func() bool { return sink.SpanCount() == 2 })
	w := <-watchers
	// While the watch is down, b recurs; then the apiserver answers 410 Gone.
	if err := client.Tracker().Update(schema.GroupVersionResource{Group: "events.k8s.io", Version: "v1", Resource: "events"},
		testEvent("b", "20", withSeries(2, t0.Add(time.Second))), "default"); err != nil {
		t.Fatal(err)
	}
	w.Error(&apierrors.NewResourceExpired("too old resource version").ErrStatus)
	<-watchers // the relist is done once the next watch starts
	waitFor(t, "the occurrence that happened during the gap to open b's series", func() bool {
		return h.metric("otelcol_k8s_event_spans_pending_series", "") == 1
	})
	h.stop() // without storage, the open series' span goes out at shutdown
	if sink.SpanCount() != 3 {
		t.Fatalf("%d spans, want a's and b's first occurrences and b's series", sink.SpanCount())
	}
	assertUnique(t, spanIDs(sink))
	if got := h.metric("otelcol_k8s_event_spans_series_closed", seriesShutdown); got != 1 {
		t.Errorf("series_closed{shutdown} = %d, want 1", got)
	}
	if got := h.metric("otelcol_k8s_event_spans_duplicates_suppressed", duplicateSameResourceVersion); got != 1 {
		t.Errorf("duplicates{same_resource_version} = %d, want 1 (a, relisted unchanged)", got)
	}
	if got := h.metric("otelcol_k8s_event_spans_watch_restarts", restartWatchClosed); got < 1 {
		t.Errorf("watch_restarts{watch_closed} = %d, want ≥ 1", got)
	}
}

func TestReceiverRestartsFromCheckpoint(t *testing.T) {
	st := storagetest.NewMemClient()
	client := newFakeClient(true, testEvent("a", "10"), testEvent("c", "12"))
	sink1 := new(consumertest.TracesSink)
	h1 := startReceiver(t, client, sink1, st, nil)
	waitFor(t, "the first run's spans", func() bool { return sink1.SpanCount() == 2 })
	waitFor(t, "the checkpoint", func() bool { return st.Keys() >= 2 })
	h1.stop()

	// While the collector is down: a recurs twice, b is created, c is untouched.
	gvr := schema.GroupVersionResource{Group: "events.k8s.io", Version: "v1", Resource: "events"}
	if err := client.Tracker().Update(gvr, testEvent("a", "20", withSeries(3, t0.Add(time.Minute))), "default"); err != nil {
		t.Fatal(err)
	}
	if err := client.Tracker().Add(testEvent("b", "21")); err != nil {
		t.Fatal(err)
	}
	sink2 := new(consumertest.TracesSink)
	h2 := startReceiver(t, client, sink2, st, func(c *Config, _ *eventsReceiver) { c.MaxEventAge = time.Second })
	waitFor(t, "the second run's span", func() bool { return sink2.SpanCount() == 1 })
	waitFor(t, "a's series to be pending", func() bool { return h2.metric("otelcol_k8s_event_spans_pending_series", "") == 1 })
	h2.stop()

	all := append(spanIDs(sink1), spanIDs(sink2)...)
	assertUnique(t, all)
	// a's series is left to the checkpoint at shutdown (TestASeriesSpanHasOneIDAcrossReplicasAndRestarts).
	if len(all) != 3 {
		t.Fatalf("%d spans over both runs, want 3 (a, b, c)", len(all))
	}
	if got := h2.metric("otelcol_k8s_event_spans_duplicates_suppressed", duplicateCheckpointed); got != 1 {
		t.Errorf("duplicates{checkpointed} = %d, want 1 (c)", got)
	}
	if got := h2.metric("otelcol_k8s_event_spans_dropped", reasonTooOld); got != 0 {
		t.Errorf("max_event_age dropped %d Events although a checkpoint existed", got)
	}
}

func TestReceiverMaxEventAgeAndMalformedEvents(t *testing.T) {
	fresh := time.Now().Add(-time.Second)
	client := newFakeClient(true,
		testEvent("old", "1", withTime(time.Now().Add(-time.Hour))),
		testEvent("noref", "2", withoutRegarding(), withTime(fresh)),
		testEvent("notime", "3", withoutTimes()),
		testEvent("fresh", "4", withTime(fresh)),
	)
	sink := new(consumertest.TracesSink)
	h := startReceiver(t, client, sink, nil, func(c *Config, _ *eventsReceiver) { c.MaxEventAge = 5 * time.Minute })
	waitFor(t, "the fresh Event's span", func() bool { return sink.SpanCount() == 1 })
	waitFor(t, "the three drops", func() bool {
		return h.metric("otelcol_k8s_event_spans_dropped", "") == 3
	})
	for _, reason := range []string{reasonTooOld, reasonMissingRegarding, reasonMissingTime} {
		if got := h.metric("otelcol_k8s_event_spans_dropped", reason); got != 1 {
			t.Errorf("dropped{reason=%s} = %d, want 1", reason, got)
		}
	}
	h.stop()
	if sink.SpanCount() != 1 {
		t.Fatalf("%d spans, want only the fresh Event's", sink.SpanCount())
	}
}

func TestReceiverRetriesRefusedSpansAndCheckpointsOnlyAccepted(t *testing.T) {
	st := storagetest.NewMemClient()
	clk := clocktesting.NewFakeClock(time.Now())
	var calls atomic.Int32
	sink := new(consumertest.TracesSink)
	next, err := consumer.NewTraces(func(ctx context.Context, td ptrace.Traces) error {
		if calls.Add(1) <= 2 {
			return errors.New("exporter queue full")
		}
		return sink.ConsumeTraces(ctx, td)
	})
	if err != nil {
		t.Fatal(err)
	}
	h := startReceiver(t, newFakeClient(true, testEvent("a", "10")), next, st, func(c *Config, r *eventsReceiver) {
		c.StalledWatchTimeout = 0
		r.clock = clk
	})
	for i := int32(1); i <= 2; i++ {
		waitFor(t, "a refused attempt", func() bool { return calls.Load() == i && clk.HasWaiters() })
		if _, err := st.Get(context.Background(), checkpointStateKey); err != nil || st.Keys() != 0 {
			t.Fatalf("checkpoint written while the consumer refuses (keys=%d)", st.Keys())
		}
		clk.Step(time.Second)
	}
	waitFor(t, "the accepted batch and its checkpoint", func() bool { return sink.SpanCount() == 1 && st.Keys() >= 2 })
	h.stop()
	if got := h.metric("otelcol_k8s_event_spans_errors", errorConsumer); got != 2 {
		t.Errorf("errors{consumer} = %d, want 2", got)
	}
}

func TestReceiverDropsPermanentlyRefusedSpans(t *testing.T) {
	next, err := consumer.NewTraces(func(context.Context, ptrace.Traces) error {
		return consumererrorPermanent
	})
	if err != nil {
		t.Fatal(err)
	}
	h := startReceiver(t, newFakeClient(true, testEvent("a", "10")), next, nil, nil)
	waitFor(t, "the permanent refusal to be counted", func() bool {
		return h.metric("otelcol_k8s_event_spans_dropped", reasonConsumerPermanent) == 1
	})
	h.stop()
}

// An RBAC refusal is a recoverable status that names what to grant, never a permanent one: the
// collector's status machine leaves a permanent error only to stop, so a role granted later could
// not make the receiver healthy again. Granted after a few refusals, the status turns OK.
func TestReceiverReportsRBACForbiddenRecoverably(t *testing.T) {
	for _, tc := range []struct {
		name     string
		eventsV1 bool
		group    string
	}{
		{"forbidden events.k8s.io names that group", true, `"events.k8s.io"`},
		{"forbidden core/v1 events name the core group", false, `""`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := newFakeClient(tc.eventsV1)
			var refusals atomic.Int32
			client.PrependReactor("list", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
				if refusals.Add(1) > 3 {
					return false, nil, nil // RBAC granted: the fake lists
				}
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "events"}, "", errors.New("RBAC: access denied"))
			})
			h := startReceiver(t, client, new(consumertest.TracesSink), nil, nil)
			waitFor(t, "a recoverable status", func() bool { return h.host.firstError(componentstatus.StatusRecoverableError) != nil })
			waitFor(t, "status OK once RBAC allows the list", func() bool { return h.host.last() == componentstatus.StatusOK })
			h.stop()
			if err := h.host.firstError(componentstatus.StatusPermanentError); err != nil {
				t.Errorf("a permanent status was reported: %v", err)
			}
			msg := h.host.firstError(componentstatus.StatusRecoverableError).Error()
			for _, want := range []string{"list and watch", "API group " + tc.group, "all namespaces"} {
				if !strings.Contains(msg, want) {
					t.Errorf("status %q does not name %q", msg, want)
				}
			}
			if got := h.metric("otelcol_k8s_event_spans_errors", errorForbidden); got < 1 {
				t.Errorf("errors{forbidden} = %d, want ≥ 1", got)
			}
		})
	}
}

func TestReceiverRecoversFromAnUnreachableAPIServer(t *testing.T) {
	client := newFakeClient(true, testEvent("a", "10"))
	var failures atomic.Int32
	client.PrependReactor("list", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failures.Add(1) <= 3 {
			return true, nil, errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
		}
		return false, nil, nil
	})
	sink := new(consumertest.TracesSink)
	h := startReceiver(t, client, sink, nil, nil)
	waitFor(t, "the span after the apiserver came back", func() bool { return sink.SpanCount() == 1 })
	h.stop()
	if got := h.metric("otelcol_k8s_event_spans_errors", errorListWatch); got != 3 {
		t.Errorf("errors{list_watch} = %d, want 3", got)
	}
	if h.host.firstError(componentstatus.StatusPermanentError) != nil {
		t.Error("an unreachable apiserver was reported as a permanent error")
	}
}

func TestReceiverRestartsAStalledWatch(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	client := newFakeClient(true, testEvent("a", "10"))
	watches := make(chan struct{}, 10)
	client.PrependWatchReactor("events", func(k8stesting.Action) (bool, watch.Interface, error) {
		watches <- struct{}{}
		return true, watch.NewFakeWithChanSize(1, false), nil // never delivers anything
	})
	sink := new(consumertest.TracesSink)
	h := startReceiver(t, client, sink, nil, func(c *Config, r *eventsReceiver) {
		c.StalledWatchTimeout = time.Minute
		r.clock = clk
	})
	<-watches
	// Advance the injected clock until the guard fires; a guard that never fires fails here.
	for i := 0; h.metric("otelcol_k8s_event_spans_watch_restarts", restartStalled) == 0; i++ {
		if i == 5000 {
			t.Fatal("the stall guard did not restart a silent watch")
		}
		clk.Step(15 * time.Second)
		time.Sleep(time.Millisecond)
	}
	<-watches // relisted and watching again
	// The stall was a recoverable status; the relist that followed it made it OK again.
	waitFor(t, "status OK after the relist", func() bool { return h.host.last() == componentstatus.StatusOK })
	h.stop()
	if sink.SpanCount() != 1 {
		t.Fatalf("%d spans after the stalled watch was restarted, want 1", sink.SpanCount())
	}
	if err := h.host.firstError(componentstatus.StatusRecoverableError); err == nil || !strings.Contains(err.Error(), "delivered nothing") {
		t.Errorf("the stall was not reported as a recoverable status: %v", err)
	}
}

// client-go's reflector retries a watch whose connection is refused by itself and does not return
// the error; the receiver still reports each refused call (status, counter, log) and turns OK at
// the first Event that arrives after it.
func TestReceiverReportsWatchErrorsTheReflectorRetriesItself(t *testing.T) {
	client := newFakeClient(true, testEvent("a", "10"))
	var refusals atomic.Int32
	events := make(chan *watch.FakeWatcher, 1)
	client.PrependWatchReactor("events", func(k8stesting.Action) (bool, watch.Interface, error) {
		if refusals.Add(1) <= 3 {
			// A refused connection as the dialer returns it (what the reflector retries itself).
			return true, nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
		}
		w := watch.NewFakeWithChanSize(1, false)
		events <- w
		return true, w, nil
	})
	sink := new(consumertest.TracesSink)
	h := startReceiver(t, client, sink, nil, nil)
	waitFor(t, "the listed Event's span", func() bool { return sink.SpanCount() == 1 })
	w := <-events
	if got := h.metric("otelcol_k8s_event_spans_errors", errorListWatch); got != 3 {
		t.Errorf("errors{list_watch} = %d, want 3 (one per refused watch)", got)
	}
	if err := h.host.firstError(componentstatus.StatusRecoverableError); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("the refused watches were not reported as a recoverable status: %v", err)
	}
	w.Add(testEvent("b", "11"))
	waitFor(t, "the watched Event's span", func() bool { return sink.SpanCount() == 2 })
	waitFor(t, "status OK once an Event arrives", func() bool { return h.host.last() == componentstatus.StatusOK })
	h.stop()
	if got := h.metric("otelcol_k8s_event_spans_watch_restarts", restartError); got != 0 {
		t.Errorf("watch_restarts{error} = %d, want 0: the reflector retried the watch within one list-watch", got)
	}
}

func TestReceiverWatchesOnlyConfiguredNamespaces(t *testing.T) {
	client := newFakeClient(true,
		testEvent("in-a", "1", withNamespace("team-a")),
		testEvent("in-b", "2", withNamespace("team-b")),
		testEvent("in-c", "3", withNamespace("team-c")),
	)
	sink := new(consumertest.TracesSink)
	h := startReceiver(t, client, sink, nil, func(c *Config, _ *eventsReceiver) { c.Namespaces = []string{"team-a", "team-b"} })
	waitFor(t, "spans of both namespaces", func() bool { return sink.SpanCount() == 2 })
	h.stop()
	for _, td := range sink.AllTraces() {
		eachSpan(td, func(_ pcommon.Map, s ptrace.Span) {
			if ns, _ := s.Attributes().Get(model.AttrNamespaceName); ns.Str() == "team-c" {
				t.Error("an Event of an unwatched namespace became a span")
			}
		})
	}
}

func TestLifecycleStartStopTwice(t *testing.T) {
	f := NewFactory()
	cfg := f.CreateDefaultConfig().(*Config)
	cfg.Cluster = "test"
	cfg.Storage = &storageID
	cfg.MaxEventAge = 0
	st := storagetest.NewMemClient()
	sink := new(consumertest.TracesSink)
	rcv, err := f.CreateTraces(context.Background(), receivertest.NewNopSettings(metadata.Type), cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	client := newFakeClient(true, testEvent("a", "10"))
	rcv.(*eventsReceiver).newClient = func(*Config) (kubernetes.Interface, error) { return client, nil }
	for i := range 2 {
		if err := rcv.Start(context.Background(), newTestHost(st)); err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		waitFor(t, "the watch to have delivered", func() bool { return st.Keys() >= 2 })
		if err := rcv.Shutdown(context.Background()); err != nil {
			t.Fatalf("shutdown %d: %v", i, err)
		}
	}
	if sink.SpanCount() != 1 {
		t.Fatalf("%d spans over two starts with a checkpoint, want 1", sink.SpanCount())
	}
	if st.Closed() != 2 {
		t.Errorf("storage client closed %d times, want once per shutdown", st.Closed())
	}
	// Shutdown without Start must be harmless too.
	rcv2, _ := f.CreateTraces(context.Background(), receivertest.NewNopSettings(metadata.Type), cfg, sink)
	if err := rcv2.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestStartFailsOnAMissingStorageExtension(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	cfg.Cluster = "test"
	cfg.Storage = &storageID
	r, err := newReceiver(cfg, receivertest.NewNopSettings(metadata.Type), new(consumertest.TracesSink))
	if err != nil {
		t.Fatal(err)
	}
	r.newClient = func(*Config) (kubernetes.Interface, error) { return newFakeClient(true), nil }
	if err := r.Start(context.Background(), newTestHost(nil)); err == nil || !strings.Contains(err.Error(), "file_storage/test") {
		t.Fatalf("Start = %v, want an error naming the storage extension", err)
	}
}

func TestReceiverCheckpointsPendingOccurrencesAfterAnInterval(t *testing.T) {
	st := storagetest.NewMemClient()
	clk := clocktesting.NewFakeClock(time.Now())
	client := newFakeClient(true, testEvent("a", "10"))
	sink := new(consumertest.TracesSink)
	h := startReceiver(t, client, sink, st, func(c *Config, r *eventsReceiver) {
		c.StalledWatchTimeout = 0
		r.clock = clk
	})
	checkpointed := func(uid string) bool {
		got, err := newCheckpoint(st, time.Hour, clk.Now).load(context.Background())
		must(t, err)
		_, ok := got[uid]
		return ok
	}
	waitFor(t, "the first checkpoint", func() bool { return checkpointed("a") })
	if _, err := client.EventsV1().Events("default").Create(context.Background(), testEvent("b", "11"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b's span and the pending write's timer", func() bool { return sink.SpanCount() == 2 && clk.HasWaiters() })
	if checkpointed("b") {
		t.Fatal("b was written within the checkpoint interval of a")
	}
	clk.Step(checkpointInterval)
	waitFor(t, "b's checkpoint after the interval", func() bool { return checkpointed("b") })
	h.stop()
}

func TestReceiverWatchesOnlyWhileLeading(t *testing.T) {
	client := newFakeClient(true, testEvent("a", "10"))
	sink := new(consumertest.TracesSink)
	h := startReceiver(t, client, sink, nil, func(c *Config, _ *eventsReceiver) {
		le := defaultLeaderElectionConfig()
		le.LeaseDuration, le.RenewDeadline, le.RetryPeriod = 2*time.Second, time.Second, 50*time.Millisecond
		c.LeaderElection = configoptional.Some(le)
	})
	waitFor(t, "the leader's span", func() bool { return sink.SpanCount() == 1 })
	lease, err := client.CoordinationV1().Leases("default").Get(context.Background(), "kubetrail-k8s-event-spans", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Fatalf("no Lease held while watching: %v", err)
	}
	h.stop()
	lease, err = client.CoordinationV1().Leases("default").Get(context.Background(), "kubetrail-k8s-event-spans", metav1.GetOptions{})
	if err != nil || (lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "") {
		t.Fatalf("the Lease was not released at shutdown: %v %v", lease.Spec.HolderIdentity, err)
	}
}
