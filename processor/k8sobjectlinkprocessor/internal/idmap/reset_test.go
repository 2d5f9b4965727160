package idmap

import (
	"slices"
	"testing"
	"time"
)

// TestRecentRecordsKeepsTheLastDistinctRecordsInUse: repeated uses of one record take one slot;
// a record used again once it is in the older half moves to the front instead of ageing out;
// duplicate marks and expired records are never written back.
func TestRecentRecordsKeepsTheLastDistinctRecordsInUse(t *testing.T) {
	now := time.Unix(1000, 0)
	later := now.Add(time.Hour)
	r := newRecentRecords(4)
	keys := func() []string {
		var out []string
		for _, op := range r.live(now) {
			out = append(out, op.Key)
		}
		slices.Sort(out)
		return out
	}
	for range 10 {
		r.add("a:hot", "v1", later)
	}
	r.add("d:mark", "", later)     // a duplicate mark: not remembered
	r.add("r:gone", "owner", now)  // expired already
	r.add("a:one", "v", later)     // ring: hot, gone, one
	r.add("a:two", "v", later)     // ring: hot, gone, one, two (full, hot the oldest)
	r.add("a:hot", "v2", later)    // hot moves to the front (its own slot was the next one)
	r.add("n:three", "uid", later) // takes the expired record's slot
	r.add("a:four", "v", later)    // the ring is full of live records: the oldest, one, goes
	if got, want := keys(), []string{"a:four", "a:hot", "a:two", "n:three"}; !slices.Equal(got, want) {
		t.Fatalf("live records %v, want %v", got, want)
	}
	for _, op := range r.live(now) {
		if op.Key == "a:hot" && op.Value != "v2" {
			t.Fatalf("a:hot holds %q, want its latest value", op.Value)
		}
		if op.Kind != OpSetIfAbsent {
			t.Fatalf("%s is written back with kind %d, want SetIfAbsent", op.Key, op.Kind)
		}
	}
}
