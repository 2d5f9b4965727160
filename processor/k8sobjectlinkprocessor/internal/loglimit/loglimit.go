// Package loglimit lets a warning that would repeat on every batch through once per interval,
// counting the ones it holds back.
package loglimit

import (
	"sync"
	"time"
)

// Limiter lets one log line per reason through per interval and counts the ones it holds
// back, so that an error repeated on every batch is visible without flooding the log. Time comes
// from the caller (the processor's injected clock).
type Limiter struct {
	every time.Duration

	mu         sync.Mutex
	last       map[string]time.Time
	suppressed map[string]int
}

// New returns a Limiter that lets one line per reason through per every.
func New(every time.Duration) *Limiter {
	return &Limiter{every: every, last: make(map[string]time.Time), suppressed: make(map[string]int)}
}

// Allow reports whether a line of this reason may be logged now and, if so, how many were held
// back since the last one.
func (l *Limiter) Allow(reason string, now time.Time) (suppressed int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if last, seen := l.last[reason]; seen && now.Sub(last) < l.every {
		l.suppressed[reason]++
		return 0, false
	}
	l.last[reason] = now
	suppressed = l.suppressed[reason]
	l.suppressed[reason] = 0
	return suppressed, true
}
