// Package auditconvtest holds what the tests of every door of the audit conversion share: the
// recorded webhook captures of the testbed and small audit events to post.
package auditconvtest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/golden"
	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/pdatatest/ptracetest"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Cluster is the cluster name the golden files were recorded under.
const Cluster = "testbed"

// root is the repository's root directory: the nearest directory above the test's working
// directory (its package's) that holds go.mod. A test binary built with -trimpath (as make
// builds everything) knows its source files only by import path, so runtime.Caller cannot say.
func root() string {
	dir, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			panic("no go.mod above " + dir)
		}
	}
}

// FixturesDir is testbed/fixtures: one directory per recorded scenario.
func FixturesDir() string { return filepath.Join(root(), "testbed", "fixtures") }

// RequestResponseCapture is the benchmark capture that audits reads with their bodies.
func RequestResponseCapture() string {
	return filepath.Join(root(), "testbed", "bench", "requestresponse-deployment")
}

// Scenarios lists the recorded scenarios that have webhook captures, sorted.
func Scenarios(tb testing.TB) []string {
	tb.Helper()
	dirs, err := filepath.Glob(filepath.Join(FixturesDir(), "*", "audit-webhook"))
	if err != nil {
		tb.Fatal(err)
	}
	var names []string
	for _, d := range dirs {
		names = append(names, filepath.Base(filepath.Dir(d)))
	}
	slices.Sort(names)
	if len(names) == 0 {
		tb.Fatal("no recorded fixtures under " + FixturesDir())
	}
	return names
}

// FixtureBodies returns the recorded webhook bodies of a scenario, in arrival order.
func FixtureBodies(tb testing.TB, scenario string) [][]byte {
	tb.Helper()
	return WebhookBodies(tb, filepath.Join(FixturesDir(), scenario))
}

// WebhookBodies returns the webhook bodies recorded in dir (a scenario's fixtures or a
// benchmark capture), in arrival order.
func WebhookBodies(tb testing.TB, dir string) [][]byte {
	tb.Helper()
	posts, err := filepath.Glob(filepath.Join(dir, "audit-webhook", "*.json"))
	if err != nil || len(posts) == 0 {
		tb.Fatalf("no webhook captures in %s", dir)
	}
	slices.Sort(posts)
	var out [][]byte
	for _, p := range posts {
		data, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, data)
	}
	return out
}

// OneCreate is a Metadata-level create of a ConfigMap whose auditID is the one %s.
const OneCreate = `{"level":"Metadata","auditID":"%s","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/default/configmaps","verb":"create",
"user":{"username":"alice","groups":["system:authenticated"]},"sourceIPs":["127.0.0.1"],"userAgent":"kubectl/v1.36.3",
"objectRef":{"resource":"configmaps","namespace":"default","name":"cm","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":201},
"requestReceivedTimestamp":"2026-11-21T10:45:54.106207Z","stageTimestamp":"2026-11-21T10:45:54.109001Z"}`

// EventList is an audit.k8s.io/v1 EventList of one OneCreate per audit ID.
func EventList(ids ...string) string {
	items := make([]string, len(ids))
	for i, id := range ids {
		items[i] = fmt.Sprintf(OneCreate, id)
	}
	return `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":[` + strings.Join(items, ",") + `]}`
}

// GoldenPath is the golden file of a scenario's spans, as the webhook made them.
func GoldenPath(scenario string) string {
	return filepath.Join(root(), "internal", "auditconv", "testdata", "golden", scenario+".yaml")
}

// AllSpans lists the spans of td in order.
func AllSpans(td ptrace.Traces) []ptrace.Span {
	var out []ptrace.Span
	for _, rs := range td.ResourceSpans().All() {
		for _, ss := range rs.ScopeSpans().All() {
			for _, s := range ss.Spans().All() {
				out = append(out, s)
			}
		}
	}
	return out
}

// AssertGoldenSpans checks that got holds exactly the spans of the scenario's golden file, by
// span ID and whatever batches they came in, each equal to the golden one: how another door
// (the audit log, a log pipeline) proves it gives the webhook's spans.
func AssertGoldenSpans(t *testing.T, scenario string, got []ptrace.Span) {
	t.Helper()
	want, err := golden.ReadTraces(GoldenPath(scenario))
	if err != nil {
		t.Fatal(err)
	}
	wantSpans := map[pcommon.SpanID]ptrace.Span{}
	for _, s := range AllSpans(want) {
		wantSpans[s.SpanID()] = s
	}
	if len(got) != len(wantSpans) {
		t.Fatalf("%s: %d spans, the webhook made %d", scenario, len(got), len(wantSpans))
	}
	seen := map[pcommon.SpanID]bool{}
	for _, s := range got {
		w, ok := wantSpans[s.SpanID()]
		if !ok {
			t.Fatalf("%s: span %q (%s) is not in the golden file", scenario, s.Name(), s.SpanID())
		}
		if seen[s.SpanID()] {
			t.Fatalf("%s: span %q (%s) came twice", scenario, s.Name(), s.SpanID())
		}
		seen[s.SpanID()] = true
		if err := ptracetest.CompareSpan(w, s); err != nil {
			t.Fatalf("%s: span %q: %v", scenario, s.Name(), err)
		}
	}
}

// MetricSum sums a component metric's data points, those with the given reason when it is not
// empty; 0 when the metric was never recorded.
func MetricSum(t *testing.T, tel *componenttest.Telemetry, name, reason string) int64 {
	t.Helper()
	m, err := tel.GetMetric(name)
	if err != nil {
		return 0
	}
	sum, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is %T", name, m.Data)
	}
	var n int64
	for _, dp := range sum.DataPoints {
		if v, ok := dp.Attributes.Value(attribute.Key("reason")); reason == "" || ok && v.AsString() == reason {
			n += dp.Value
		}
	}
	return n
}
