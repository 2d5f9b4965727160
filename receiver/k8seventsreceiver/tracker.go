package k8seventsreceiver

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
	eventsv1 "k8s.io/api/events/v1"

	"github.com/kubetrail/kubetrail/receiver/k8seventsreceiver/internal/metadata"
)

// maxSpansPerUpdate bounds the spans one Event version can produce. A crash-looping Pod's
// BackOff Event can jump by thousands of occurrences across a long disconnection; all of them
// would carry the same timestamp anyway, so past this many the older ones are counted and
// dropped instead of flooding the trace.
const maxSpansPerUpdate = 100

// eventState is what the receiver remembers of one Event: enough to tell a new occurrence from
// a replay, about 100 bytes instead of the full object.
type eventState struct {
	namespace string
	rv        string
	count     int32
	last      int64 // occurrence time, Unix nanoseconds
	// restored marks state read from the checkpoint and not yet seen again from the apiserver.
	restored bool
}

// workItem is the outcome of one Event version, carried in arrival order to the pipeline:
// the spans to emit (none for a replay or a drop) and the checkpoint entry to write once they
// are accepted.
type workItem struct {
	ev    *eventsv1.Event
	spans []occurrenceSpan
	entry *checkpointEntry
}

// tracker decides which Event versions carry new occurrences. It is the receiver's only memory
// of Events: the reflector hands it each version and keeps nothing itself.
type tracker struct {
	logger *zap.Logger
	// debug spares the hot path the string building of per-Event debug logs when they are off.
	debug bool
	tel   *metadata.TelemetryBuilder
	now   func() time.Time
	// maxAge applies to Events first seen in an initial list when there was no checkpoint.
	maxAge  time.Duration
	dropOld bool

	mu         sync.Mutex
	states     map[string]eventState
	namespaces map[string]string // interned, so 100k Events in ten namespaces share ten strings
}

func newTracker(logger *zap.Logger, tel *metadata.TelemetryBuilder, now func() time.Time, maxAge time.Duration, restored map[string]checkpointEntry) *tracker {
	t := &tracker{
		logger:     logger,
		debug:      logger.Core().Enabled(zap.DebugLevel),
		tel:        tel,
		now:        now,
		maxAge:     maxAge,
		dropOld:    restored == nil && maxAge > 0,
		states:     make(map[string]eventState, len(restored)),
		namespaces: make(map[string]string),
	}
	for uid, e := range restored {
		t.states[uid] = eventState{namespace: t.intern(e.Namespace), rv: e.RV, count: e.Count, last: e.Last, restored: true}
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

	if known {
		if prev.rv == ev.ResourceVersion {
			reason := duplicateSameResourceVersion
			if prev.restored {
				reason = duplicateCheckpointed
				prev.restored = false
				t.states[uid] = prev
			}
			t.duplicate(ev, prev, reason)
			return workItem{}, false
		}
		if count <= prev.count {
			// A newer version without a new occurrence (a relabel, or a version older than one
			// already seen arriving late): remember the version, emit nothing.
			prev.rv = ev.ResourceVersion
			reason := duplicateNoNewOccurrence
			if prev.restored {
				reason = duplicateCheckpointed
				prev.restored = false
			}
			t.states[uid] = prev
			t.duplicate(ev, prev, reason)
			return workItem{}, false
		}
	} else {
		t.tel.K8sEventSpansTrackedEvents.Add(ctx, 1)
	}

	state := eventState{namespace: t.intern(ev.Namespace), rv: ev.ResourceVersion, count: count, last: at.UnixNano()}
	if at.IsZero() {
		state.last = 0
	}
	t.states[uid] = state
	item := workItem{ev: ev, entry: &checkpointEntry{UID: uid, Namespace: state.namespace, RV: state.rv, Count: count, Last: state.last}}

	// A known Event's new occurrences are those past the last one emitted. An Event seen for the
	// first time with a count of N happened N times, maybe while the receiver was down: all N are
	// spans, the first at the Event's first-occurrence time, the later ones at the last (the API
	// keeps no other), each with the ID any replica derives for it.
	first := int32(1)
	if known {
		first = prev.count + 1
	}
	switch {
	case !hasRegarding(ev):
		t.drop(ev, reasonMissingRegarding, int64(count)-int64(first)+1)
		return item, true
	case at.IsZero():
		t.drop(ev, reasonMissingTime, int64(count)-int64(first)+1)
		return item, true
	}
	// int64, so that a count of MaxInt32 cannot overflow the arithmetic or the loop.
	n := int64(count) - int64(first) + 1
	if n > maxSpansPerUpdate {
		t.drop(ev, reasonCoalesced, n-maxSpansPerUpdate)
		n = maxSpansPerUpdate
	}
	tooOld := !known && initial && t.dropOld
	item.spans = make([]occurrenceSpan, 0, n)
	var old int64
	for c := int64(count) - n + 1; c <= int64(count); c++ {
		occAt := at
		if c == 1 {
			occAt = firstOccurrenceTime(ev, at)
		}
		if tooOld && t.now().Sub(occAt) > t.maxAge {
			old++
			continue
		}
		item.spans = append(item.spans, occurrenceSpan{count: int32(c), id: occurrenceID(int32(c)), at: occAt})
	}
	if old > 0 {
		t.drop(ev, reasonTooOld, old)
	}
	if t.debug {
		t.logger.Debug("Event occurrence", zap.String("event", ev.Namespace+"/"+ev.Name), zap.String("uid", uid),
			zap.String("reason", ev.Reason), zap.Int32("count", count), zap.Int("spans", len(item.spans)))
	}
	return item, true
}

// replace applies a full list of the Events in scope ("" = all namespaces): each item is
// observed, and Events in scope that the list no longer has were deleted meanwhile.
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
	for uid, st := range t.states {
		if scope != "" && st.namespace != scope {
			continue
		}
		if _, ok := listed[uid]; !ok {
			delete(t.states, uid)
			gone++
		}
	}
	t.tel.K8sEventSpansTrackedEvents.Add(context.Background(), -gone)
	return items
}

// forget drops a deleted Event's state. Its checkpoint entry expires with checkpoint_ttl.
func (t *tracker) forget(ev *eventsv1.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.states[string(ev.UID)]; ok {
		delete(t.states, string(ev.UID))
		t.tel.K8sEventSpansTrackedEvents.Add(context.Background(), -1)
	}
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
