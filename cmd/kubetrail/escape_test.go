package main

import (
	"path/filepath"
	"strings"
	"testing"
	"unicode"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/golden"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/kubetrail/kubetrail/cmd/kubetrail/internal/trail"
	"github.com/kubetrail/kubetrail/internal/model"
)

// hostile holds every character a terminal acts on or that reorders text: a title change, a
// bell, a screen clear, a forged line, NUL, C1 controls (NEL, CSI), the bidi embeddings,
// overrides, isolates and marks.
const hostile = "x\x1b]0;pwned\a\x1b[2J\r\nforged line\x00\u0085\u009b\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\x7f"

// Span data shaped by whoever writes to the apiserver must not reach the terminal raw: the
// tree and the timeline print each hostile character as %q escapes it, and the output has the
// lines of the same trace without them (no forged line).
func TestHostileSpanDataIsPrintedEscapedInTheTreeAndTimeline(t *testing.T) {
	recordedTraces, err := golden.ReadTraces(filepath.Join(recorded, "unschedulable.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// withSuffix appends suffix to the actor and the verb of every audit span (on every line of
	// both outputs) and to the controller and the note of every event span.
	withSuffix := func(suffix string) ptrace.Traces {
		td := ptrace.NewTraces()
		recordedTraces.CopyTo(td)
		for _, rs := range td.ResourceSpans().All() {
			for _, ss := range rs.ScopeSpans().All() {
				for _, s := range ss.Spans().All() {
					attrs := s.Attributes()
					appendTo := func(key string) {
						if v, ok := attrs.Get(key); ok {
							attrs.PutStr(key, v.Str()+suffix)
						}
					}
					appendTo(model.AttrUserName)
					appendTo(model.AttrAuditSubresource)
					appendTo(model.AttrEventReportingCtrl)
					appendTo(model.AttrEventNote)
				}
			}
		}
		return td
	}
	args := []string{"trace", "pod/pending", "-n", "default", "--cluster", "testbed"}
	for _, format := range []string{"tree", "timeline"} {
		t.Run(format, func(t *testing.T) {
			code, out, errOut := kubetrail(t, append(args, "-o", format, "--source", "file="+writeJSONL(t, withSuffix(hostile)))...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			for i, r := range out {
				if r != '\n' && (unicode.IsControl(r) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) || r == 0x200e || r == 0x200f) {
					t.Fatalf("%U at byte %d written raw:\n%s", r, i, head(out, 40))
				}
			}
			const escaped = `x\x1b]0;pwned\a\x1b[2J\r\nforged line\x00\u0085\u009b\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\x7f`
			if !strings.Contains(out, escaped) {
				t.Fatalf("the output does not show %s:\n%s", escaped, head(out, 40))
			}
			_, want, _ := kubetrail(t, append(args, "-o", format, "--source", "file="+writeJSONL(t, withSuffix("-printable")))...)
			if got, want := strings.Count(out, "\n"), strings.Count(want, "\n"); got != want {
				t.Fatalf("%d lines, the same spans with a printable suffix have %d: a line was forged\n%s", got, want, head(out, 40))
			}
		})
	}
}

// Escape writes what a terminal acts on as %q would, and leaves printable text alone.
func TestEscapeWritesControlAndBidiCharactersAsQuoteDoes(t *testing.T) {
	for in, want := range map[string]string{
		"Pod default/web-1":         "Pod default/web-1",
		"spec.replicas 2→4 ✗ … ∅ ·": "spec.replicas 2→4 ✗ … ∅ ·",
		"a\x1b[31mb":                `a\x1b[31mb`,
		"bell\a":                    `bell\a`,
		"cr\rlf\n":                  `cr\rlf\n`,
		"nul\x00":                   `nul\x00`,
		"c1\u0085\u009f":            `c1\u0085\u009f`,
		"\u202eevil\u202c":          `\u202eevil\u202c`,
		"\u2066\u2069\u200e\u200f":  `\u2066\u2069\u200e\u200f`,
		"bad\xffutf8":               `bad\xffutf8`,
		`back\slash`:                `back\slash`,
	} {
		if got := trail.Escape(in); got != want {
			t.Errorf("Escape(%q) = %s, want %s", in, got, want)
		}
	}
}
