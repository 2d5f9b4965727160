package idmap

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/kubetrail/kubetrail/internal/model"
)

func TestMemoryStore(t *testing.T) {
	clk := newFakeClock(t0)
	exp := t0.Add(time.Minute)
	do := func(t *testing.T, m *MemoryStore, ops ...Op) []Op {
		t.Helper()
		if err := m.Do(context.Background(), ops); err != nil {
			t.Fatal(err)
		}
		return ops
	}
	t.Run("the first writer wins and every later writer reads its value", func(t *testing.T) {
		m := NewMemoryStore(MemoryConfig{MaxEntries: 10, MaxBytes: 1 << 20}, clk.Now, nil)
		first := do(t, m, Op{Kind: OpSetIfAbsent, Key: "k", Value: "one", ExpireAt: exp})
		second := do(t, m, Op{Kind: OpSetIfAbsent, Key: "k", Value: "two", ExpireAt: exp})
		if first[0].Found || !second[0].Found || second[0].Value != "one" {
			t.Fatalf("first %+v second %+v", first[0], second[0])
		}
	})
	t.Run("a record is gone at its expiry", func(t *testing.T) {
		c := newFakeClock(t0)
		m := NewMemoryStore(MemoryConfig{MaxEntries: 10, MaxBytes: 1 << 20}, c.Now, nil)
		do(t, m, Op{Kind: OpSetIfAbsent, Key: "k", Value: "one", ExpireAt: t0.Add(time.Second)})
		c.Advance(time.Second)
		if got := do(t, m, Op{Kind: OpGet, Key: "k"}); got[0].Found {
			t.Fatal("expired record still readable")
		}
		if got := do(t, m, Op{Kind: OpSetIfAbsent, Key: "k", Value: "two", ExpireAt: t0.Add(time.Hour)}); got[0].Found {
			t.Fatal("a new writer must win after expiry")
		}
	})
	t.Run("beyond max_entries the least recently used record goes", func(t *testing.T) {
		evicted := 0
		m := NewMemoryStore(MemoryConfig{MaxEntries: 2, MaxBytes: 1 << 20}, clk.Now, func(reason string) {
			if reason == "max_entries" {
				evicted++
			}
		})
		do(t, m, Op{Kind: OpSet, Key: "a", Value: "1", ExpireAt: exp}, Op{Kind: OpSet, Key: "b", Value: "2", ExpireAt: exp})
		do(t, m, Op{Kind: OpGet, Key: "a"}) // a is now more recent than b
		do(t, m, Op{Kind: OpSet, Key: "c", Value: "3", ExpireAt: exp})
		got := do(t, m, Op{Kind: OpGet, Key: "a"}, Op{Kind: OpGet, Key: "b"}, Op{Kind: OpGet, Key: "c"})
		if !got[0].Found || got[1].Found || !got[2].Found || evicted != 1 || m.Len() != 2 {
			t.Fatalf("a=%v b=%v c=%v evicted=%d len=%d", got[0].Found, got[1].Found, got[2].Found, evicted, m.Len())
		}
	})
	t.Run("beyond max_bytes records are evicted until it fits", func(t *testing.T) {
		m := NewMemoryStore(MemoryConfig{MaxEntries: 1000, MaxBytes: 3 * (entryOverhead + 100)}, clk.Now, nil)
		for i := range 10 {
			do(t, m, Op{Kind: OpSet, Key: fmt.Sprint(i), Value: string(make([]byte, 100)), ExpireAt: exp})
		}
		if m.Len() != 3 || m.bytes > m.maxBytes {
			t.Fatalf("len=%d bytes=%d max=%d", m.Len(), m.bytes, m.maxBytes)
		}
	})
	t.Run("a deleted dedup mark lets the span through again", func(t *testing.T) {
		m := NewMemoryStore(MemoryConfig{MaxEntries: 10, MaxBytes: 1 << 20}, clk.Now, nil)
		do(t, m, Op{Kind: OpSetIfAbsent, Key: "d", ExpireAt: exp})
		do(t, m, Op{Kind: OpDelete, Key: "d"})
		if got := do(t, m, Op{Kind: OpSetIfAbsent, Key: "d", ExpireAt: exp}); got[0].Found {
			t.Fatal("mark survived its deletion")
		}
	})
	t.Run("expired records are reclaimed behind a live one of a longer life", func(t *testing.T) {
		// A relation lives a day, an assignment its windows, a deleted object's records minutes:
		// a live record at the least recently used end must not keep the expired ones after it.
		c := newFakeClock(t0)
		m := NewMemoryStore(MemoryConfig{MaxEntries: 1 << 20, MaxBytes: 1 << 30}, c.Now, nil)
		do(t, m, Op{Kind: OpSet, Key: "r:idle", Value: "owner", ExpireAt: t0.Add(24 * time.Hour)})
		for i := range 1000 {
			do(t, m, Op{Kind: OpSet, Key: fmt.Sprint("a:", i), Value: "asg", ExpireAt: t0.Add(time.Minute)})
		}
		c.Advance(2 * time.Minute)
		// Half as many operations as the slab has slots walk all of it.
		for i := range 501 {
			do(t, m, Op{Kind: OpSet, Key: fmt.Sprint("b:", i), Value: "asg", ExpireAt: c.Now().Add(time.Hour)})
		}
		if live := 1 + 501; m.Len() != live || m.bytes != int64(live)*entryOverhead+int64(len("owner")+501*len("asg")) {
			t.Fatalf("%d records and %d bytes held, want the %d live ones", m.Len(), m.bytes, live)
		}
		if got := do(t, m, Op{Kind: OpGet, Key: "r:idle"}); !got[0].Found {
			t.Fatal("the live record went with the expired ones")
		}
	})
}

func TestRecordEncodingsRoundTrip(t *testing.T) {
	a := Assignment{TraceID: model.ObjectTraceID("k", t0), SpanID: model.ObjectSpanID("k", t0), Parent: model.ObjectSpanID("o", t0)}
	if got, ok := DecodeAssignment(a.Encode()); !ok || got != a || len(a.Encode()) != 32 {
		t.Fatalf("assignment round trip: %+v %v", got, ok)
	}
	o := model.Owner{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "demo-65b6865b5c", UID: "0b0e5a54-1c4f-4b0a-9d2e-1f1d0c7b7a11"}
	if got, ok := DecodeOwner(EncodeOwner(o)); !ok || got != o {
		t.Fatalf("owner round trip: %+v %v", got, ok)
	}
	for _, bad := range []string{"", "\x05ab", EncodeOwner(o) + "x"} {
		if _, ok := DecodeOwner(bad); ok {
			t.Fatalf("malformed owner %q must not decode", bad)
		}
	}
}

func FuzzDecodeOwner(f *testing.F) {
	f.Add(EncodeOwner(model.Owner{APIVersion: "v1", Kind: "Node", Name: "n", UID: "u"}))
	f.Add("\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01")
	f.Fuzz(func(t *testing.T, s string) {
		// Whatever Redis hands back, decoding never panics, and what decodes survives a round trip
		// (varints may arrive in a longer-than-needed form; that is harmless).
		if o, ok := DecodeOwner(s); ok {
			if back, ok := DecodeOwner(EncodeOwner(o)); !ok || back != o {
				t.Fatalf("decode(%q) = %+v does not round-trip", s, o)
			}
		}
	})
}

func TestDuplicateMarksInMemory(t *testing.T) {
	mark := func(i byte) string { return DedupKey(pcommon.SpanID{i, 1, 2, 3, 4, 5, 6, 7}) }
	set := func(m *MemoryStore, key string, exp time.Time) bool {
		ops := []Op{{Kind: OpSetIfAbsent, Key: key, ExpireAt: exp}}
		_ = m.Do(context.Background(), ops)
		return ops[0].Found
	}
	t.Run("a mark is found until its TTL (plus at most an eighth) has passed", func(t *testing.T) {
		c := newFakeClock(t0)
		m := NewMemoryStore(MemoryConfig{MaxEntries: 100, MaxBytes: 1 << 20}, c.Now, nil)
		ttl := 80 * time.Minute
		if set(m, mark(1), c.Now().Add(ttl)) {
			t.Fatal("a new mark must not be found")
		}
		c.Advance(ttl - time.Minute)
		if !set(m, mark(1), c.Now().Add(ttl)) {
			t.Fatal("a mark must be found within its TTL")
		}
		c.Advance(ttl/dedupGenerations + 2*time.Minute)
		if set(m, mark(1), c.Now().Add(ttl)) {
			t.Fatal("a mark must be gone an eighth of its TTL after it expired")
		}
	})
	t.Run("marks never push assignments out of the LRU and are bounded by max_entries", func(t *testing.T) {
		c := newFakeClock(t0)
		evicted := 0
		m := NewMemoryStore(MemoryConfig{MaxEntries: 10, MaxBytes: 1 << 20}, c.Now, func(string) { evicted++ })
		_ = m.Do(context.Background(), []Op{{Kind: OpSet, Key: "a:assignment", Value: "x", ExpireAt: t0.Add(24 * time.Hour)}})
		for i := range 50 {
			set(m, mark(byte(i)), c.Now().Add(80*time.Minute)) // no mark expires within the loop
			c.Advance(time.Minute)                             // a new generation every ten marks
		}
		ops := []Op{{Kind: OpGet, Key: "a:assignment"}}
		_ = m.Do(context.Background(), ops)
		if !ops[0].Found {
			t.Fatal("the assignment must survive a flood of marks")
		}
		if m.dedup.count > 10 || evicted == 0 {
			t.Fatalf("marks must stay within max_entries: %d held, %d evicted", m.dedup.count, evicted)
		}
	})
}

func TestGraftMarksInMemory(t *testing.T) {
	c := newFakeClock(t0)
	evicted := 0
	m := NewMemoryStore(MemoryConfig{MaxEntries: 40, MaxBytes: 1 << 20}, c.Now, func(string) { evicted++ })
	do := func(ops ...Op) []Op {
		t.Helper()
		if err := m.Do(context.Background(), ops); err != nil {
			t.Fatal(err)
		}
		return ops
	}
	trace := func(i int) string {
		return GraftTraceKey(pcommon.TraceID{byte(i), byte(i >> 8), 9, 9, 9, 9, 9, 9, 1, 2, 3, 4, 5, 6, 7, 8})
	}
	span := func(i int) string { return GraftSpanKey(pcommon.SpanID{byte(i), byte(i >> 8), 9, 9, 9, 9, 9, 9}) }
	ttl := 65 * time.Minute
	do(Op{Kind: OpSet, Key: "a:assignment", Value: "x", ExpireAt: t0.Add(24 * time.Hour)})
	// Twenty assignments' marks: twenty derived traces and twenty object spans, as OpSet writes
	// them (resolve.go).
	for i := range 20 {
		do(Op{Kind: OpSet, Key: trace(i), ExpireAt: c.Now().Add(ttl)}, Op{Kind: OpSet, Key: span(i), ExpireAt: c.Now().Add(ttl)})
	}
	records, _ := m.Size()
	if n := m.Marks(); records != 1 || n != (MarkCounts{Graft: 40}) || evicted != 0 {
		t.Fatalf("%d records, marks %+v, %d evicted: want the assignment alone in the LRU and 40 graft marks", records, n, evicted)
	}
	got := do(Op{Kind: OpGet, Key: trace(3)}, Op{Kind: OpGet, Key: span(3)}, Op{Kind: OpGet, Key: trace(20)}, Op{Kind: OpGet, Key: span(20)},
		// The second half of a marked trace ID, as a span ID, is not marked.
		Op{Kind: OpGet, Key: GraftSpanKey(pcommon.SpanID{1, 2, 3, 4, 5, 6, 7, 8})})
	if !got[0].Found || !got[1].Found || got[2].Found || got[3].Found || got[4].Found || got[0].Value != "" {
		t.Fatalf("marked found: %v %v; unmarked found: %v %v %v", got[0].Found, got[1].Found, got[2].Found, got[3].Found, got[4].Found)
	}
	if v, _, ok := m.peek(span(3)); !ok || v != "" {
		t.Fatal("the cache in front of Redis must answer a graft mark")
	}
	// More marks than max_entries: the oldest generations go, the LRU's records stay.
	for i := 20; i < 60; i++ {
		c.Advance(time.Minute)
		do(Op{Kind: OpSet, Key: span(i), ExpireAt: c.Now().Add(ttl)})
	}
	if graft := m.Marks().Graft; graft > 40 || evicted == 0 {
		t.Fatalf("graft marks must stay within max_entries: %d held, %d evicted", graft, evicted)
	}
	if !do(Op{Kind: OpGet, Key: "a:assignment"})[0].Found || !do(Op{Kind: OpGet, Key: span(59)})[0].Found {
		t.Fatal("the assignment and the newest mark must survive")
	}
	// Past their life (and the eighth a generation may add), marks are gone.
	c.Advance(ttl + ttl/dedupGenerations + time.Minute)
	if do(Op{Kind: OpGet, Key: span(59)})[0].Found {
		t.Fatal("a graft mark must be gone after its life")
	}
	if graft := m.Marks().Graft; graft != 0 {
		t.Fatalf("%d graft marks held after all expired", graft)
	}
}

// Each kind of mark has its own life: a continuation or graft mark, which lives for the window's
// records, must not keep a duplicate mark past duplicate_ttl, as it would in the same generation.
func TestMarksOfEachKindAreKeptApart(t *testing.T) {
	c := newFakeClock(t0)
	m := NewMemoryStore(MemoryConfig{MaxEntries: 100, MaxBytes: 1 << 20}, c.Now, nil)
	id := pcommon.SpanID{1, 2, 3, 4, 5, 6, 7, 8}
	lives := map[string]time.Duration{DedupKey(id): 10 * time.Minute, ContinuationKey(id): 35 * time.Minute, GraftSpanKey(id): 65 * time.Minute}
	for key, life := range lives {
		if err := m.Do(context.Background(), []Op{{Kind: OpSetIfAbsent, Key: key, ExpireAt: c.Now().Add(life)}}); err != nil {
			t.Fatal(err)
		}
	}
	held := func() (found []string) {
		for key := range lives {
			ops := []Op{{Kind: OpGet, Key: key}}
			_ = m.Do(context.Background(), ops)
			if ops[0].Found {
				found = append(found, key[:1])
			}
		}
		slices.Sort(found)
		return found
	}
	if records, _ := m.Size(); records != 0 || m.Marks() != (MarkCounts{1, 1, 1}) || !slices.Equal(held(), []string{"d", "e", "g"}) {
		t.Fatalf("%d records in the LRU, marks %+v, found %v: want one mark of each kind, apart", records, m.Marks(), held())
	}
	for _, step := range []struct {
		at   time.Duration // past the life and the eighth a generation may add
		want []string
	}{{12 * time.Minute, []string{"e", "g"}}, {40 * time.Minute, []string{"g"}}, {74 * time.Minute, nil}} {
		c.SetTime(t0.Add(step.at))
		if got := held(); !slices.Equal(got, step.want) {
			t.Fatalf("after %s: marks %v found, want %v", step.at, got, step.want)
		}
	}
}

func TestABurstOfDuplicateMarksWithinOneGenerationStaysWithinMaxEntries(t *testing.T) {
	// 10k spans/s for the few minutes of one generation are millions of marks: the bound must
	// hold inside a generation too, not only once a second one begins.
	c := newFakeClock(t0)
	m := NewMemoryStore(MemoryConfig{MaxEntries: 64, MaxBytes: 1 << 20}, c.Now, nil)
	for i := range 1000 {
		id := pcommon.SpanID{byte(i), byte(i >> 8), 1, 2, 3, 4, 5, 6}
		_ = m.Do(context.Background(), []Op{{Kind: OpSetIfAbsent, Key: DedupKey(id), ExpireAt: t0.Add(time.Hour)}})
	}
	if m.dedup.count > 64 {
		t.Fatalf("marks must stay within max_entries, %d held", m.dedup.count)
	}
	last := pcommon.SpanID{999 & 0xff, 999 >> 8, 1, 2, 3, 4, 5, 6}
	ops := []Op{{Kind: OpSetIfAbsent, Key: DedupKey(last), ExpireAt: t0.Add(time.Hour)}}
	_ = m.Do(context.Background(), ops)
	if !ops[0].Found {
		t.Fatal("the most recent mark must still be known")
	}
}
