package k8seventsreceiver

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	eventsv1 "k8s.io/api/events/v1"

	"github.com/kubetrail/kubetrail/internal/model"
)

// step is one thing the reflector hands the tracker (or the series closing, as when they go
// quiet), and the spans it must emit: "1" for an Event's first occurrence, "a-b" for a series
// span covering occurrences a to b.
type step struct {
	observe *eventsv1.Event
	replace []*eventsv1.Event
	initial bool
	forget  *eventsv1.Event
	close   bool
	want    []string
}

func describeSpans(items ...workItem) []string {
	var got []string
	for _, item := range items {
		for _, s := range item.spans {
			if s.series() {
				got = append(got, fmt.Sprintf("%d-%d", s.first, s.count))
			} else {
				got = append(got, strconv.Itoa(int(s.count)))
			}
		}
	}
	return got
}

func TestTrackerOccurrences(t *testing.T) {
	now := t0.Add(time.Minute)
	tests := []struct {
		name     string
		restored map[string]checkpointEntry
		maxAge   time.Duration
		steps    []step
		// counters that must hold afterwards: metric name suffix / reason → value
		dup  map[string]int64
		drop map[string]int64
	}{
		{
			name:  "a new Event is one span",
			steps: []step{{observe: testEvent("a", "10"), want: []string{"1"}}},
		},
		{
			name: "a series is its first occurrence's span and one series span once it is quiet",
			steps: []step{
				{observe: testEvent("a", "10"), want: []string{"1"}},
				{observe: testEvent("a", "11", withSeries(2, t0.Add(time.Second)))},
				{observe: testEvent("a", "14", withSeries(5, t0.Add(3*time.Second)))},
				{close: true, want: []string{"1-5"}},
			},
		},
		{
			name: "a deprecated count is a series too",
			steps: []step{
				{observe: testEvent("a", "10", withDeprecatedCount(1, t0, t0)), want: []string{"1"}},
				{observe: testEvent("a", "12", withDeprecatedCount(3, t0, t0.Add(2*time.Second)))},
				{close: true, want: []string{"1-3"}},
			},
		},
		{
			name: "an Event first seen after it recurred is its first occurrence and its series",
			steps: []step{
				{observe: testEvent("a", "12", withSeries(3, t0.Add(time.Second))), want: []string{"1"}},
				{observe: testEvent("b", "13", withDeprecatedCount(2, t0, t0.Add(time.Second))), want: []string{"1"}},
				{close: true, want: []string{"1-3", "1-2"}},
			},
		},
		{
			name: "an occurrence in a later window closes the series and opens the next segment",
			steps: []step{
				{observe: testEvent("a", "10"), want: []string{"1"}},                                          // 10:00
				{observe: testEvent("a", "11", withSeries(2, t0.Add(20*time.Minute)))},                        // 10:20
				{observe: testEvent("a", "12", withSeries(4, t0.Add(35*time.Minute))), want: []string{"1-2"}}, // 10:35, next window
				{close: true, want: []string{"3-4"}},
			},
		},
		{
			name: "a first occurrence alone in its window is not a series",
			steps: []step{
				{observe: testEvent("a", "10"), want: []string{"1"}},
				{observe: testEvent("a", "11", withSeries(2, t0.Add(40*time.Minute)))},
				{close: true, want: []string{"2-2"}},
			},
		},
		{
			name:   "max_event_age applies to the first occurrence and to the series of an Event first seen in the first list",
			maxAge: 30 * time.Second,
			steps: []step{
				// first occurrence at t0 (too old), the series' last one at now
				{replace: []*eventsv1.Event{testEvent("a", "12", withSeries(3, now)), testEvent("b", "13", withSeries(4, t0.Add(time.Second)))}, initial: true},
				{close: true, want: []string{"1-3"}},
			},
			drop: map[string]int64{reasonTooOld: 1 + 1 + 3},
		},
		{
			name: "an unchanged resourceVersion is not a span",
			steps: []step{
				{observe: testEvent("a", "10"), want: []string{"1"}},
				{observe: testEvent("a", "10")},
			},
			dup: map[string]int64{duplicateSameResourceVersion: 1},
		},
		{
			name: "an update without a new occurrence is not a span",
			steps: []step{
				{observe: testEvent("a", "10", withSeries(2, t0)), want: []string{"1"}},
				{observe: testEvent("a", "11", withSeries(2, t0))},
				{close: true, want: []string{"1-2"}},
			},
			dup: map[string]int64{duplicateNoNewOccurrence: 1},
		},
		{
			name: "a relist of unchanged Events emits nothing and a relist after a gap emits only the gap",
			steps: []step{
				{replace: []*eventsv1.Event{testEvent("a", "10"), testEvent("b", "11")}, initial: true, want: []string{"1", "1"}},
				{replace: []*eventsv1.Event{testEvent("a", "10"), testEvent("b", "11")}},
				{replace: []*eventsv1.Event{testEvent("a", "10"), testEvent("b", "15", withSeries(3, t0.Add(time.Second))), testEvent("c", "16")}, want: []string{"1"}},
				{close: true, want: []string{"1-3"}},
			},
			dup: map[string]int64{duplicateSameResourceVersion: 3},
		},
		{
			name: "an Event deleted between lists is forgotten, its open series closed, and a new Event with its UID would be new",
			steps: []step{
				{replace: []*eventsv1.Event{testEvent("a", "10"), testEvent("b", "11", withSeries(2, t0))}, initial: true, want: []string{"1", "1"}},
				{replace: []*eventsv1.Event{testEvent("a", "10")}, want: []string{"1-2"}},
				{observe: testEvent("b", "11"), want: []string{"1"}},
			},
		},
		{
			name: "a watch delete forgets the Event and closes its open series",
			steps: []step{
				{observe: testEvent("a", "10", withSeries(2, t0)), want: []string{"1"}},
				{forget: testEvent("a", "10"), want: []string{"1-2"}},
				{observe: testEvent("a", "10"), want: []string{"1"}},
				{close: true},
			},
		},
		{
			name: "a checkpointed occurrence is not emitted again after a restart, a later one is, and a series resumes",
			restored: map[string]checkpointEntry{
				"a": {UID: "a", Namespace: "default", RV: "10", Count: 2, Done: 2},
				"b": {UID: "b", Namespace: "default", RV: "20", Count: 1, SegStart: t0.UnixNano()},
			},
			steps: []step{
				{replace: []*eventsv1.Event{
					testEvent("a", "10", withSeries(2, t0)),                  // unchanged since the checkpoint
					testEvent("b", "25", withSeries(3, t0.Add(time.Second))), // two occurrences while down
					testEvent("c", "30"),                                     // created while down
				}, initial: true, want: []string{"1"}},
				{close: true, want: []string{"1-3"}},
			},
			dup: map[string]int64{duplicateCheckpointed: 1},
		},
		{
			name: "a series open at the checkpoint is resumed from the relist",
			restored: map[string]checkpointEntry{
				"a": {UID: "a", Namespace: "default", RV: "12", Count: 3, Last: t0.Add(time.Second).UnixNano(), SegStart: t0.UnixNano()},
			},
			steps: []step{
				{replace: []*eventsv1.Event{testEvent("a", "12", withSeries(3, t0.Add(time.Second)))}, initial: true},
				{close: true, want: []string{"1-3"}},
			},
			dup: map[string]int64{duplicateCheckpointed: 1},
		},
		{
			name: "an old checkpoint entry (five fields) counts every occurrence up to its count as covered",
			restored: map[string]checkpointEntry{
				"a": {UID: "a", Namespace: "default", RV: "12", Count: 3, Done: 3},
			},
			steps: []step{
				{replace: []*eventsv1.Event{testEvent("a", "14", withSeries(5, t0.Add(time.Second)))}, initial: true},
				{close: true, want: []string{"4-5"}},
			},
		},
		{
			name:   "max_event_age drops old Events on the first list without a checkpoint",
			maxAge: 30 * time.Second,
			steps: []step{
				{replace: []*eventsv1.Event{testEvent("old", "10"), testEvent("new", "11", withTime(now.Add(-time.Second)))}, initial: true, want: []string{"1"}},
				// its next occurrence is news: the series from its first occurrence
				{observe: testEvent("old", "12", withSeries(2, now))},
				{close: true, want: []string{"1-2"}},
			},
			drop: map[string]int64{reasonTooOld: 1},
		},
		{
			name:     "max_event_age does not apply when a checkpoint exists",
			restored: map[string]checkpointEntry{},
			maxAge:   30 * time.Second,
			steps:    []step{{replace: []*eventsv1.Event{testEvent("old", "10")}, initial: true, want: []string{"1"}}},
		},
		{
			name:   "max_event_age does not apply to a relist",
			maxAge: 30 * time.Second,
			steps: []step{
				{replace: nil, initial: true},
				{replace: []*eventsv1.Event{testEvent("old", "10")}, want: []string{"1"}},
			},
		},
		{
			name: "malformed Events are counted, not emitted, and not counted twice",
			steps: []step{
				{observe: testEvent("noref", "10", withoutRegarding())},
				{observe: testEvent("notime", "11", withoutTimes())},
				{observe: testEvent("notime", "11", withoutTimes())},
				{observe: testEvent("", "12")},
			},
			dup:  map[string]int64{duplicateSameResourceVersion: 1},
			drop: map[string]int64{reasonMissingRegarding: 1, reasonMissingTime: 1, reasonMissingUID: 1},
		},
		{
			name: "a huge jump in a series is one series span",
			steps: []step{
				{observe: testEvent("a", "10"), want: []string{"1"}},
				{observe: testEvent("a", "11", withSeries(1_000_000, t0.Add(10*time.Minute)))},
				{close: true, want: []string{"1-1000000"}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tm := newTelemetry(t)
			tr := newTracker(tm.set.Logger, tm.tb, func() time.Time { return now }, tt.maxAge, tt.restored)
			for i, s := range tt.steps {
				var items []workItem
				switch {
				case s.observe != nil:
					if item, ok := tr.observe(s.observe, s.initial); ok {
						items = append(items, item)
					}
				case s.forget != nil:
					if item, ok := tr.forget(s.forget); ok {
						items = append(items, item)
					}
				case s.close:
					items = append(items, tr.closeAll(seriesQuiet))
				default:
					items = tr.replace("", s.replace, s.initial)
				}
				if got := describeSpans(items...); !slices.Equal(got, s.want) {
					t.Fatalf("step %d emitted spans %v, want %v", i, got, s.want)
				}
			}
			for reason, want := range tt.dup {
				if got := tm.value(t, "otelcol_k8s_event_spans_duplicates_suppressed", reason); got != want {
					t.Errorf("duplicates{reason=%s} = %d, want %d", reason, got, want)
				}
			}
			for reason, want := range tt.drop {
				if got := tm.value(t, "otelcol_k8s_event_spans_dropped", reason); got != want {
					t.Errorf("dropped{reason=%s} = %d, want %d", reason, got, want)
				}
			}
			if got := tm.value(t, "otelcol_k8s_event_spans_tracked_events", ""); got != int64(tr.len()) {
				t.Errorf("tracked_events = %d, but the tracker holds %d", got, tr.len())
			}
			if got := tm.value(t, "otelcol_k8s_event_spans_pending_series", ""); got != int64(tr.pendingLen()) {
				t.Errorf("pending_series = %d, but the tracker holds %d", got, tr.pendingLen())
			}
		})
	}
}

func TestTrackerOccurrenceIDs(t *testing.T) {
	tm := newTelemetry(t)
	tr := newTracker(tm.set.Logger, tm.tb, time.Now, 0, nil)
	item, _ := tr.observe(testEvent("a", "10"), false)
	if got := occurrenceID(item.spans[0].count); got != "1" || item.spans[0].series() {
		t.Errorf("an Event without a count is its first occurrence, whatever its resourceVersion: got %q", got)
	}
}

func TestTrackerFirstSightingTimes(t *testing.T) {
	tm := newTelemetry(t)
	tr := newTracker(tm.set.Logger, tm.tb, time.Now, 0, nil)
	last := t0.Add(time.Minute)
	item, _ := tr.observe(testEvent("a", "12", withSeries(3, last)), false)
	if len(item.spans) != 1 || !item.spans[0].start.Equal(t0) || !item.spans[0].end.Equal(t0) {
		t.Fatalf("spans %+v, want the first occurrence at eventTime", item.spans)
	}
	series := tr.closeAll(seriesQuiet).spans
	if len(series) != 1 || !series[0].start.Equal(t0) || !series[0].end.Equal(last) || series[0].first != 1 || series[0].count != 3 {
		t.Fatalf("series %+v, want occurrences 1-3 from eventTime to lastObservedTime", series)
	}
}

// A relist in the middle of a series (a 410, a broken watch) joins the gap's occurrences to the
// open segment: the series span is the one a receiver whose watch never broke derives.
func TestTrackerSeriesIDAfterARelist(t *testing.T) {
	seriesID := func(relistAfter int) (pcommon.SpanID, []string) {
		tm := newTelemetry(t)
		tr := newTracker(tm.set.Logger, tm.tb, time.Now, 0, nil)
		var items []workItem
		for n := 1; n <= seriesObservations; n++ {
			if n > relistAfter {
				items = append(items, tr.replace("", []*eventsv1.Event{backOff(seriesObservations)}, false)...)
				break
			}
			item, _ := tr.observe(backOff(n), false)
			items = append(items, item)
		}
		items = append(items, tr.replace("", []*eventsv1.Event{backOff(seriesObservations)}, false)...) // and once more
		items = append(items, tr.closeAll(seriesQuiet))
		var id pcommon.SpanID
		for _, item := range items {
			for _, s := range item.spans {
				if s.series() {
					id = model.EventSeriesSpanID(string(s.ev.UID), s.ev.ResourceVersion, s.first, s.count, s.start, s.end)
				}
			}
		}
		return id, describeSpans(items...)
	}
	want, spans := seriesID(seriesObservations)
	if !slices.Equal(spans, []string{"1", "1-37"}) {
		t.Fatalf("spans %v, want the first occurrence and one series of 37", spans)
	}
	for _, after := range []int{1, 2, 20} {
		if got, spans := seriesID(after); got != want || !slices.Equal(spans, []string{"1", "1-37"}) {
			t.Errorf("relisted after %d observations: spans %v, series ID %s; want [1 1-37] and %s", after, spans, got, want)
		}
	}
}

// Open series are bounded: past series_max_pending the least recently active one is closed
// early (its span goes out now, counted as evicted), so memory holds at most that many.
func TestTrackerBoundsPendingSeries(t *testing.T) {
	tm := newTelemetry(t)
	now := t0
	tr := newTracker(tm.set.Logger, tm.tb, func() time.Time { return now }, 0, nil)
	tr.maxPending = 2
	var got []string
	for i, uid := range []string{"a", "b", "c", "d"} {
		now = now.Add(time.Second)
		item, _ := tr.observe(testEvent(uid, "1"+strconv.Itoa(i), withSeries(2, t0.Add(time.Second))), false)
		got = append(got, describeSpans(item)...)
		if n := tr.pendingLen(); n > 2 {
			t.Fatalf("%d series pending, bound is 2", n)
		}
	}
	// a and b were evicted by c and d; each Event's first occurrence went out at once.
	if want := []string{"1", "1", "1", "1-2", "1", "1-2"}; !slices.Equal(got, want) {
		t.Fatalf("spans %v, want %v", got, want)
	}
	// A new occurrence makes a series the most recently active: c stays, d goes next.
	now = now.Add(time.Second)
	tr.observe(testEvent("c", "30", withSeries(3, t0.Add(2*time.Second))), false)
	item, _ := tr.observe(testEvent("e", "40", withSeries(2, t0.Add(time.Second))), false)
	if s := item.spans; len(s) != 2 || s[1].ev.UID != "d" {
		t.Fatalf("spans %+v, want e's first occurrence and d's series", s)
	}
	// An evicted series that recurs opens a new segment after the occurrences already covered
	// (and evicts c, now the least recently active).
	now = now.Add(time.Second)
	item, _ = tr.observe(testEvent("a", "50", withSeries(4, t0.Add(3*time.Second))), false)
	if got := describeSpans(item); !slices.Equal(got, []string{"1-3"}) {
		t.Fatalf("a's recurrence gave %v, want c's series evicted", got)
	}
	if got := tm.value(t, "otelcol_k8s_event_spans_series_closed", seriesEvicted); got != 4 {
		t.Errorf("series_closed{evicted} = %d, want 4", got)
	}
	if got := tm.value(t, "otelcol_k8s_event_spans_pending_series", ""); got != 2 {
		t.Errorf("pending_series = %d, want 2", got)
	}
	if got := describeSpans(tr.closeAll(seriesShutdown)); !slices.Equal(got, []string{"1-2", "3-4"}) {
		t.Fatalf("closing at shutdown gave %v, want e's series and a's second segment", got)
	}
}

// Where a segment after the first starts: at its first occurrence when a version brings one
// new occurrence; after the previous segment's last observation when a version brings several
// (the events.k8s.io recorder's batched count, versions missed), but never before the window.
func TestTrackerSegmentStarts(t *testing.T) {
	tm := newTelemetry(t)
	tr := newTracker(tm.set.Logger, tm.tb, time.Now, 0, nil)
	at := func(d time.Duration) time.Time { return t0.Add(d) } // t0 is 10:00:00.123
	start := func(ev *eventsv1.Event, closeFirst bool) time.Time {
		t.Helper()
		item, _ := tr.observe(ev, false)
		if closeFirst {
			if len(item.spans) != 1 {
				t.Fatalf("the occurrence in a later window closed %d spans, want 1", len(item.spans))
			}
		}
		spans := tr.closeAll(seriesQuiet).spans
		if len(spans) != 1 {
			t.Fatalf("%d open segments, want 1", len(spans))
		}
		return spans[0].start
	}
	windowStart := time.Date(2026, 11, 21, 10, 30, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		steps []*eventsv1.Event
		last  *eventsv1.Event
		cut   bool
		want  time.Time
	}{
		{"one new occurrence in a later window starts there", []*eventsv1.Event{testEvent("a", "1"), testEvent("a", "2", withSeries(2, at(20*time.Minute)))},
			testEvent("a", "3", withSeries(3, at(35*time.Minute))), true, at(35 * time.Minute)},
		{"several in a later window start at its beginning", []*eventsv1.Event{testEvent("b", "1"), testEvent("b", "2", withSeries(2, at(20*time.Minute)))},
			testEvent("b", "3", withSeries(9, at(40*time.Minute))), true, windowStart},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, ev := range tc.steps {
				tr.observe(ev, false)
			}
			if got := start(tc.last, tc.cut); !got.Equal(tc.want) {
				t.Fatalf("segment starts at %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("after a quiet close, several start after the previous segment's end, one at its time", func(t *testing.T) {
		tr.observe(testEvent("c", "1"), false)
		tr.observe(testEvent("c", "2", withSeries(2, at(time.Minute))), false)
		tr.closeAll(seriesQuiet)
		if got := start(testEvent("c", "3", withSeries(5, at(20*time.Minute))), false); !got.Equal(at(time.Minute)) {
			t.Fatalf("batched segment starts at %v, want the previous one's end %v", got, at(time.Minute))
		}
		if got := start(testEvent("c", "4", withSeries(6, at(25*time.Minute))), false); !got.Equal(at(25 * time.Minute)) {
			t.Fatalf("single-occurrence segment starts at %v, want %v", got, at(25*time.Minute))
		}
	})
}

// The sweeper's view: a series goes out once it has had no new occurrence for series_quiet,
// measured on the receiver's clock from the last new occurrence it saw.
func TestTrackerQuietSeriesAreDue(t *testing.T) {
	tm := newTelemetry(t)
	now := t0
	tr := newTracker(tm.set.Logger, tm.tb, func() time.Time { return now }, 0, nil)
	if _, ok := tr.nextDue(); ok {
		t.Fatal("a due time without an open series")
	}
	tr.observe(testEvent("a", "10", withSeries(2, t0)), false)
	select {
	case <-tr.wake:
	default:
		t.Fatal("the first open series did not wake the sweeper")
	}
	now = now.Add(5 * time.Minute)
	tr.observe(testEvent("a", "11", withSeries(3, t0.Add(5*time.Minute))), false)
	if at, ok := tr.nextDue(); !ok || !at.Equal(now.Add(defaultSeriesQuiet)) {
		t.Fatalf("next due %v, want series_quiet after the last new occurrence", at)
	}
	if _, ok := tr.due(now.Add(defaultSeriesQuiet-time.Nanosecond), maxBatchItems); ok {
		t.Fatal("a series closed before it was quiet for series_quiet")
	}
	item, ok := tr.due(now.Add(defaultSeriesQuiet), maxBatchItems)
	if got := describeSpans(item); !ok || !slices.Equal(got, []string{"1-3"}) || len(item.entries) != 1 || item.entries[0].Done != 3 {
		t.Fatalf("due gave %v %+v, want the series 1-3 and its checkpoint entry", got, item.entries)
	}
	if got := tm.value(t, "otelcol_k8s_event_spans_series_closed", seriesQuiet); got != 1 {
		t.Errorf("series_closed{quiet} = %d, want 1", got)
	}
}

func TestTrackerScopedReplaceLeavesOtherNamespaces(t *testing.T) {
	tm := newTelemetry(t)
	tr := newTracker(tm.set.Logger, tm.tb, time.Now, 0, nil)
	tr.replace("default", []*eventsv1.Event{testEvent("a", "1")}, true)
	tr.replace("kube-system", []*eventsv1.Event{testEvent("b", "2", withNamespace("kube-system"))}, true)
	tr.replace("default", nil, false)
	if item, ok := tr.observe(testEvent("b", "2", withNamespace("kube-system")), false); ok && len(item.spans) > 0 {
		t.Fatal("an empty relist of namespace default made the tracker forget an Event in kube-system")
	}
	if tr.len() != 1 {
		t.Fatalf("tracker holds %d Events, want 1", tr.len())
	}
}
