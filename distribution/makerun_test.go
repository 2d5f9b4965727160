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

// readmeChangesMarker precedes, in README.md, the block of `kubetrail changes` and `show`
// commands on make run's file, each followed by what it prints.
const readmeChangesMarker = "<!-- kubetrail changes and show on make run's file: distribution/makerun_test.go runs each command of the next block and checks every line -->"

// readmeRunBlock returns the lines of the README's `make run` block, without its "…" lines (the
// README abridges the output where a line is only "…").
func readmeRunBlock(t *testing.T) []string {
	t.Helper()
	return readmeBlock(t, readmeRunMarker)
}

// readmeBlock returns the lines of the README's fenced block after marker, without its "…" lines.
func readmeBlock(t *testing.T, readmeRunMarker string) []string {
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
	t.Fatalf("README.md's block after %q is not closed", readmeRunMarker)
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
	checkREADMEChanges(t)
}

// checkREADMEChanges runs each command of the README's "What changed?" block on the file make
// run left, as written, and finds every line the README shows after it in what it prints (stdout
// and stderr), in order.
func checkREADMEChanges(t *testing.T) {
	t.Helper()
	block := readmeBlock(t, readmeChangesMarker)
	type run struct {
		cmd  string
		want []string
	}
	var runs []run
	for _, line := range block {
		if c, ok := strings.CutPrefix(line, "$ "); ok {
			runs = append(runs, run{cmd: c})
			continue
		}
		if len(runs) == 0 {
			t.Fatalf("README's What changed? block starts with %q, not a command", line)
		}
		runs[len(runs)-1].want = append(runs[len(runs)-1].want, line)
	}
	if len(runs) < 2 {
		t.Fatalf("README's What changed? block holds %d commands, want changes and show", len(runs))
	}
	for _, r := range runs {
		cmd := exec.Command("bash", "-c", r.cmd)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "TZ=UTC", "KUBETRAIL_SOURCE=", "KUBETRAIL_CLUSTER=")
		out, err := cmd.CombinedOutput()
		if err != nil || len(r.want) == 0 {
			t.Fatalf("%s: %v (%d lines shown)\n%s", r.cmd, err, len(r.want), out)
		}
		got := strings.Split(string(out), "\n")
		i := 0
		for _, w := range r.want {
			for i < len(got) && strings.TrimRight(got[i], " ") != strings.TrimRight(w, " ") {
				i++
			}
			if i == len(got) {
				t.Fatalf("the README shows %q after %s, which it does not print (in this order); it printed:\n%s", w, r.cmd, out)
			}
			i++
		}
	}
}
