package loglimit

import (
	"testing"
	"time"
)

func TestOneLinePerReasonPerIntervalWithTheCountHeldBack(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := New(time.Minute)
	steps := []struct {
		reason         string
		at             time.Duration
		wantOK         bool
		wantSuppressed int
	}{
		{"a", 0, true, 0},
		{"a", time.Second, false, 0},
		{"b", time.Second, true, 0}, // another reason has its own interval
		{"a", 59 * time.Second, false, 0},
		{"a", time.Minute, true, 2}, // the two held back since the last line
		{"a", time.Minute + time.Second, false, 0},
	}
	for i, s := range steps {
		suppressed, ok := l.Allow(s.reason, t0.Add(s.at))
		if ok != s.wantOK || suppressed != s.wantSuppressed {
			t.Fatalf("step %d (%s at %s): Allow = %d, %v; want %d, %v", i, s.reason, s.at, suppressed, ok, s.wantSuppressed, s.wantOK)
		}
	}
}
