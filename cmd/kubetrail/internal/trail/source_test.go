package trail

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// otlpLine is one file-exporter line holding one span of trace id.
func otlpLine(t *testing.T, id byte, name string) string {
	t.Helper()
	td := ptrace.NewTraces()
	s := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	s.SetTraceID(pcommon.TraceID{id})
	s.SetSpanID(pcommon.SpanID{id})
	s.SetName(name)
	b, err := (&ptrace.JSONMarshaler{}).MarshalTraces(td)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A file exporter killed mid-write leaves its last line cut short; a line can also be corrupt.
// Such lines are skipped and counted, the others read; a file of nothing else is an error.
func TestReadFileSkipsLinesThatAreNotOTLPJSON(t *testing.T) {
	a, b := otlpLine(t, 1, "a"), otlpLine(t, 2, "b")
	tests := []struct {
		name                         string
		content                      string
		lines, skipped, firstSkipped int
		spans                        []string // names of the spans read, by trace 1 and 2
		err                          []string
	}{
		{"every line is read", a + "\n" + b + "\n", 2, 0, 0, []string{"a", "b"}, nil},
		{"a truncated last line and a garbage line in the middle", a + "\n#!garbage\x00\n" + b[:len(b)/2], 3, 2, 2, []string{"a", ""}, nil},
		{"blank lines are not lines, numbers are the file's", "\n" + a + "\n\n{\"resourceSpans\":[{\n" + b + "\n", 3, 1, 4, []string{"a", "b"}, nil},
		{"an empty file is no error", "", 0, 0, 0, []string{"", ""}, nil},
		{"no line of trace data at all", "garbage\n" + a[:len(a)-1] + "\n", 2, 2, 1, nil,
			[]string{"traces.jsonl", "not OTLP JSON trace lines", "none of its 2 lines", "line 1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := ReadFile("traces.jsonl", strings.NewReader(tc.content))
			if tc.err != nil {
				if err == nil {
					t.Fatalf("no error; read %d lines, skipped %d", f.Lines, f.Skipped)
				}
				for _, want := range tc.err {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q lacks %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if f.Lines != tc.lines || f.Skipped != tc.skipped || f.FirstSkipped != tc.firstSkipped || (f.Skipped > 0) != (f.SkipErr != nil) {
				t.Errorf("lines %d, skipped %d, first skipped %d (%v); want %d, %d, %d", f.Lines, f.Skipped, f.FirstSkipped, f.SkipErr, tc.lines, tc.skipped, tc.firstSkipped)
			}
			for i, want := range tc.spans {
				spans, _ := f.Trace(context.Background(), pcommon.TraceID{byte(i + 1)})
				var got string
				if len(spans) > 0 {
					got = spans[0].Name
				}
				if len(spans) > 1 || got != want {
					t.Errorf("trace %d: %d spans named %q, want %q", i+1, len(spans), got, want)
				}
			}
		})
	}
}
