package k8seventsreceiver

import (
	"slices"
	"strconv"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
)

// step is one thing the reflector hands the tracker, and the occurrence counts it must emit.
type step struct {
	observe *eventsv1.Event
	replace []*eventsv1.Event
	initial bool
	forget  *eventsv1.Event
	want    []int32
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
			steps: []step{{observe: testEvent("a", "10"), want: []int32{1}}},
		},
		{
			name: "a series increment is one more span per new occurrence",
			steps: []step{
				{observe: testEvent("a", "10"), want: []int32{1}},
				{observe: testEvent("a", "11", withSeries(2, t0.Add(time.Second))), want: []int32{2}},
				{observe: testEvent("a", "14", withSeries(5, t0.Add(3*time.Second))), want: []int32{3, 4, 5}},
			},
		},
		{
			name: "a deprecated count increment is one more span per new occurrence",
			steps: []step{
				{observe: testEvent("a", "10", withDeprecatedCount(1, t0, t0)), want: []int32{1}},
				{observe: testEvent("a", "12", withDeprecatedCount(3, t0, t0.Add(2*time.Second))), want: []int32{2, 3}},
			},
		},
		{
			name: "an Event first seen after it recurred is one span per occurrence",
			steps: []step{
				{observe: testEvent("a", "12", withSeries(3, t0.Add(time.Second))), want: []int32{1, 2, 3}},
				{observe: testEvent("b", "13", withDeprecatedCount(2, t0, t0.Add(time.Second))), want: []int32{1, 2}},
			},
		},
		{
			name:   "max_event_age applies to each occurrence of an Event first seen in the first list",
			maxAge: 30 * time.Second,
			steps: []step{
				// first occurrence at t0 (too old), the later ones at now
				{replace: []*eventsv1.Event{testEvent("a", "12", withSeries(3, now))}, initial: true, want: []int32{2, 3}},
			},
			drop: map[string]int64{reasonTooOld: 1},
		},
		{
			name: "an unchanged resourceVersion is not a span",
			steps: []step{
				{observe: testEvent("a", "10"), want: []int32{1}},
				{observe: testEvent("a", "10")},
			},
			dup: map[string]int64{duplicateSameResourceVersion: 1},
		},
		{
			name: "an update without a new occurrence is not a span",
			steps: []step{
				{observe: testEvent("a", "10", withSeries(2, t0)), want: []int32{1, 2}},
				{observe: testEvent("a", "11", withSeries(2, t0))},
			},
			dup: map[string]int64{duplicateNoNewOccurrence: 1},
		},
		{
			name: "a relist of unchanged Events emits nothing and a relist after a gap emits only the gap",
			steps: []step{
				{replace: []*eventsv1.Event{testEvent("a", "10"), testEvent("b", "11")}, initial: true, want: []int32{1, 1}},
				{replace: []*eventsv1.Event{testEvent("a", "10"), testEvent("b", "11")}},
				{replace: []*eventsv1.Event{testEvent("a", "10"), testEvent("b", "15", withSeries(3, t0.Add(time.Second))), testEvent("c", "16")}, want: []int32{2, 3, 1}},
			},
			dup: map[string]int64{duplicateSameResourceVersion: 3},
		},
		{
			name: "an Event deleted between lists is forgotten and a new Event with its UID would be new",
			steps: []step{
				{replace: []*eventsv1.Event{testEvent("a", "10"), testEvent("b", "11")}, initial: true, want: []int32{1, 1}},
				{replace: []*eventsv1.Event{testEvent("b", "11")}},
				{observe: testEvent("a", "10"), want: []int32{1}},
			},
		},
		{
			name: "a watch delete forgets the Event",
			steps: []step{
				{observe: testEvent("a", "10"), want: []int32{1}},
				{forget: testEvent("a", "10")},
				{observe: testEvent("a", "10"), want: []int32{1}},
			},
		},
		{
			name:     "a checkpointed occurrence is not emitted again after a restart, a later one is",
			restored: map[string]checkpointEntry{"a": {UID: "a", Namespace: "default", RV: "10", Count: 2}, "b": {UID: "b", Namespace: "default", RV: "20", Count: 1}},
			steps: []step{
				{replace: []*eventsv1.Event{
					testEvent("a", "10", withSeries(2, t0)),                  // unchanged since the checkpoint
					testEvent("b", "25", withSeries(3, t0.Add(time.Second))), // two occurrences while down
					testEvent("c", "30"),                                     // created while down
				}, initial: true, want: []int32{2, 3, 1}},
			},
			dup: map[string]int64{duplicateCheckpointed: 1},
		},
		{
			name:   "max_event_age drops old Events on the first list without a checkpoint",
			maxAge: 30 * time.Second,
			steps: []step{
				{replace: []*eventsv1.Event{testEvent("old", "10"), testEvent("new", "11", withTime(now.Add(-time.Second)))}, initial: true, want: []int32{1}},
				// its next occurrence is news
				{observe: testEvent("old", "12", withSeries(2, now)), want: []int32{2}},
			},
			drop: map[string]int64{reasonTooOld: 1},
		},
		{
			name:     "max_event_age does not apply when a checkpoint exists",
			restored: map[string]checkpointEntry{},
			maxAge:   30 * time.Second,
			steps:    []step{{replace: []*eventsv1.Event{testEvent("old", "10")}, initial: true, want: []int32{1}}},
		},
		{
			name:   "max_event_age does not apply to a relist",
			maxAge: 30 * time.Second,
			steps: []step{
				{replace: nil, initial: true},
				{replace: []*eventsv1.Event{testEvent("old", "10")}, want: []int32{1}},
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
			name: "a huge jump in a series is capped",
			steps: []step{
				{observe: testEvent("a", "10"), want: []int32{1}},
				{observe: testEvent("a", "11", withSeries(1+maxSpansPerUpdate+7, t0.Add(time.Hour))), want: seq(9, 1+maxSpansPerUpdate+7)},
			},
			drop: map[string]int64{reasonCoalesced: 7},
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
					tr.forget(s.forget)
				default:
					items = tr.replace("", s.replace, s.initial)
				}
				var got []int32
				for _, item := range items {
					for _, occ := range item.spans {
						got = append(got, occ.count)
					}
				}
				if !slices.Equal(got, s.want) {
					t.Fatalf("step %d emitted occurrences %v, want %v", i, got, s.want)
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
		})
	}
}

func TestTrackerOccurrenceIDs(t *testing.T) {
	tm := newTelemetry(t)
	tr := newTracker(tm.set.Logger, tm.tb, time.Now, 0, nil)
	item, _ := tr.observe(testEvent("a", "10"), false)
	if got := item.spans[0].id; got != "1" {
		t.Errorf("an Event without a count is its first occurrence, whatever its resourceVersion: got %q", got)
	}
	item, _ = tr.observe(testEvent("a", "11", withSeries(2, t0.Add(time.Second))), false)
	if got := item.spans[0].id; got != "2" {
		t.Errorf("a series occurrence is identified by its count: got %q", got)
	}
	if got := item.spans[0].at; !got.Equal(t0.Add(time.Second)) {
		t.Errorf("a series occurrence happens at lastObservedTime %v, got %v", t0.Add(time.Second), got)
	}
}

func TestTrackerFirstSightingTimes(t *testing.T) {
	tm := newTelemetry(t)
	tr := newTracker(tm.set.Logger, tm.tb, time.Now, 0, nil)
	last := t0.Add(time.Minute)
	item, _ := tr.observe(testEvent("a", "12", withSeries(3, last)), false)
	want := []time.Time{t0, last, last}
	if len(item.spans) != 3 {
		t.Fatalf("%d spans, want 3", len(item.spans))
	}
	for i, occ := range item.spans {
		if !occ.at.Equal(want[i]) || occ.id != strconv.Itoa(i+1) {
			t.Errorf("occurrence %d at %v with ID %q; want %v and %q (the first at eventTime, later ones at lastObservedTime)", i+1, occ.at, occ.id, want[i], strconv.Itoa(i+1))
		}
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

func seq(from, to int32) []int32 {
	var s []int32
	for c := from; c <= to; c++ {
		s = append(s, c)
	}
	return s
}
