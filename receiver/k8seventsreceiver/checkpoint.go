package k8seventsreceiver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/extension/xextension/storage"
)

// The checkpoint remembers, per Event, the last occurrence whose span the next consumer
// accepted: UID, resourceVersion, occurrence count and occurrence time in nanoseconds, and the
// state of its series: the last occurrence a series span covers and the start of the open
// segment, so that a restart resumes an open series with the span ID an uninterrupted
// receiver derives. A 1-second
// high-water mark (what Kelemetry keeps) cannot tell two occurrences in the same second apart,
// and no single timestamp can say how many of a series' occurrences were already emitted.
//
// Entries are written to append-only buckets: each flush rewrites only the open bucket, and a
// bucket is deleted once its newest entry is older than checkpoint_ttl, by which time the
// apiserver has deleted those Events too (--event-ttl). An Event updated again is written to
// the open bucket; on load the newest entry per UID wins. This keeps both the write per batch
// and the total size proportional to recent activity, and needs nothing beyond Get/Set/Delete
// from the storage extension.
const (
	checkpointStateKey = "state"
	bucketPrefix       = "bucket/"
	// bucketSpan is how long a bucket stays open: short enough that rewriting it per flush is
	// cheap, long enough that a day of checkpoint_ttl is a few thousand keys at most.
	bucketSpan = time.Minute
	// checkpointInterval bounds the storage writes to one per second, and so the occurrences a
	// crash can make the next start emit again to about a second's worth.
	checkpointInterval = time.Second
)

// checkpointEntry is one Event's progress.
type checkpointEntry struct {
	UID       string
	Namespace string
	RV        string
	Count     int32
	Last      int64 // Unix nanoseconds
	Done      int32 // the last occurrence a series span covers
	SegStart  int64 // start of the open series segment, Unix nanoseconds; 0 when none
}

// supersedes reports whether e is an Event's later progress than old. An Event's count and the
// occurrences its series spans cover only grow, so the later state is the greater pair; an
// equal pair (a new resourceVersion without a new occurrence) is later by arrival. This keeps
// the checkpoint right when a series closed by the sweeper and the Event's next version reach
// the pipeline in the other order.
func (e *checkpointEntry) supersedes(old *checkpointEntry) bool {
	if e.Count != old.Count {
		return e.Count > old.Count
	}
	return e.Done >= old.Done
}

type checkpointState struct {
	Version int           `json:"version"`
	Next    int64         `json:"next"`
	Buckets []bucketState `json:"buckets"`
}

type bucketState struct {
	Key     string `json:"key"`
	Written int64  `json:"written"` // Unix nanoseconds of the last write
}

type checkpoint struct {
	client storage.Client
	ttl    time.Duration
	now    func() time.Time

	state     checkpointState
	open      map[string]checkpointEntry // entries of the open bucket, the last in state.Buckets
	openSince time.Time
	dirty     bool // open holds entries not written yet
	lastWrite time.Time
}

func newCheckpoint(client storage.Client, ttl time.Duration, now func() time.Time) *checkpoint {
	return &checkpoint{client: client, ttl: ttl, now: now, state: checkpointState{Version: 1}}
}

// load reads every bucket. It returns a nil map when no checkpoint exists yet, which is what
// makes max_event_age apply.
func (c *checkpoint) load(ctx context.Context) (map[string]checkpointEntry, error) {
	raw, err := c.client.Get(ctx, checkpointStateKey)
	if err != nil {
		return nil, fmt.Errorf("reading checkpoint key %q: %w", checkpointStateKey, err)
	}
	if raw == nil {
		return nil, nil
	}
	if err := json.Unmarshal(raw, &c.state); err != nil {
		return nil, fmt.Errorf("decoding checkpoint key %q: %w", checkpointStateKey, err)
	}
	ops := make([]*storage.Operation, len(c.state.Buckets))
	for i, b := range c.state.Buckets {
		ops[i] = storage.GetOperation(b.Key)
	}
	if len(ops) > 0 {
		if err := c.client.Batch(ctx, ops...); err != nil {
			return nil, fmt.Errorf("reading %d checkpoint buckets: %w", len(ops), err)
		}
	}
	entries := make(map[string]checkpointEntry)
	for _, op := range ops { // oldest first, so a newer entry replaces an older one
		if err := decodeBucket(op.Value, func(e checkpointEntry) {
			if old, ok := entries[e.UID]; !ok || e.supersedes(&old) {
				entries[e.UID] = e
			}
		}); err != nil {
			return nil, fmt.Errorf("decoding checkpoint bucket %q: %w", op.Key, err)
		}
	}
	// Never append to a bucket written by an earlier run: its entries are not in c.open.
	c.open = nil
	return entries, nil
}

// commit records entries whose spans were accepted (or that need no span). It writes at most
// once per checkpointInterval: a storage write is a disk sync with file_storage, and one per
// accepted batch would cap the receiver at the disk's sync rate. What is not written yet is
// written by flush, which the pipeline calls when the interval has passed and at shutdown; only
// a crash can lose it, and then the next start emits those occurrences again, with the same
// span IDs.
func (c *checkpoint) commit(ctx context.Context, entries []*checkpointEntry) error {
	if len(entries) == 0 {
		return nil
	}
	now := c.now()
	if c.open == nil || now.Sub(c.openSince) >= bucketSpan {
		// The open bucket's pending entries go out before it is closed.
		if err := c.flush(ctx); err != nil {
			return err
		}
		c.open = make(map[string]checkpointEntry)
		c.openSince = now
		c.state.Buckets = append(c.state.Buckets, bucketState{Key: bucketPrefix + strconv.FormatInt(c.state.Next, 10)})
		c.state.Next++
	}
	for _, e := range entries {
		if old, ok := c.open[e.UID]; ok && !e.supersedes(&old) {
			continue
		}
		c.open[e.UID] = *e
	}
	c.dirty = true
	if c.due(now) > 0 {
		return nil
	}
	return c.flush(ctx)
}

// due is how long until pending entries may be written; zero or less means now.
func (c *checkpoint) due(now time.Time) time.Duration {
	return checkpointInterval - now.Sub(c.lastWrite)
}

// flush writes the open bucket and the state, and expires old buckets, in one storage batch.
func (c *checkpoint) flush(ctx context.Context) error {
	if !c.dirty {
		return nil
	}
	now := c.now()
	c.state.Buckets[len(c.state.Buckets)-1].Written = now.UnixNano()
	var ops []*storage.Operation
	expired := 0
	for _, b := range c.state.Buckets[:len(c.state.Buckets)-1] {
		if now.Sub(time.Unix(0, b.Written)) <= c.ttl {
			break
		}
		ops = append(ops, storage.DeleteOperation(b.Key))
		expired++
	}
	c.state.Buckets = c.state.Buckets[expired:]
	state, err := json.Marshal(c.state)
	if err != nil {
		return err
	}
	open := c.state.Buckets[len(c.state.Buckets)-1].Key
	ops = append(ops, storage.SetOperation(open, encodeBucket(c.open)), storage.SetOperation(checkpointStateKey, state))
	// Whether or not the write succeeds, the next attempt waits an interval: a failing
	// storage must not be retried per batch.
	c.lastWrite = now
	if err := c.client.Batch(ctx, ops...); err != nil {
		return fmt.Errorf("writing checkpoint bucket %q (%d entries): %w", open, len(c.open), err)
	}
	c.dirty = false
	return nil
}

// A bucket is text, one entry per line: uid, namespace, resourceVersion, count, time, and the
// series' covered occurrence and open segment start. None of these can contain a tab or a
// newline. Entries of earlier versions have only the first five fields: their receiver emitted
// a span per occurrence, so every occurrence up to count counts as covered.
func encodeBucket(entries map[string]checkpointEntry) []byte {
	var b bytes.Buffer
	b.Grow(len(entries) * 96)
	for _, e := range entries {
		b.WriteString(e.UID)
		b.WriteByte('\t')
		b.WriteString(e.Namespace)
		b.WriteByte('\t')
		b.WriteString(e.RV)
		b.WriteByte('\t')
		b.WriteString(strconv.FormatInt(int64(e.Count), 10))
		b.WriteByte('\t')
		b.WriteString(strconv.FormatInt(e.Last, 10))
		b.WriteByte('\t')
		b.WriteString(strconv.FormatInt(int64(e.Done), 10))
		b.WriteByte('\t')
		b.WriteString(strconv.FormatInt(e.SegStart, 10))
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func decodeBucket(data []byte, fn func(checkpointEntry)) error {
	for line := range strings.SplitSeq(string(data), "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 5 && len(f) != 7 {
			return fmt.Errorf("entry %q has %d fields, want 7 (or 5)", line, len(f))
		}
		count, err := strconv.ParseInt(f[3], 10, 32)
		if err != nil {
			return fmt.Errorf("entry %q: count: %w", line, err)
		}
		last, err := strconv.ParseInt(f[4], 10, 64)
		if err != nil {
			return fmt.Errorf("entry %q: time: %w", line, err)
		}
		e := checkpointEntry{UID: f[0], Namespace: f[1], RV: f[2], Count: int32(count), Last: last, Done: int32(count)}
		if len(f) == 7 {
			done, err := strconv.ParseInt(f[5], 10, 32)
			if err != nil {
				return fmt.Errorf("entry %q: covered occurrence: %w", line, err)
			}
			segStart, err := strconv.ParseInt(f[6], 10, 64)
			if err != nil {
				return fmt.Errorf("entry %q: segment start: %w", line, err)
			}
			e.Done, e.SegStart = int32(done), segStart
		}
		fn(e)
	}
	return nil
}
