package k8seventsreceiver

import (
	"context"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/internal/storagetest"
)

// These tests run the receiver end to end over a fake apiserver, and name the span attributes
// and link types as a backend sees them.

const (
	seriesObservations = 37
	seriesEvery        = 20 * time.Second // 36 intervals: 12 minutes
	// quietDefault is series_quiet's default.
	quietDefault = 15 * time.Minute
)

var eventsGVR = schema.GroupVersionResource{Group: "events.k8s.io", Version: "v1", Resource: "events"}

// backOff is the version of a BackOff Event after its nth observation: a series from n = 2 on,
// observed every 20 s from t0.
func backOff(n int) *eventsv1.Event {
	rv := strconv.Itoa(100 + n)
	warning := withWarning("BackOff")
	if n == 1 {
		return testEvent("a", rv, warning)
	}
	return testEvent("a", rv, warning, withSeries(int32(n), t0.Add(time.Duration(n-1)*seriesEvery)))
}

// seriesRun is a receiver on a fake clock, so that a test decides when a series has been quiet.
type seriesRun struct {
	*harness
	clk    *clocktesting.FakeClock
	client *fake.Clientset
	sink   *consumertest.TracesSink
}

func startSeriesRun(t *testing.T, client *fake.Clientset, mem *storagetest.MemClient) *seriesRun {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Now())
	sink := new(consumertest.TracesSink)
	var st storage.Client
	if mem != nil {
		st = mem
	}
	h := startReceiver(t, client, sink, st, func(c *Config, r *eventsReceiver) {
		c.StalledWatchTimeout = 0
		r.clock = clk
	})
	return &seriesRun{harness: h, clk: clk, client: client, sink: sink}
}

// observe updates the Event in the fake apiserver through its API, so the watch delivers it.
func (r *seriesRun) observe(t *testing.T, ev *eventsv1.Event) {
	t.Helper()
	if _, err := r.client.EventsV1().Events(ev.Namespace).Update(context.Background(), ev, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// quiet lets series_quiet pass once the receiver received want Event versions.
func (r *seriesRun) quiet(t *testing.T, want int64) {
	t.Helper()
	waitFor(t, "every version received", func() bool { return r.metric("otelcol_k8s_event_spans_events_received", "") >= want })
	// The series span waits on the fake clock (a receiver that emitted per occurrence has no
	// timer, and has more than the first occurrence's span already).
	waitFor(t, "the series timer", func() bool { return r.clk.HasWaiters() || r.sink.SpanCount() > 1 })
	r.clk.Step(quietDefault)
}

type eventSpan struct {
	id          pcommon.SpanID
	name        string
	count       int64
	occurrences int64 // 0 on an occurrence span
	start, end  time.Time
}

func eventSpans(sink *consumertest.TracesSink) []eventSpan {
	var out []eventSpan
	for _, td := range sink.AllTraces() {
		eachSpan(td, func(_ pcommon.Map, s ptrace.Span) {
			e := eventSpan{id: s.SpanID(), name: s.Name(), start: s.StartTimestamp().AsTime(), end: s.EndTimestamp().AsTime()}
			if v, ok := s.Attributes().Get(model.AttrEventCount); ok {
				e.count = v.Int()
			}
			if v, ok := s.Attributes().Get("k8s.event.series.occurrences"); ok {
				e.occurrences = v.Int()
			}
			out = append(out, e)
		})
	}
	return out
}

// theSeriesSpan waits for the run's spans and checks them: the first occurrence at t0 and one
// series span of 37 from the first to the last observation. It returns the series span's ID.
func theSeriesSpan(t *testing.T, r *seriesRun, occurrenceSpan bool) pcommon.SpanID {
	t.Helper()
	want := 1
	if occurrenceSpan {
		want = 2
	}
	waitFor(t, "the series span", func() bool { return r.sink.SpanCount() >= want })
	time.Sleep(20 * time.Millisecond) // nothing else may follow
	spans := eventSpans(r.sink)
	if len(spans) != want {
		t.Fatalf("%d spans %+v, want %d: the first occurrence and one series span", len(spans), spans, want)
	}
	var series *eventSpan
	for i, s := range spans {
		if s.occurrences == 0 {
			if s.id != model.EventSpanID("a", "1") || s.count != 1 || !s.start.Equal(t0) || !s.end.Equal(t0) {
				t.Errorf("occurrence span %+v, want occurrence 1 at %v", s, t0)
			}
			continue
		}
		series = &spans[i]
	}
	last := t0.Add((seriesObservations - 1) * seriesEvery)
	if series == nil || series.name != "BackOff" || series.count != seriesObservations || series.occurrences != seriesObservations ||
		!series.start.Equal(t0) || !series.end.Equal(last) {
		t.Fatalf("series span %+v, want BackOff ×%d from %v to %v", series, seriesObservations, t0, last)
	}
	return series.id
}

// "BackOff ×37 over 12 min" is one bar: the first occurrence's span at once, then, once the
// series has been quiet for series_quiet, one span from the first to the last observation
// carrying the count; not 37 zero-length spans.
func TestASeriesIsOneSpan(t *testing.T) {
	r := startSeriesRun(t, newFakeClient(true, backOff(1)), nil)
	waitFor(t, "the first occurrence's span", func() bool { return r.sink.SpanCount() == 1 })
	for n := 2; n <= seriesObservations; n++ {
		r.observe(t, backOff(n))
	}
	r.quiet(t, seriesObservations)
	theSeriesSpan(t, r, true)
	r.stop()
}

// The series span's ID is the same for a receiver that saw every observation, one that started
// when the series was over (a replica started later, a restart without checkpoint) and one
// restarted with its checkpoint in the middle of the series (a relisted watch:
// TestTrackerSeriesIDAfterARelist): the processor's duplicate marks keep one copy.
func TestASeriesSpanHasOneIDAcrossReplicasAndRestarts(t *testing.T) {
	continuous := startSeriesRun(t, newFakeClient(true, backOff(1)), nil)
	waitFor(t, "the first occurrence's span", func() bool { return continuous.sink.SpanCount() == 1 })
	for n := 2; n <= seriesObservations; n++ {
		continuous.observe(t, backOff(n))
	}
	continuous.quiet(t, seriesObservations)
	want := theSeriesSpan(t, continuous, true)
	continuous.stop()

	t.Run("a replica that first sees the series at its end", func(t *testing.T) {
		late := startSeriesRun(t, newFakeClient(true, backOff(seriesObservations)), nil)
		late.quiet(t, 1)
		if got := theSeriesSpan(t, late, true); got != want {
			t.Fatalf("series span ID %s, want %s", got, want)
		}
		late.stop()
	})

	t.Run("a receiver restarted with its checkpoint in the middle of the series", func(t *testing.T) {
		st := storagetest.NewMemClient()
		client := newFakeClient(true, backOff(1))
		first := startSeriesRun(t, client, st)
		waitFor(t, "the first occurrence's span", func() bool { return first.sink.SpanCount() == 1 })
		for n := 2; n <= 20; n++ {
			first.observe(t, backOff(n))
		}
		waitFor(t, "the versions received", func() bool { return first.metric("otelcol_k8s_event_spans_events_received", "") >= 20 })
		first.stop()
		// While it is down the series goes on to its end.
		if err := client.Tracker().Update(eventsGVR, backOff(seriesObservations), "default"); err != nil {
			t.Fatal(err)
		}
		second := startSeriesRun(t, client, st)
		second.quiet(t, 1)
		spans := append(eventSpans(first.sink), eventSpans(second.sink)...)
		if got := theSeriesSpan(t, second, false); got != want {
			t.Fatalf("series span ID %s, want %s; spans over both runs %+v", got, want, spans)
		}
		second.stop()
		if n := len(eventSpans(first.sink)) + len(eventSpans(second.sink)); n != 2 {
			t.Fatalf("%d spans over both runs, want the first occurrence's and the series'", n)
		}
	})
}

// An Event's related object (here the Node of a scheduling failure) is a span link to that
// object's span in the span's window, typed related, and its apiVersion is an attribute.
func TestTheRelatedObjectIsALink(t *testing.T) {
	ev := testEvent("a", "10", withWarning("FailedScheduling"), func(ev *eventsv1.Event) {
		ev.Related = &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: "kwok-node-0", UID: "node-uid-1"}
	})
	sink := new(consumertest.TracesSink)
	h := startReceiver(t, newFakeClient(true, ev), sink, nil, nil)
	waitFor(t, "the span", func() bool { return sink.SpanCount() == 1 })
	h.stop()
	w := model.WindowStart(t0, model.DefaultWindow)
	node := model.UIDKey("test", "node-uid-1")
	eachSpan(sink.AllTraces()[0], func(_ pcommon.Map, s ptrace.Span) {
		if v, _ := s.Attributes().Get("k8s.event.related.api_version"); v.Str() != "v1" {
			t.Errorf("k8s.event.related.api_version = %q, want v1", v.Str())
		}
		if s.Links().Len() != 1 {
			t.Fatalf("%d links, want one to the related Node", s.Links().Len())
		}
		l := s.Links().At(0)
		typ, _ := l.Attributes().Get(model.AttrLinkType)
		if typ.Str() != "related" || l.SpanID() != model.ObjectSpanID(node, w) || l.TraceID() != model.ObjectTraceID(node, w) {
			t.Fatalf("link %s/%s type %q, want the Node's object span in the window, type related", l.TraceID(), l.SpanID(), typ.Str())
		}
	})
}
