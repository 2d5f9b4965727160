package k8seventsreceiver

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kubetrail/kubetrail/internal/storagetest"
)

func TestCheckpoint(t *testing.T) {
	ctx := context.Background()
	now := t0
	clock := func() time.Time { return now }

	t.Run("no checkpoint yet loads as nil so that max_event_age applies", func(t *testing.T) {
		got, err := newCheckpoint(storagetest.NewMemClient(), time.Hour, clock).load(ctx)
		if err != nil || got != nil {
			t.Fatalf("load() = %v, %v; want nil, nil", got, err)
		}
	})

	t.Run("entries round-trip with nanosecond times and the newest entry per Event wins", func(t *testing.T) {
		st := storagetest.NewMemClient()
		c := newCheckpoint(st, time.Hour, clock)
		must(t, c.commit(ctx, []*checkpointEntry{{UID: "a", Namespace: "default", RV: "10", Count: 1, Last: t0.UnixNano() + 1}}))
		now = now.Add(2 * bucketSpan) // a later bucket
		must(t, c.commit(ctx, []*checkpointEntry{{UID: "a", Namespace: "default", RV: "15", Count: 4, Last: t0.UnixNano() + 999}, {UID: "b", Namespace: "kube-system", RV: "16", Count: 1}}))
		got, err := newCheckpoint(st, time.Hour, clock).load(ctx)
		must(t, err)
		want := map[string]checkpointEntry{
			"a": {UID: "a", Namespace: "default", RV: "15", Count: 4, Last: t0.UnixNano() + 999},
			"b": {UID: "b", Namespace: "kube-system", RV: "16", Count: 1},
		}
		if len(got) != len(want) || got["a"] != want["a"] || got["b"] != want["b"] {
			t.Fatalf("load() = %+v, want %+v", got, want)
		}
	})

	t.Run("series state round-trips, an earlier version's five fields load as all covered, and a later state is never replaced by an earlier one", func(t *testing.T) {
		st := storagetest.NewMemClient()
		c := newCheckpoint(st, time.Hour, clock)
		open := checkpointEntry{UID: "a", Namespace: "default", RV: "12", Count: 3, Last: 7, Done: 0, SegStart: t0.UnixNano()}
		closed := open
		closed.Done, closed.SegStart = 3, 0
		// The sweeper's entry (series closed) reaches the pipeline before the version's own.
		must(t, c.commit(ctx, []*checkpointEntry{&closed}))
		must(t, c.commit(ctx, []*checkpointEntry{&open}))
		must(t, c.flush(ctx))
		got, err := newCheckpoint(st, time.Hour, clock).load(ctx)
		must(t, err)
		if got["a"] != closed {
			t.Errorf("a = %+v, want the closed series %+v", got["a"], closed)
		}
		var old checkpointEntry
		must(t, decodeBucket([]byte("b\tdefault\t20\t4\t9\n"), func(e checkpointEntry) { old = e }))
		if want := (checkpointEntry{UID: "b", Namespace: "default", RV: "20", Count: 4, Last: 9, Done: 4}); old != want {
			t.Errorf("five-field entry = %+v, want %+v", old, want)
		}
	})

	t.Run("a restarted receiver writes a new bucket instead of overwriting the last one", func(t *testing.T) {
		st := storagetest.NewMemClient()
		must(t, newCheckpoint(st, time.Hour, clock).commit(ctx, []*checkpointEntry{{UID: "a", RV: "1", Count: 1}}))
		c := newCheckpoint(st, time.Hour, clock)
		_, err := c.load(ctx)
		must(t, err)
		must(t, c.commit(ctx, []*checkpointEntry{{UID: "b", RV: "2", Count: 1}}))
		got, err := newCheckpoint(st, time.Hour, clock).load(ctx)
		must(t, err)
		if _, ok := got["a"]; !ok || len(got) != 2 {
			t.Fatalf("load() after a restart = %+v, want a and b", got)
		}
	})

	t.Run("buckets older than checkpoint_ttl are deleted", func(t *testing.T) {
		st := storagetest.NewMemClient()
		c := newCheckpoint(st, time.Hour, clock)
		must(t, c.commit(ctx, []*checkpointEntry{{UID: "old", RV: "1", Count: 1}}))
		now = now.Add(2 * time.Hour)
		must(t, c.commit(ctx, []*checkpointEntry{{UID: "new", RV: "2", Count: 1}}))
		got, err := newCheckpoint(st, time.Hour, clock).load(ctx)
		must(t, err)
		if _, ok := got["old"]; ok || len(got) != 1 {
			t.Fatalf("load() = %+v, want only the entry younger than checkpoint_ttl", got)
		}
		if st.Keys() != 2 {
			t.Fatalf("storage holds %d keys, want the state and one bucket", st.Keys())
		}
	})

	t.Run("writes within a second are coalesced and flush writes what is pending", func(t *testing.T) {
		st := storagetest.NewMemClient()
		c := newCheckpoint(st, time.Hour, clock)
		must(t, c.commit(ctx, []*checkpointEntry{{UID: "a", RV: "1", Count: 1}}))
		now = now.Add(checkpointInterval / 2)
		must(t, c.commit(ctx, []*checkpointEntry{{UID: "b", RV: "2", Count: 1}}))
		got, err := newCheckpoint(st, time.Hour, clock).load(ctx)
		must(t, err)
		if _, ok := got["b"]; ok || len(got) != 1 {
			t.Fatalf("a second write within %s reached the storage: %+v", checkpointInterval, got)
		}
		if d := c.due(now); d <= 0 || d > checkpointInterval/2 {
			t.Fatalf("due() = %s, want the rest of the interval", d)
		}
		must(t, c.flush(ctx))
		got, err = newCheckpoint(st, time.Hour, clock).load(ctx)
		must(t, err)
		if len(got) != 2 {
			t.Fatalf("after flush the checkpoint holds %+v, want a and b", got)
		}
	})

	t.Run("a bucket's pending entries are written before the next bucket opens", func(t *testing.T) {
		st := storagetest.NewMemClient()
		c := newCheckpoint(st, time.Hour, clock)
		must(t, c.commit(ctx, []*checkpointEntry{{UID: "a", RV: "1", Count: 1}}))
		must(t, c.commit(ctx, []*checkpointEntry{{UID: "b", RV: "2", Count: 1}})) // pending
		now = now.Add(bucketSpan)
		must(t, c.commit(ctx, []*checkpointEntry{{UID: "c", RV: "3", Count: 1}}))
		got, err := newCheckpoint(st, time.Hour, clock).load(ctx)
		must(t, err)
		if _, ok := got["b"]; !ok {
			t.Fatalf("checkpoint holds %+v: b was lost when its bucket closed", got)
		}
		must(t, c.flush(ctx))
		got, err = newCheckpoint(st, time.Hour, clock).load(ctx)
		must(t, err)
		if len(got) != 3 {
			t.Fatalf("checkpoint holds %+v, want a, b and c", got)
		}
	})

	t.Run("a corrupt bucket is an error naming the bucket", func(t *testing.T) {
		st := storagetest.NewMemClient()
		c := newCheckpoint(st, time.Hour, clock)
		must(t, c.commit(ctx, []*checkpointEntry{{UID: "a", RV: "1", Count: 1}}))
		must(t, st.Set(ctx, bucketPrefix+"0", []byte("a\tdefault\n")))
		_, err := newCheckpoint(st, time.Hour, clock).load(ctx)
		if err == nil || !strings.Contains(err.Error(), bucketPrefix+"0") {
			t.Fatalf("load() = %v, want an error naming the bucket", err)
		}
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
