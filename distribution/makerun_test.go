//go:build dist

package distribution_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// readmeRunMarker precedes, in README.md, the fenced block that shows what `make run` prints.
const readmeRunMarker = "<!-- the output of make run: distribution/makerun_test.go checks every line of the next block -->"

// readmeRunBlock returns the lines of the README's `make run` block, without its "…" lines (the
// README abridges the output where a line is only "…").
func readmeRunBlock(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(data), readmeRunMarker)
	if !ok {
		t.Fatalf("README.md has no %q before the make run block", readmeRunMarker)
	}
	var lines []string
	in := false
	sc := bufio.NewScanner(strings.NewReader(after))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			if in {
				return lines
			}
			in = true
			continue
		}
		if !in || strings.TrimSpace(line) == "…" || strings.TrimSpace(line) == "" {
			continue
		}
		lines = append(lines, line)
	}
	t.Fatal("README.md's make run block is not closed")
	return nil
}

// `make run` (testbed/hack/run-demo.sh on the built collector and CLI) replays the recorded
// deployment scenario and ends with `kubetrail trace`: every line the README shows of it is in
// what the script prints, in the same order.
func TestMakeRunEndsWithTheTraceTheREADMEShows(t *testing.T) {
	requireBinary(t)
	if _, err := os.Stat(filepath.Join(root, "bin", "kubetrail")); err != nil {
		t.Fatalf("bin/kubetrail is missing: run `make build` first (%v)", err)
	}
	want := readmeRunBlock(t)
	if len(want) < 10 {
		t.Fatalf("the README's make run block has %d lines; it should show the trace", len(want))
	}
	cmd := exec.Command("testbed/hack/run-demo.sh")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "RUN_ONCE=1", "TZ=UTC",
		fmt.Sprintf("KUBETRAIL_AUDIT_ENDPOINT=127.0.0.1:%d", freePort(t)),
		fmt.Sprintf("KUBETRAIL_HEALTH_ENDPOINT=127.0.0.1:%d", freePort(t)),
		fmt.Sprintf("KUBETRAIL_METRICS_PORT=%d", freePort(t)))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("run-demo.sh: %v\n%s", err, out)
	}
	got := strings.Split(string(out), "\n")
	i := 0
	for _, w := range want {
		for i < len(got) && strings.TrimRight(got[i], " ") != strings.TrimRight(w, " ") {
			i++
		}
		if i == len(got) {
			t.Fatalf("the README shows %q, which make run does not print (in this order); it printed:\n%s", w, out)
		}
		i++
	}
	if !strings.Contains(string(out), "Why is it slow") {
		t.Fatalf("make run ends without the trace's summary:\n%s", out)
	}
}
