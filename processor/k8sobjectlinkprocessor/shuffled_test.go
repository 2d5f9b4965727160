package k8sobjectlinkprocessor

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/connector/connectortest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/kubetrail/kubetrail/connector/k8sauditconnector"
	"github.com/kubetrail/kubetrail/internal/envelopetest"
)

// replayShuffled feeds a scenario's audit events through the k8s_audit connector into this
// processor as a log pipeline would deliver them: each up to 60 s late, one in five twice, in
// batches of seven.
func replayShuffled(t *testing.T, scenario string) ptrace.Traces {
	t.Helper()
	posts, err := filepath.Glob(filepath.Join(fixturesDir, scenario, "audit-webhook", "*.json"))
	if err != nil || len(posts) == 0 {
		t.Fatalf("no webhook captures for %s: %v", scenario, err)
	}
	slices.Sort(posts)
	var items []json.RawMessage
	for _, p := range posts {
		body, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		its, err := envelopetest.Items(body)
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, its...)
	}
	stream, err := envelopetest.Shuffled(items, 60*time.Second, 5, 7)
	if err != nil {
		t.Fatal(err)
	}
	p, sink := startFixtureProcessor(t, scenario)
	cf := k8sauditconnector.NewFactory()
	ccfg := cf.CreateDefaultConfig()
	if err := confmap.NewFromStringMap(map[string]any{"cluster": "testbed"}).Unmarshal(ccfg); err != nil {
		t.Fatal(err)
	}
	conn, err := cf.CreateLogsToTraces(context.Background(), connectortest.NewNopSettings(cf.Type()), ccfg, p)
	if err != nil {
		t.Fatal(err)
	}
	for start := 0; start < len(stream); start += 7 {
		ld := plog.NewLogs()
		lrs := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords()
		for _, r := range stream[start:min(start+7, len(stream))] {
			lrs.AppendEmpty().Body().SetStr(string(r))
		}
		if err := conn.ConsumeLogs(context.Background(), ld); err != nil {
			t.Fatal(err)
		}
	}
	return stopFixtureProcessor(t, p, sink)
}

type placement struct {
	trace  pcommon.TraceID
	parent pcommon.SpanID
	name   string
	// notFound: a 404, which names no object (its placement may differ)
	notFound bool
}

func placements(td ptrace.Traces) map[pcommon.SpanID]placement {
	out := map[pcommon.SpanID]placement{}
	for _, rs := range td.ResourceSpans().All() {
		for _, ss := range rs.ScopeSpans().All() {
			for _, s := range ss.Spans().All() {
				out[s.SpanID()] = placement{s.TraceID(), s.ParentSpanID(), s.Name(), strings.HasPrefix(s.Status().Message(), "NotFound")}
			}
		}
	}
	return out
}

// Owner nesting does not depend on arrival order: a capture delivered shuffled within 60 s and
// with duplicates, through the connector, gives the processor's in-order trees: every object
// span and every audit span in the same trace under the same parent (a 404, which names no
// object, excepted: connector README).
func TestShuffledCaptureNestsAsInOrder(t *testing.T) {
	for _, scenario := range []string{"deployment", "job", "recreate", "conflict"} {
		t.Run(scenario, func(t *testing.T) {
			want, got := placements(replayFixture(t, scenario)), placements(replayShuffled(t, scenario))
			if len(want) < 20 || len(got) != len(want) {
				t.Fatalf("%d spans, in order %d", len(got), len(want))
			}
			for id, w := range want {
				g, ok := got[id]
				switch {
				case !ok:
					t.Errorf("span %q missing", w.name)
				case w.notFound:
				case g != w:
					t.Errorf("span %q: trace %s parent %s, in order %s %s", w.name, g.trace, g.parent, w.trace, w.parent)
				}
			}
		})
	}
}
