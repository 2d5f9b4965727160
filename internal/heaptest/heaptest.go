// Package heaptest keeps a structure's estimate of its own bytes honest: tests fill it, measure
// what the heap holds per item, and fail when the estimate no longer says so.
package heaptest

import (
	"runtime"
	"testing"
)

// PerItem returns the bytes of live heap that fill adds per item, for n items: the heap is
// collected before and after. What fill makes must stay reachable after it returns (the caller
// keeps the structure alive past the call).
func PerItem(n int, fill func()) float64 {
	before := inUse()
	fill()
	return float64(inUse()-before) / float64(n)
}

// Check logs per and fails t unless it lies within [0.5, 1.1] of estimate: a map's cost per
// entry swings with its next growth, but a bound built on the estimate must never hide more
// than a tenth more than it says. name is the estimate's, so the failure says what to change.
func Check(t testing.TB, what string, per float64, name string, estimate float64) {
	t.Helper()
	t.Logf("%.1f bytes of heap per %s (%s: %g)", per, what, name, estimate)
	if per < 0.5*estimate || per > 1.1*estimate {
		t.Fatalf("%.1f bytes of heap per %s against %s %g: measure again and change it", per, what, name, estimate)
	}
}

func inUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
