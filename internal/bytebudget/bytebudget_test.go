package bytebudget

import (
	"sync"
	"testing"
)

func TestBudgetNeverPassesItsBound(t *testing.T) {
	b := New(100)
	if !b.Acquire(60) || b.Acquire(41) || !b.Acquire(40) {
		t.Fatalf("60, then 41 refused, then 40 granted; in use %d", b.InUse())
	}
	b.Release(60)
	if b.InUse() != 40 || b.Max() != 100 {
		t.Fatalf("in use %d of %d, want 40 of 100", b.InUse(), b.Max())
	}
	// Concurrent holders: the sum granted never passes the bound.
	b = New(1000)
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted, peak := int64(0), int64(0)
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				if b.Acquire(7) {
					mu.Lock()
					granted += 7
					peak = max(peak, granted)
					mu.Unlock()
					mu.Lock()
					granted -= 7
					mu.Unlock()
					b.Release(7)
				}
			}
		})
	}
	wg.Wait()
	if peak > 1000 || b.InUse() != 0 {
		t.Fatalf("peak %d over the bound, or %d left in use", peak, b.InUse())
	}
}
