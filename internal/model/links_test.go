package model

import (
	"strings"
	"testing"
)

func TestParseTraceparent(t *testing.T) {
	const valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tests := []struct {
		name, value, reason string
	}{
		{"a version 00 traceparent parses", valid, ""},
		{"a later version with extra fields parses by its 00 prefix", "01" + valid[2:] + "-what-comes-next", ""},
		{"a later version of exactly 55 bytes parses", "cc" + valid[2:], ""},
		{"an empty value is too short", "", TraceparentBadLength},
		{"a truncated value is too short", valid[:54], TraceparentBadLength},
		{"upper-case hex is refused", strings.ToUpper(valid), TraceparentBadFormat},
		{"a non-hex digit is refused", "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", TraceparentBadFormat},
		{"a misplaced dash is refused", "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", TraceparentBadFormat},
		{"a later version without a dash after the flags is refused", "01" + valid[2:] + "x", TraceparentBadFormat},
		{"version ff is refused", "ff" + valid[2:], TraceparentBadVersion},
		{"version 00 with trailing data is refused", valid + "-00", TraceparentTrailing},
		{"an all-zero trace ID is refused", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", TraceparentZeroID},
		{"an all-zero parent ID is refused", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", TraceparentZeroID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tc, reason := ParseTraceparent(tt.value)
			if reason != tt.reason {
				t.Fatalf("reason = %q, want %q", reason, tt.reason)
			}
			if reason != "" {
				if !tc.TraceID.IsEmpty() || !tc.SpanID.IsEmpty() {
					t.Fatalf("a refused value returned IDs %v %v", tc.TraceID, tc.SpanID)
				}
				return
			}
			if tc.TraceID.String() != "4bf92f3577b34da6a3ce929d0e0e4736" || tc.SpanID.String() != "00f067aa0ba902b7" || tc.Flags != 1 {
				t.Fatalf("parsed %v %v %d", tc.TraceID, tc.SpanID, tc.Flags)
			}
		})
	}
}
