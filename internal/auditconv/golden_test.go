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
	posts, err := filepath.Glob(filepath.Join(fixturesDir, scenario, "audit-webhook", "*.json"))
	if err != nil || len(posts) == 0 {
		t.Fatalf("no webhook captures for %s: %v", scenario, err)
	}
	slices.Sort(posts)
	conv := newConverter(cfg, "test")
	all := ptrace.NewTraces()
	var st Stats
	for _, p := range posts {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		events, err := decodeBody(data)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		td := conv.convert(goldenCluster, events, &st)
		td.ResourceSpans().MoveAndAppendTo(all.ResourceSpans())
	}
	return all, st
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
