package k8sobjectlinkprocessor

import (
	"testing"
	"time"
)

// TestHoldPolicy pins the owner_wait decision per span and per object.
func TestHoldPolicy(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	wait := 30 * time.Second
	past, future := now.Add(-time.Second), now.Add(time.Second)
	cases := []struct {
		name         string
		h            holdPolicy
		pos          int
		wantDeadline time.Time
		wantForce    bool
	}{
		{"fresh span waits owner_wait from now", freshHold(now, wait), 0, now.Add(wait), false},
		{"fresh span without owner_wait is forced", freshHold(now, 0), 3, now, true},
		{"released span before its deadline keeps it", releaseHold(now, []time.Time{past, future}, false), 1, future, false},
		{"released span past its deadline is forced", releaseHold(now, []time.Time{past, future}, false), 0, past, true},
		{"released span at its deadline is forced", releaseHold(now, []time.Time{now}, false), 0, now, true},
		{"every span is forced at shutdown", releaseHold(now, []time.Time{past, future}, true), 1, future, true},
		{"overflow is forced", noHold(), 5, time.Time{}, true},
	}
	for _, c := range cases {
		d, force := c.h.span(c.pos)
		if !d.Equal(c.wantDeadline) || force != c.wantForce {
			t.Errorf("%s: got (%v, %v), want (%v, %v)", c.name, d, force, c.wantDeadline, c.wantForce)
		}
	}

	if !mayHold(&node{}, wait) {
		t.Error("an unforced object with owner_wait on must be held")
	}
	if mayHold(&node{force: true}, wait) {
		t.Error("a forced object must not be held")
	}
	if mayHold(&node{}, 0) {
		t.Error("nothing may be held with owner_wait off")
	}
}
