//go:build dist

package distribution_test

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestFaultTableRowsComeFromTests holds docs/operations.md's "Faults, measured" table to the
// end-to-end fault tests: every row names a test of testbed/e2e/faults_test.go, and every such
// test has a row (the rows are what those tests write to testbed/.out/e2e/faults.md).
func TestFaultTableRowsComeFromTests(t *testing.T) {
	ops, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(root, "testbed", "e2e", "faults_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^func (TestFault\w+)\(t \*testing\.T\)`).FindAllStringSubmatch(string(src), -1) {
		tests[m[1]] = true
	}
	if len(tests) == 0 {
		t.Fatal("testbed/e2e/faults_test.go has no TestFault… function")
	}
	_, section, ok := strings.Cut(string(ops), "\n### Faults, measured\n")
	if !ok {
		t.Fatal(`docs/operations.md has no "### Faults, measured" section`)
	}
	if i := strings.Index(section, "\n#"); i >= 0 {
		section = section[:i]
	}
	rowTest := regexp.MustCompile(`^\| [^|]*\((TestFault\w+)\) \|`)
	rows := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| fault ") {
			continue
		}
		m := rowTest.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("a row of the fault table names no test: %s", line)
			continue
		}
		if !tests[m[1]] {
			t.Errorf("the fault table names %s, which testbed/e2e/faults_test.go does not have", m[1])
		}
		if cells := strings.Split(strings.Trim(line, "| "), " | "); len(cells) != 6 {
			t.Errorf("a row of the fault table has %d cells, want 6: %s", len(cells), line)
		}
		rows[m[1]] = true
	}
	var missing []string
	for name := range tests {
		if !rows[name] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("tests without a row in docs/operations.md's fault table: %v", missing)
	}
}
