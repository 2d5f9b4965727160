package main

import (
	"strings"
	"testing"
	"time"
)

// fixClock sets the command's clock for one test.
func fixClock(t *testing.T, at time.Time) {
	t.Helper()
	saved := now
	now = func() time.Time { return at }
	t.Cleanup(func() { now = saved })
}

func TestSinceAndUntilAcceptClockTimesAndDatesInTheLocalZone(t *testing.T) {
	cet := time.FixedZone("CET", 3600)
	at := time.Date(2026, 11, 21, 15, 30, 0, 0, cet)
	tests := []struct {
		in   string
		want time.Time
	}{
		{"14:00", time.Date(2026, 11, 21, 14, 0, 0, 0, cet)},
		{"9:05", time.Date(2026, 11, 21, 9, 5, 0, 0, cet)},
		{"14:00:30", time.Date(2026, 11, 21, 14, 0, 30, 0, cet)},
		{"15:30", at}, // now is not the future
		{"16:00", time.Date(2026, 11, 20, 16, 0, 0, 0, cet)}, // later today: yesterday's
		{"2026-11-20", time.Date(2026, 11, 20, 0, 0, 0, 0, cet)},
		{"2026-11-21T14:00:00Z", time.Date(2026, 11, 21, 14, 0, 0, 0, time.UTC)},
		{"90m", at.Add(-90 * time.Minute)},
	}
	for _, tc := range tests {
		got, err := parseTime(tc.in, at)
		if err != nil || !got.Equal(tc.want) || got.Location().String() != tc.want.Location().String() {
			t.Errorf("parseTime(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"yesterday", "25:00", "14", "2026-13-01", "-5m"} {
		if _, err := parseTime(bad, at); err == nil {
			t.Errorf("parseTime(%q) accepted", bad)
		}
	}
	// Across midnight: 23:30 asked at 00:10 is last night's, in the month before on the 1st.
	if got, _ := parseTime("23:30", time.Date(2026, 12, 1, 0, 10, 0, 0, cet)); !got.Equal(time.Date(2026, 11, 30, 23, 30, 0, 0, cet)) {
		t.Errorf("23:30 at 00:10 on Dec 1 = %v", got)
	}
}

// The recorded deployment scenario ran 10:45:54–10:45:56 UTC on 2026-11-21: a clock time picks
// the range in the clock's zone (here UTC+1, so 11:45 local is 10:45 UTC).
func TestSinceClockTimeSelectsTheRangeOfTheCommand(t *testing.T) {
	fixClock(t, time.Date(2026, 11, 21, 12, 0, 0, 0, time.FixedZone("CET", 3600)))
	src := "file=" + recordedFile(t, "deployment")
	code, out, errOut := kubetrail(t, "trace", "deployment/demo", "-n", "default", "--source", src, "--since", "11:45", "--until", "11:46")
	if code != 0 || !strings.Contains(out, "Deployment default/demo") {
		t.Fatalf("--since 11:45 --until 11:46: exit %d: %s", code, errOut)
	}
	code, _, errOut = kubetrail(t, "trace", "deployment/demo", "-n", "default", "--source", src, "--since", "11:50")
	if code != 1 || !strings.Contains(errOut, "no spans in range") || !strings.Contains(errOut, "2026-11-21T10:50:00Z") {
		t.Fatalf("--since 11:50 (after the scenario): exit %d: %s", code, errOut)
	}
	code, _, errOut = kubetrail(t, "trace", "deployment/demo", "-n", "default", "--source", src, "--since", "2026-11-21", "--until", "12:00")
	if code != 0 {
		t.Fatalf("--since 2026-11-21: exit %d: %s", code, errOut)
	}
}
