package trail

import (
	"fmt"
	"time"
)

// ParseTime reads a --since or --until value against the clock now: a duration ago (30m), an
// RFC 3339 time, a date (2026-11-21, midnight), or a clock time (14:00, 14:00:30) of today, or of
// yesterday when today's is still to come. Dates and clock times are in now's time zone (the
// local one, as time.Now gives it).
func ParseTime(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("%q: a duration ago must be positive", s)
		}
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	loc := now.Location()
	if t, err := time.ParseInLocation(time.DateOnly, s, loc); err == nil {
		return t, nil
	}
	for _, layout := range []string{"15:04", "15:04:05"} {
		c, err := time.Parse(layout, s)
		if err != nil {
			continue
		}
		y, m, d := now.Date()
		t := time.Date(y, m, d, c.Hour(), c.Minute(), c.Second(), 0, loc)
		if t.After(now) {
			t = t.AddDate(0, 0, -1) // 23:30 asked at 00:10 is last night's
		}
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%q: want a duration ago (30m), a clock time (14:00 or 14:00:30, today or else yesterday), a date (2026-11-21) or an RFC 3339 time (2026-11-21T14:00:00Z)", s)
}
