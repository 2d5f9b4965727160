package k8sauditconnector

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/kubetrail/kubetrail/internal/heaptest"
)

// The byte bound is only as true as dedupEntryBytes: a million auditIDs remembered the way a
// busy connector remembers them (batches of 500, generations cut by the bound) take within
// [0.5, 1.1] of the estimate in the heap (a map's cost per entry swings with its next growth),
// so that dedup_max_bytes never hides more than a tenth more than it says.
func TestDedupEntryBytesIsMeasured(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a million entries")
	}
	const n = 1_000_000
	now := time.Unix(1_700_000_000, 0)
	d := newDedup(time.Hour, 2*n*dedupEntryBytes, func() time.Time { return now }, nil)
	keys := make([]dedupKey, 0, 500)
	per := heaptest.PerItem(n, func() {
		for i := range n {
			keys = append(keys, d.key("prod-eu", fmt.Sprintf("6f1e2a3b-%04x-4c5d-8e9f-%012x", i%65536, i)))
			if len(keys) == cap(keys) {
				d.remember(keys)
				keys = keys[:0]
			}
		}
	})
	runtime.KeepAlive(keys)
	if d.len() != n {
		t.Fatalf("%d entries held, want %d", d.len(), n)
	}
	heaptest.Check(t, "remembered auditID", per, "dedupEntryBytes", dedupEntryBytes)
	runtime.KeepAlive(d)
}

// An entry is remembered for the window (and up to an eighth of it longer), renewed when it
// is remembered again, and its bytes are handed back when it goes.
func TestDedupWindow(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	var held int64
	d := newDedup(8*time.Minute, 1<<20, func() time.Time { return now }, func(delta int64) { held += delta })
	a, b := d.key("c", "a"), d.key("c", "b")
	d.remember([]dedupKey{a, b})
	if !d.seen(a) || !d.seen(b) || held != 2*dedupEntryBytes {
		t.Fatalf("seen %v %v, %d bytes held, want both and %d", d.seen(a), d.seen(b), held, 2*dedupEntryBytes)
	}
	now = now.Add(5 * time.Minute)
	d.remember([]dedupKey{b}) // renewed: b lives a window from now
	now = now.Add(3*time.Minute + time.Second)
	if d.seen(a) {
		t.Fatal("a is remembered past its window")
	}
	if !d.seen(b) {
		t.Fatal("b, renewed 3 minutes ago, is forgotten")
	}
	now = now.Add(6 * time.Minute)
	if d.seen(b) || d.len() != 0 || held != 0 {
		t.Fatalf("after every window: b seen %v, %d entries, %d bytes held; want none", d.seen(b), d.len(), held)
	}
}

// Past dedup_max_bytes the oldest entries go first, a generation at a time, and what is held
// never exceeds the bound.
func TestDedupByteBound(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	var held int64
	const maxEntries = 800
	d := newDedup(time.Hour, maxEntries*dedupEntryBytes, func() time.Time { return now }, func(delta int64) { held += delta })
	var keys []dedupKey
	for i := range 3 * maxEntries {
		k := d.key("c", fmt.Sprint(i))
		keys = append(keys, k)
		d.remember([]dedupKey{k})
		if held > maxEntries*dedupEntryBytes || int64(d.len())*dedupEntryBytes != held {
			t.Fatalf("after %d entries: %d bytes held for %d entries, bound %d", i+1, held, d.len(), maxEntries*dedupEntryBytes)
		}
	}
	if d.seen(keys[0]) || d.seen(keys[2*maxEntries-1]) {
		t.Fatal("the oldest entries are still held past the bound")
	}
	for _, k := range keys[len(keys)-maxEntries*7/8:] {
		if !d.seen(k) {
			t.Fatal("one of the newest seven eighths of the bound is forgotten")
		}
	}
}

// A key is the cluster's and the auditID's: the same ID in another cluster is another event.
// The seeds are each connector's own.
func TestDedupKeys(t *testing.T) {
	d := newDedup(time.Minute, 1<<20, time.Now, nil)
	cluster, id := "a", "x"
	if d.key("a", "x") != d.key(cluster, id) {
		t.Fatal("one event, two keys")
	}
	for _, other := range [][2]string{{"b", "x"}, {"a", "y"}, {"a/x", ""}, {"", "a/x"}} {
		if d.key("a", "x") == d.key(other[0], other[1]) {
			t.Fatalf("a/x and %s/%s share a key", other[0], other[1])
		}
	}
	if e := newDedup(time.Minute, 1<<20, time.Now, nil); e.key("a", "x") == d.key("a", "x") {
		t.Fatal("two connectors drew the same seeds")
	}
}
