// Package goldentest reads the golden trace files that the components' tests generate from the
// testbed's recorded fixtures, and regenerates them when the test binary runs with -update.
// Golden files are never typed by hand: -update writes what the code produces from real
// fixtures, and a reviewer reads the diff.
package goldentest

import (
	"flag"
	"os"
	"testing"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/golden"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

var update = flag.Bool("update", false, "regenerate testdata/golden from the recorded fixtures")

// Traces returns the golden traces stored at path. With -update it first writes got there, so
// the regenerated file is read back through the same path the comparison then uses.
func Traces(tb testing.TB, path string, got ptrace.Traces) ptrace.Traces {
	tb.Helper()
	if *update {
		if err := golden.WriteTracesToFile(path, got); err != nil {
			tb.Fatalf("writing %s: %v", path, err)
		}
		// WriteTracesToFile creates files 0600; golden files are committed like any source.
		if err := os.Chmod(path, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	want, err := golden.ReadTraces(path)
	if err != nil {
		tb.Fatalf("reading %s (regenerate it from the recorded fixtures with: go test -run '%s' -update): %v", path, tb.Name(), err)
	}
	return want
}
