// Package bytebudget is a bound on the bytes that concurrent requests may hold at once: each
// request reserves what it is about to hold and gives it back when it ends.
package bytebudget

import "sync"

// Budget is a byte bound shared by concurrent holders.
type Budget struct {
	mu   sync.Mutex
	used int64
	max  int64
}

// New is a budget of maxBytes.
func New(maxBytes int64) *Budget { return &Budget{max: maxBytes} }

// Acquire reserves n bytes, or reports false when that would pass the bound.
func (b *Budget) Acquire(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.max {
		return false
	}
	b.used += n
	return true
}

// Release gives back n bytes acquired before.
func (b *Budget) Release(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}

// InUse is how many bytes are reserved now.
func (b *Budget) InUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// Max is the bound.
func (b *Budget) Max() int64 { return b.max }
