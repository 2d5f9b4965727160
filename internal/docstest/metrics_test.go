package docstest

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// root is the repository's root, from this package's directory.
const root = "../.."

// exported is what the components' documentation.md files say they export: each metric's
// attributes and, for an attribute with an enum, its values. A metric that two components export
// (the k8s_audit receiver's and connector's otelcol_k8s_audit_*) has the union of both.
type exported map[string]map[string]map[string]bool

var (
	metricHeading = regexp.MustCompile(`^### (otelcol_[a-z0-9_]+)\s*$`)
	enumValue     = regexp.MustCompile("``([^`]+)``")
)

// readExported reads every component's documentation.md (mdatagen's output from metadata.yaml).
func readExported(t *testing.T) (exported, []string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "*", "*", "documentation.md"))
	if err != nil || len(files) < 4 {
		t.Fatalf("documentation.md files: %v %v, want the four components'", files, err)
	}
	ex := exported{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		metric, inAttrs := "", false
		for _, line := range strings.Split(string(raw), "\n") {
			if m := metricHeading.FindStringSubmatch(line); m != nil {
				metric, inAttrs = m[1], false
				if ex[metric] == nil {
					ex[metric] = map[string]map[string]bool{}
				}
				continue
			}
			switch {
			case metric == "":
			case strings.HasPrefix(line, "#### Attributes"):
				inAttrs = true
			case strings.HasPrefix(line, "#"):
				inAttrs = false
			case inAttrs && strings.HasPrefix(line, "| ") && !strings.HasPrefix(line, "| Name ") && !strings.HasPrefix(line, "| ---"):
				name := strings.TrimSpace(strings.Split(line, "|")[1])
				if ex[metric][name] == nil {
					ex[metric][name] = map[string]bool{}
				}
				for _, v := range enumValue.FindAllStringSubmatch(line, -1) {
					ex[metric][name][v[1]] = true
				}
			}
		}
	}
	return ex, files
}

// metric returns the documented metric a name in the Markdown stands for: itself, or the
// histogram whose series a _bucket, _sum or _count name is.
func (ex exported) metric(name string) (string, bool) {
	if _, ok := ex[name]; ok {
		return name, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if _, ok := ex[base]; ok {
				return base, true
			}
		}
	}
	return "", false
}

// check reports what is wrong with a mention of metric with label and values (values may be
// empty: the label alone).
func (ex exported) check(metric, label string, values []string) []string {
	attrs := ex[metric]
	enum, ok := attrs[label]
	if !ok {
		var names []string
		for n := range attrs {
			names = append(names, n)
		}
		sort.Strings(names)
		return []string{metric + " has no label " + label + " (documentation.md: " + strings.Join(names, ", ") + ")"}
	}
	var out []string
	for _, v := range values {
		if len(enum) > 0 && !enum[v] {
			out = append(out, metric+"{"+label+"} has no value "+v)
		}
	}
	return out
}

var (
	// otelcol_k8s_audit_dropped_events, optionally followed by {reason}, {reason=x},
	// {reason="x"}, {reason=x\|y} or {reason=x|y}.
	mention = regexp.MustCompile(`otelcol_(k8s_[a-z0-9_]*[a-z0-9])(\{[^}]*\})?`)
	// A table row whose first cell names metrics and whose second cell says their labels:
	// "| `otelcol_…` | `reason`: `a`, `b` (…); `source`: c, d |".
	tableRow   = regexp.MustCompile("^\\|\\s*`otelcol_k8s_[^|]*\\|([^|]*)\\|")
	tableLabel = regexp.MustCompile("`([a-z_]+)`:")
	word       = regexp.MustCompile("^`?([a-z0-9_]+)`?")
	// parenthesized is an aside in a table cell: "auth (WRONGPASS, NOAUTH, …)".
	parenthesized = regexp.MustCompile(`\([^)]*\)`)
)

// gone are metrics a page names as removed, saying so.
var gone = map[string]bool{
	"otelcol_k8s_event_spans_spans_emitted": true, // the events receiver's README: "it is gone"
}

// mentions returns the metric mentions of line (name, labels part or ""), leaving out a prefix
// ("metrics are prefixed `otelcol_k8s_object_link_`", "`otelcol_k8s_audit_*`").
func mentions(line string) [][2]string {
	var out [][2]string
	for _, loc := range mention.FindAllStringSubmatchIndex(line, -1) {
		if end := loc[3]; loc[4] < 0 && end < len(line) && (line[end] == '_' || line[end] == '*') {
			continue
		}
		labels := ""
		if loc[4] >= 0 {
			labels = line[loc[4]:loc[5]]
		}
		out = append(out, [2]string{line[loc[2]:loc[3]], labels})
	}
	return out
}

// splitValues reads the values of a mention: x, "x", x|y, x\|y; "…" (any) gives none.
func splitValues(s string) []string {
	var out []string
	for _, v := range strings.Split(strings.ReplaceAll(s, `\|`, "|"), "|") {
		v = strings.Trim(strings.TrimSpace(v), `"`)
		if v != "" && v != "…" && v != "..." {
			out = append(out, v)
		}
	}
	return out
}

// markdownFiles are the repository's Markdown pages but the generated documentation.md files
// and what is not the repository's own (the testbed's checkouts, build output).
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", ".state", "build", "node_modules", "third_party", "vendor":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".md") && d.Name() != "documentation.md" {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestDocumentedMetricsAreTheExportedOnes: every metric of a kubetrail component that a
// Markdown page names (otelcol_k8s_…), every label it names on it ({reason}, {result=failed},
// a README table's "`reason`: `a`, `b`") and every value it gives that label are what the
// components' documentation.md, generated by mdatagen from metadata.yaml, says they export —
// the names the built binary serves (the collector's Prometheus reader adds no suffix to them).
// An alert written from the docs then queries series the components declare. That the code
// records under the declared names is each component's own test's to say (the conversion once
// exported diff_base_records with reason= where metadata.yaml and every page said result=;
// internal/auditconv's shared diff base tests now read that counter by metadata.yaml's name).
func TestDocumentedMetricsAreTheExportedOnes(t *testing.T) {
	ex, _ := readExported(t)
	count := 0
	for _, path := range markdownFiles(t) {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, path)
		for i, line := range strings.Split(string(raw), "\n") {
			var problems []string
			for _, m := range mentions(line) {
				count++
				metric, ok := ex.metric("otelcol_" + m[0])
				if !ok {
					if !gone["otelcol_"+m[0]] {
						problems = append(problems, "otelcol_"+m[0]+" is exported by no component")
					}
					continue
				}
				if m[1] == "" {
					continue
				}
				for _, spec := range strings.Split(strings.Trim(m[1], "{}"), ",") {
					label, values, _ := strings.Cut(strings.TrimSpace(spec), "=")
					problems = append(problems, ex.check(metric, label, splitValues(values))...)
				}
			}
			if row := tableRow.FindStringSubmatch(line); row != nil {
				first := line[:strings.Index(line, row[1])]
				cell := row[1]
				locs := tableLabel.FindAllStringSubmatchIndex(cell, -1)
				for _, m := range mentions(first) {
					metric, ok := ex.metric("otelcol_" + m[0])
					if !ok {
						continue // said above
					}
					for j, loc := range locs {
						label := cell[loc[2]:loc[3]]
						end := len(cell)
						if j+1 < len(locs) {
							end = locs[j+1][0]
						}
						part, _, _ := strings.Cut(parenthesized.ReplaceAllString(cell[loc[1]:end], ""), ";")
						var values []string
						for _, v := range strings.Split(part, ",") {
							if w := word.FindStringSubmatch(strings.TrimSpace(v)); w != nil {
								values = append(values, w[1])
							}
						}
						problems = append(problems, ex.check(metric, label, values)...)
					}
				}
			}
			for _, p := range slices.Compact(problems) {
				t.Errorf("%s:%d: %s", rel, i+1, p)
			}
		}
	}
	if count < 50 {
		t.Fatalf("found %d mentions of otelcol_k8s_… metrics, want the docs' (more than 50)", count)
	}
}
