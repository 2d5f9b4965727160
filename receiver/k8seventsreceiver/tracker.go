package k8seventsreceiver

import (
	"container/list"
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
	eventsv1 "k8s.io/api/events/v1"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/receiver/k8seventsreceiver/internal/metadata"
)

// eventState is what the receiver remembers of one Event: enough to tell a new occurrence from
// a replay and to know which of its occurrences a span already covers, about 120 bytes instead
// of the full object.
type eventState struct {
	namespace string
	rv        string
	count     int32 // the highest occurrence seen
	// done is the last occurrence a series span already covers (0: none). The occurrences
	// done+1..count form the open segment, whose series span is still to come.
	done     int32
	last     int64 // time of occurrence count, Unix nanoseconds
	segStart int64 // start of the open segment, Unix nanoseconds; 0 when none is open
	// restored marks state read from the checkpoint and not yet seen again from the apiserver.
	restored bool
}

// open reports whether the Event has occurrences no span covers yet: a segment of a series,
// whose start is known. Occurrence 1 alone is covered by its own span.
func (st *eventState) open() bool { return st.count > st.done && st.count >= 2 && st.segStart != 0 }

func (st *eventState) entry(uid string) checkpointEntry {
	return checkpointEntry{UID: uid, Namespace: st.namespace, RV: st.rv, Count: st.count, Last: st.last, Done: st.done, SegStart: st.segStart}
}

// pendingSeries is an open segment whose series span waits for the series to go quiet: the
// Event version of its last occurrence (what the span will say) and when it arrived.
type pendingSeries struct {
	uid     string
	ev      *eventsv1.Event
	arrived time.Time
}

// spanSpec is one span to emit: an Event's first occurrence, or a series of its occurrences
// (first..count) from start to end.
type spanSpec struct {
	ev    *eventsv1.Event
	first int32 // the first occurrence a series span covers; 0 for the occurrence span
	count int32 // the occurrence's number, or the last occurrence a series span covers
	start time.Time
	end   time.Time
}

func (s spanSpec) series() bool { return s.first > 0 }

// workItem is the outcome of one Event version (or of a series closing), carried in arrival
// order to the pipeline: the spans to emit (none for a replay or a drop) and the checkpoint
// entries to write once they are accepted.
type workItem struct {
	spans   []spanSpec
	entries []checkpointEntry
}

func (w *workItem) empty() bool { return len(w.spans) == 0 && len(w.entries) == 0 }

// Defaults of the series settings (Config.SeriesQuiet, Config.SeriesMaxPending).
const (
	// defaultSeriesQuiet is three times the 5 minutes at which client-go's core/v1 recorder
	// (tools/record, the kubelet's and most controllers') lets a repeating Event through once
	// its spam burst of 25 is spent, so a live core/v1 series is not cut for being quiet. Its
	// events.k8s.io recorder (tools/events, the scheduler's) sends count 2 at once, then the
	// count only every 30 minutes while the series lives and 6 to 12 minutes after it ended:
	// 15 minutes still catches that final count for a series that ended within 3 minutes of
	// its second occurrence (9 at best); a longer one is two adjacent spans (nextSegmentStart).
	defaultSeriesQuiet = 15 * time.Minute
	// defaultSeriesMaxPending bounds the open series held in memory: each holds its latest
	// stripped Event, about 1 KiB (BenchmarkPendingSeriesMemory), so about 10 MiB.
	defaultSeriesMaxPending = 10_000
)

// tracker decides which Event versions carry new occurrences and holds the open series. It is
// the receiver's only memory of Events: the reflector hands it each version and keeps nothing.
type tracker struct {
	logger *zap.Logger
	// debug spares the hot path the string building of per-Event debug logs when they are off.
	debug bool
	tel   *metadata.TelemetryBuilder
	now   func() time.Time
	// maxAge applies to Events first seen in an initial list when there was no checkpoint.
	maxAge  time.Duration
	dropOld bool
	// Series: a segment ends when an occurrence falls in a later window than its start, or
	// when no new occurrence arrived for quiet; at most maxPending segments wait.
	window     time.Duration
	quiet      time.Duration
	maxPending int

	mu         sync.Mutex
	states     map[string]eventState
	namespaces map[string]string // interned, so 100k Events in ten namespaces share ten strings
	pending    map[string]*list.Element
	order      *list.List // of *pendingSeries, least recently active first
	// wake tells the sweeper that a series became pending while none was.
	wake chan struct{}
}

func newTracker(logger *zap.Logger, tel *metadata.TelemetryBuilder, now func() time.Time, maxAge time.Duration, restored map[string]checkpointEntry) *tracker {
	t := &tracker{
		logger:     logger,
		debug:      logger.Core().Enabled(zap.DebugLevel),
		tel:        tel,
		now:        now,
		maxAge:     maxAge,
		dropOld:    restored == nil && maxAge > 0,
		window:     model.DefaultWindow,
		quiet:      defaultSeriesQuiet,
		maxPending: defaultSeriesMaxPending,
		states:     make(map[string]eventState, len(restored)),
		namespaces: make(map[string]string),
		pending:    make(map[string]*list.Element),
		order:      list.New(),
		wake:       make(chan struct{}, 1),
	}
	for uid, e := range restored {
		t.states[uid] = eventState{namespace: t.intern(e.Namespace), rv: e.RV, count: e.Count, last: e.Last, done: e.Done, segStart: e.SegStart, restored: true}
	}
	t.tel.K8sEventSpansTrackedEvents.Add(context.Background(), int64(len(t.states)))
	return t
}

func (t *tracker) intern(ns string) string {
	if s, ok := t.namespaces[ns]; ok {
		return s
	}
	t.namespaces[ns] = ns
	return ns
}

// observe decides what one Event version means. initial is true for the items of a reflector's
// first list, the only place max_event_age applies. It reports false when nothing needs to
// reach the pipeline.
func (t *tracker) observe(ev *eventsv1.Event, initial bool) (workItem, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.observeLocked(ev, initial)
}

func (t *tracker) observeLocked(ev *eventsv1.Event, initial bool) (workItem, bool) {
	ctx := context.Background()
	t.tel.K8sEventSpansEventsReceived.Add(ctx, 1)
	uid := string(ev.UID)
	if uid == "" {
		// Without a UID there is no stable span ID and no way to recognise the Event again.
		t.drop(ev, reasonMissingUID, 1)
		return workItem{}, false
	}
	count := occurrenceCount(ev)
	at := occurrenceTime(ev)
	prev, known := t.states[uid]

	var item workItem
	if known && (prev.rv == ev.ResourceVersion || count <= prev.count) {
		// The same version again (a relist, a replayed watch), or a newer one without a new
		// occurrence (a relabel, or a version older than one already seen arriving late):
		// remember the version, emit nothing.
		reason := duplicateSameResourceVersion
		if prev.rv != ev.ResourceVersion {
			reason = duplicateNoNewOccurrence
		}
		prev.rv = ev.ResourceVersion
		if prev.restored {
			reason = duplicateCheckpointed
			prev.restored = false
			if count == prev.count && prev.open() {
				// The checkpoint says a segment was open: the series span is still to come,
				// and this is the version it describes.
				t.hold(uid, ev, &item)
			}
		}
		t.states[uid] = prev
		t.duplicate(ev, prev, reason)
		return item, !item.empty()
	}
	if !known {
		t.tel.K8sEventSpansTrackedEvents.Add(ctx, 1)
	}

	st := eventState{namespace: t.intern(ev.Namespace), rv: ev.ResourceVersion, count: count, last: at.UnixNano()}
	first := int32(1)
	if known {
		st.done, st.segStart = prev.done, prev.segStart
		first = prev.count + 1
	}
	if !hasRegarding(ev) || at.IsZero() {
		reason := reasonMissingRegarding
		if hasRegarding(ev) {
			reason = reasonMissingTime
			st.last = 0
		}
		t.drop(ev, reason, int64(count)-int64(first)+1)
		t.discard(uid)
		st.done, st.segStart = count, 0
		t.states[uid] = st
		item.entries = append(item.entries, st.entry(uid))
		return item, true
	}

	// The first occurrence is a span at once, at the Event's first-occurrence time, with the ID
	// any replica derives for it, also when it is first seen with a count (it recurred while
	// the receiver was down or before it started).
	tooOld := !known && initial && t.dropOld
	var old int64
	if first == 1 {
		firstAt := firstOccurrenceTime(ev, at)
		if tooOld && t.now().Sub(firstAt) > t.maxAge {
			old++
		} else {
			item.spans = append(item.spans, spanSpec{ev: ev, count: 1, start: firstAt, end: firstAt})
		}
	}

	// The later occurrences join the open segment of the series. A segment stays within the
	// window of its start: an occurrence in a later window closes it (its span goes out now)
	// and opens the next.
	switch {
	case !known:
		st.segStart = firstOccurrenceTime(ev, at).UnixNano()
	case prev.segStart == 0:
		st.segStart = t.nextSegmentStart(&prev, count, at)
	case t.laterWindow(at, prev.segStart):
		if spec, ok := t.closeSeries(uid, &prev, seriesWindow); ok {
			item.spans = append(item.spans, spec)
		}
		st.done, st.segStart = prev.count, t.nextSegmentStart(&prev, count, at)
	}
	if st.open() {
		if tooOld && t.now().Sub(at) > t.maxAge {
			// Even the series' last occurrence is older than max_event_age: history.
			old += int64(count) - 1
			st.done, st.segStart = count, 0
		} else {
			t.hold(uid, ev, &item)
		}
	}
	if old > 0 {
		t.drop(ev, reasonTooOld, old)
	}
	t.states[uid] = st
	item.entries = append(item.entries, st.entry(uid))
	if t.debug {
		t.logger.Debug("Event occurrence", zap.String("event", ev.Namespace+"/"+ev.Name), zap.String("uid", uid),
			zap.String("reason", ev.Reason), zap.Int32("count", count), zap.Int("spans", len(item.spans)),
			zap.Bool("series_pending", st.open()))
	}
	return item, true
}

// nextSegmentStart is where a segment opened by a version with count, at at, starts, after
// prev's occurrences are covered. A version with one new occurrence brings its time. A version
// with several does not: the events.k8s.io recorder batches a live series' repeats for 30
// minutes, and this receiver may have missed versions. Those occurrences happened after prev's
// last, so the segment starts there, but not before at's window: a span stays in its window.
func (t *tracker) nextSegmentStart(prev *eventState, count int32, at time.Time) int64 {
	if count == prev.count+1 || prev.last == 0 {
		return at.UnixNano()
	}
	return min(max(prev.last, model.WindowStart(at, t.window).UnixNano()), at.UnixNano())
}

// laterWindow reports whether at lies in a later window than the time segStart (Unix ns).
func (t *tracker) laterWindow(at time.Time, segStart int64) bool {
	return model.WindowStart(at, t.window).After(model.WindowStart(time.Unix(0, segStart), t.window))
}

// hold makes ev the version of uid's open segment, waiting for the series to go quiet. A new
// segment beyond maxPending closes the least recently active one first, into item.
func (t *tracker) hold(uid string, ev *eventsv1.Event, item *workItem) {
	if el, ok := t.pending[uid]; ok {
		p := el.Value.(*pendingSeries)
		p.ev, p.arrived = ev, t.now()
		t.order.MoveToBack(el)
		return
	}
	for t.order.Len() >= max(t.maxPending, 1) {
		t.closeFront(seriesEvicted, item)
	}
	t.pending[uid] = t.order.PushBack(&pendingSeries{uid: uid, ev: ev, arrived: t.now()})
	t.tel.K8sEventSpansPendingSeries.Add(context.Background(), 1)
	if t.order.Len() == 1 {
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
}

// closeFront closes the least recently active open segment into item.
func (t *tracker) closeFront(reason string, item *workItem) {
	p := t.order.Front().Value.(*pendingSeries)
	st := t.states[p.uid]
	if spec, ok := t.closeSeries(p.uid, &st, reason); ok {
		item.spans = append(item.spans, spec)
	}
	t.states[p.uid] = st
	item.entries = append(item.entries, st.entry(p.uid))
}

// closeSeries ends uid's open segment: it returns the segment's series span and marks its
// occurrences covered in st. It reports false when no segment is pending.
func (t *tracker) closeSeries(uid string, st *eventState, reason string) (spanSpec, bool) {
	el, ok := t.pending[uid]
	if !ok {
		return spanSpec{}, false
	}
	p := el.Value.(*pendingSeries)
	t.order.Remove(el)
	delete(t.pending, uid)
	t.tel.K8sEventSpansPendingSeries.Add(context.Background(), -1)
	spec := spanSpec{ev: p.ev, first: st.done + 1, count: st.count, start: time.Unix(0, st.segStart).UTC(), end: time.Unix(0, st.last).UTC()}
	if spec.end.Before(spec.start) {
		spec.end = spec.start
	}
	st.done, st.segStart = st.count, 0
	t.tel.K8sEventSpansSeriesClosed.Add(context.Background(), 1, withReason(reason))
	if t.debug {
		t.logger.Debug("Event series closed", zap.String("event", p.ev.Namespace+"/"+p.ev.Name), zap.String("uid", uid),
			zap.Int32("first", spec.first), zap.Int32("last", spec.count), zap.String("reason", reason))
	}
	return spec, true
}

// discard forgets uid's open segment without a span.
func (t *tracker) discard(uid string) {
	if el, ok := t.pending[uid]; ok {
		t.order.Remove(el)
		delete(t.pending, uid)
		t.tel.K8sEventSpansPendingSeries.Add(context.Background(), -1)
	}
}

// nextDue is when the least recently active open segment goes quiet; false when none is open.
func (t *tracker) nextDue() (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if el := t.order.Front(); el != nil {
		return el.Value.(*pendingSeries).arrived.Add(t.quiet), true
	}
	return time.Time{}, false
}

// due closes, up to limit, the open segments without a new occurrence for quiet.
func (t *tracker) due(now time.Time, limit int) (workItem, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var item workItem
	for el := t.order.Front(); el != nil && len(item.spans) < limit; el = t.order.Front() {
		if now.Sub(el.Value.(*pendingSeries).arrived) < t.quiet {
			break
		}
		t.closeFront(seriesQuiet, &item)
	}
	return item, !item.empty()
}

// closeAll closes every open segment, at shutdown.
func (t *tracker) closeAll(reason string) workItem {
	t.mu.Lock()
	defer t.mu.Unlock()
	var item workItem
	for t.order.Len() > 0 {
		t.closeFront(reason, &item)
	}
	return item
}

func (t *tracker) pendingLen() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.order.Len()
}

// replace applies a full list of the Events in scope ("" = all namespaces): each item is
// observed, and Events in scope that the list no longer has were deleted meanwhile; their open
// series are closed.
func (t *tracker) replace(scope string, evs []*eventsv1.Event, initial bool) []workItem {
	t.mu.Lock()
	defer t.mu.Unlock()
	listed := make(map[string]struct{}, len(evs))
	var items []workItem
	for _, ev := range evs {
		listed[string(ev.UID)] = struct{}{}
		if item, ok := t.observeLocked(ev, initial); ok {
			items = append(items, item)
		}
	}
	var gone int64
	var deleted workItem
	for uid, st := range t.states {
		if scope != "" && st.namespace != scope {
			continue
		}
		if _, ok := listed[uid]; !ok {
			if spec, ok := t.closeSeries(uid, &st, seriesDeleted); ok {
				deleted.spans = append(deleted.spans, spec)
			}
			delete(t.states, uid)
			gone++
		}
	}
	if !deleted.empty() {
		items = append(items, deleted)
	}
	t.tel.K8sEventSpansTrackedEvents.Add(context.Background(), -gone)
	return items
}

// forget drops a deleted Event's state, closing its open series. Its checkpoint entry expires
// with checkpoint_ttl.
func (t *tracker) forget(ev *eventsv1.Event) (workItem, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	uid := string(ev.UID)
	st, ok := t.states[uid]
	if !ok {
		return workItem{}, false
	}
	var item workItem
	if spec, ok := t.closeSeries(uid, &st, seriesDeleted); ok {
		item.spans = append(item.spans, spec)
	}
	delete(t.states, uid)
	t.tel.K8sEventSpansTrackedEvents.Add(context.Background(), -1)
	return item, !item.empty()
}

func (t *tracker) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.states)
}

func (t *tracker) duplicate(ev *eventsv1.Event, st eventState, reason string) {
	t.tel.K8sEventSpansDuplicatesSuppressed.Add(context.Background(), 1, withReason(reason))
	if !t.debug {
		return
	}
	t.logger.Debug("Event version carries no new occurrence", zap.String("event", ev.Namespace+"/"+ev.Name),
		zap.String("resource_version", ev.ResourceVersion), zap.Int32("emitted_count", st.count), zap.String("reason", reason))
}

func (t *tracker) drop(ev *eventsv1.Event, reason string, n int64) {
	t.tel.K8sEventSpansDropped.Add(context.Background(), n, withReason(reason))
	if !t.debug {
		return
	}
	t.logger.Debug("Event occurrence dropped", zap.String("event", ev.Namespace+"/"+ev.Name),
		zap.String("uid", string(ev.UID)), zap.String("reason", reason))
}
