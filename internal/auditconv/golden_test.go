package auditconv

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/pdatatest/ptracetest"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/kubetrail/kubetrail/internal/goldentest"
)

// goldenScope is the instrumentation scope the golden files were recorded with: the k8s_audit
// receiver's, the door the captures came in by.
const goldenScope = "github.com/kubetrail/kubetrail/receiver/k8sauditreceiver"

// defaultSettings returns a copy of the defaults, for a test to change.
func defaultSettings() *Settings {
	s := DefaultSettings()
	return &s
}

// newConverter is a Converter of settings s under the golden scope.
func newConverter(s *Settings, version string) *Converter {
	return New(Options{Settings: *s, ScopeName: goldenScope, ScopeVersion: version})
}

const (
	fixturesDir   = "../../testbed/fixtures"
	goldenCluster = "testbed"
)

// scenarios lists the recorded fixtures that have webhook captures.
func scenarios(t testing.TB) []string {
	dirs, err := filepath.Glob(filepath.Join(fixturesDir, "*", "audit-webhook"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range dirs {
		names = append(names, filepath.Base(filepath.Dir(d)))
	}
	slices.Sort(names)
	return names
}

// replayScenario feeds every recorded webhook body of a scenario, in arrival order, through
// one converter with the default configuration, as the receiver would.
func replayScenario(t testing.TB, scenario string, cfg *Settings) (ptrace.Traces, Stats) {
	t.Helper()
	if cfg == nil {
		cfg = defaultSettings()
	}
	conv := newConverter(cfg, "test")
	all := ptrace.NewTraces()
	var st Stats
	for _, events := range scenarioPosts(t, scenario) {
		td := conv.convert(goldenCluster, events, &st)
		td.ResourceSpans().MoveAndAppendTo(all.ResourceSpans())
	}
	return all, st
}

// scenarioPosts are the events of each recorded webhook body of a scenario, in arrival order.
func scenarioPosts(t testing.TB, scenario string) [][]Event {
	t.Helper()
	posts, err := filepath.Glob(filepath.Join(fixturesDir, scenario, "audit-webhook", "*.json"))
	if err != nil || len(posts) == 0 {
		t.Fatalf("no webhook captures for %s: %v", scenario, err)
	}
	slices.Sort(posts)
	out := make([][]Event, 0, len(posts))
	for _, p := range posts {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		events, err := decodeBody(data)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		out = append(out, events)
	}
	return out
}

func TestGoldenFixtures(t *testing.T) {
	names := scenarios(t)
	if len(names) == 0 {
		t.Fatal("no recorded fixtures under " + fixturesDir)
	}
	for _, scenario := range names {
		t.Run(scenario, func(t *testing.T) {
			got, _ := replayScenario(t, scenario, nil)
			path := filepath.Join("testdata", "golden", scenario+".yaml")
			want := goldentest.Traces(t, path, got)
			if err := ptracetest.CompareTraces(want, got); err != nil {
				t.Fatalf("%s differs from the converter's output (regenerate with -update if intended): %v", path, err)
			}
		})
	}
}
