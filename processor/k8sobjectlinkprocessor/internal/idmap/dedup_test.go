package idmap

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/kubetrail/kubetrail/internal/heaptest"
)

// A sealed generation answers as a map would, through inserts, removals (which shift marks back
// across the table's end) and the mark 0, at the table's highest load.
func TestSealedMarksAgreeWithAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 7, 100, 5000} {
		ids := make([]uint64, 0, n)
		for len(ids) < n {
			switch rng.IntN(4) {
			case 0:
				ids = append(ids, uint64(len(ids))) // small and 0: close homes, long runs
			default:
				ids = append(ids, rng.Uint64())
			}
		}
		s := newSealedMarks(rng.Uint64(), len(ids))
		want := map[uint64]bool{}
		for _, id := range ids {
			s.insert(id)
			want[id] = true
		}
		if s.n != len(want) {
			t.Fatalf("n=%d: %d marks held, want %d", n, s.n, len(want))
		}
		for _, id := range ids {
			if rng.IntN(2) == 0 {
				if got := s.remove(id); got != want[id] {
					t.Fatalf("n=%d: remove(%d) = %v, want %v", n, id, got, want[id])
				}
				want[id] = false
			}
		}
		for _, id := range ids {
			if s.has(id) != want[id] {
				t.Fatalf("n=%d: has(%d) = %v, want %v", n, id, s.has(id), want[id])
			}
		}
		for range 1000 {
			if id := rng.Uint64(); s.has(id) != want[id] {
				t.Fatalf("n=%d: has(%d) of a mark never made", n, id)
			}
		}
		held := 0
		for _, ok := range want {
			if ok {
				held++
			}
		}
		if s.n != held {
			t.Fatalf("n=%d: %d marks counted after removals, want %d", n, s.n, held)
		}
	}
}

// Marks made in older generations are still found, and removed, once those are sealed.
func TestDuplicateMarksSurviveSealing(t *testing.T) {
	c := newFakeClock(t0)
	m := NewMemoryStore(MemoryConfig{MaxEntries: 1 << 20, MaxBytes: 1 << 20}, c.Now, nil)
	ttl := 80 * time.Minute
	key := func(i int) string {
		var id pcommon.SpanID
		binary.LittleEndian.PutUint64(id[:], uint64(i))
		return DedupKey(id)
	}
	do := func(kind OpKind, k string) bool {
		ops := []Op{{Kind: kind, Key: k, ExpireAt: c.Now().Add(ttl)}}
		_ = m.Do(context.Background(), ops)
		return ops[0].Found
	}
	for i := range 400 { // 0 to 399, four generations
		do(OpSetIfAbsent, key(i))
		if i%100 == 99 {
			c.Advance(ttl/dedupGenerations + time.Second)
		}
	}
	if sealed := len(m.dedup.gens) - 1; sealed != 3 || m.dedup.gens[0].open != nil {
		t.Fatalf("want three sealed generations and an open one, have %d generations", len(m.dedup.gens))
	}
	for i := range 400 {
		if !do(OpGet, key(i)) {
			t.Fatalf("mark %d lost", i)
		}
	}
	for i := 0; i < 400; i += 3 {
		if !do(OpDelete, key(i)) {
			t.Fatalf("mark %d not removed", i)
		}
	}
	for i := range 400 {
		if got := do(OpGet, key(i)); got != (i%3 != 0) {
			t.Fatalf("mark %d found=%v after removing every third", i, got)
		}
	}
	if m.dedup.count != 400-134 {
		t.Fatalf("%d marks counted, want %d", m.dedup.count, 400-134)
	}
}

// markBytes is what a mark costs the heap, its generation's open map and sealed tables averaged
// over the eight generations of a full set (the README's figure).
const markBytes = 12

func TestMarkBytesIsMeasured(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a million marks")
	}
	const n = 1_000_000
	c := newFakeClock(t0)
	var m *MemoryStore
	per := heaptest.PerItem(n, func() {
		m = NewMemoryStore(MemoryConfig{MaxEntries: n, MaxBytes: 1 << 20}, c.Now, nil)
		ops := make([]Op, 1)
		for i := range n {
			var id pcommon.SpanID
			binary.LittleEndian.PutUint64(id[:], uint64(i)*0x9E3779B97F4A7C15)
			ops[0] = Op{Kind: OpSetIfAbsent, Key: DedupKey(id), ExpireAt: c.Now().Add(35 * time.Minute)}
			_ = m.Do(context.Background(), ops)
			if i%1000 == 999 {
				c.Advance(time.Second) // a thousand spans a second: eight generations by count
			}
		}
	})
	if m.dedup.count != n || len(m.dedup.gens) != dedupGenerations {
		t.Fatalf("%d marks held in %d generations, want %d in %d", m.dedup.count, len(m.dedup.gens), n, dedupGenerations)
	}
	heaptest.Check(t, "duplicate mark (the README's figure)", per, "markBytes", markBytes)
	runtime.KeepAlive(m)
}
