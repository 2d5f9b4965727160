package retry

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestExponentialDoublesUpToTheCapAndStaysThere(t *testing.T) {
	tests := []struct {
		name             string
		initial, maxWait time.Duration
		want             []time.Duration
	}{
		{"doubling from 1s reaches the 30s cap and stays", time.Second, 30 * time.Second,
			[]time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}},
		{"a cap equal to the start never grows", time.Second, time.Second,
			[]time.Duration{time.Second, time.Second, time.Second}},
		{"a cap below the first doubling is the second delay", 100 * time.Millisecond, 150 * time.Millisecond,
			[]time.Duration{100 * time.Millisecond, 150 * time.Millisecond, 150 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := Exponential(tt.initial, tt.maxWait)
			for i, want := range tt.want {
				if got := b.Step(); got != want {
					t.Fatalf("step %d = %s, want %s", i, got, want)
				}
			}
		})
	}
}

func TestExponentialNeverRunsOutOfSteps(t *testing.T) {
	b := Exponential(time.Millisecond, time.Second)
	for range 100000 {
		b.Step()
	}
	if got := b.Step(); got != time.Second {
		t.Fatalf("after 100000 steps = %s, want the 1s cap", got)
	}
}
