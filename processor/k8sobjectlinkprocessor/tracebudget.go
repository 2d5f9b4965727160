package k8sobjectlinkprocessor

import (
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/kubetrail/kubetrail/internal/model"
)

// A trace holds at most max_spans_per_trace spans (docs/design.md, Big objects). Each replica
// counts the spans it puts in each trace and adds them to a shared counter in the ID map with the
// next batch's first round trip (OpIncr: no extra round trip); the totals that come back decide
// where later spans go. A trace at its bound continues in model.ContinuationTraceID of it (and
// that one in its own, and so on): an object whose spans overflow gets a continuation span there,
// linked to its span in the trace before, and its later activity and new owned objects go under
// it. The decision uses totals one batch old, so a trace can pass its bound by what one batch per
// replica puts in it.

// maxContinuations bounds the chain of continuation traces one window's trace can have: 64 ×
// max_spans_per_trace spans, past which spans stay in the last one.
const maxContinuations = 64

// maxTrackedTraces bounds the traces whose totals and pending counts a replica keeps: about
// 60 bytes each, 6 MB in all. Past it, totals of traces of past windows are let go first.
const maxTrackedTraces = 100_000

type traceCount struct {
	total int64 // the last total the ID map answered, plus what this replica added since
	seen  int64 // when it was last updated (Unix nanoseconds)
}

// traceBudget is the replica's view of the span counts of the traces it writes to.
type traceBudget struct {
	limit  int64
	window time.Duration
	onSize func(delta int64) // the number of traces tracked changed

	mu      sync.Mutex
	known   map[pcommon.TraceID]traceCount
	pending map[pcommon.TraceID]int64
}

func newTraceBudget(limit int, window time.Duration, onSize func(int64)) *traceBudget {
	return &traceBudget{
		limit: int64(limit), window: window, onSize: onSize,
		known: map[pcommon.TraceID]traceCount{}, pending: map[pcommon.TraceID]int64{},
	}
}

// dest is where a span of trace t goes: t, or the first of its continuations not at its bound.
func (b *traceBudget) dest(t pcommon.TraceID) pcommon.TraceID {
	if b == nil || b.limit <= 0 {
		return t
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := 0; i < maxContinuations && b.known[t].total >= b.limit; i++ {
		t = model.ContinuationTraceID(t)
	}
	return t
}

// add counts n spans put in trace t, to be sent with the next batch.
func (b *traceBudget) add(t pcommon.TraceID, n int64, now time.Time) {
	if b == nil || b.limit <= 0 || n <= 0 || t.IsEmpty() {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.pending[t]; !ok && len(b.pending) >= maxTrackedTraces {
		return // a burst over more traces than the bound: these counts are not shared
	}
	b.pending[t] += n
	// Counted at once here too: the next batch of this replica already sees them.
	c, ok := b.known[t]
	c.total += n
	c.seen = now.UnixNano()
	b.remember(t, c, ok, now)
}

// take returns the pending counts and forgets them.
func (b *traceBudget) take() map[pcommon.TraceID]int64 {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.pending) == 0 {
		return nil
	}
	p := b.pending
	b.pending = make(map[pcommon.TraceID]int64, len(p))
	return p
}

// learn takes the total the ID map answered for t.
func (b *traceBudget) learn(t pcommon.TraceID, value string, now time.Time) {
	total, err := strconv.ParseInt(value, 10, 64)
	if err != nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	c, ok := b.known[t]
	c.total, c.seen = max(c.total, total), now.UnixNano()
	b.remember(t, c, ok, now)
}

// remember stores c, letting go of traces of past windows, or any, to stay within
// maxTrackedTraces. Callers hold mu.
func (b *traceBudget) remember(t pcommon.TraceID, c traceCount, existed bool, now time.Time) {
	if !existed && len(b.known) >= maxTrackedTraces {
		old := now.Add(-2 * b.window).UnixNano()
		removed := 0
		for id, x := range b.known {
			if x.seen < old || removed < maxTrackedTraces/64 {
				delete(b.known, id)
				removed++
			}
		}
		b.size(-int64(removed))
	}
	b.known[t] = c
	if !existed {
		b.size(1)
	}
}

func (b *traceBudget) size(d int64) {
	if b.onSize != nil && d != 0 {
		b.onSize(d)
	}
}
