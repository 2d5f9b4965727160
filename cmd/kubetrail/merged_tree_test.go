package main

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/kubetrail/kubetrail/cmd/kubetrail/internal/trail"
	"github.com/kubetrail/kubetrail/internal/door"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor"
	"github.com/kubetrail/kubetrail/receiver/k8sauditreceiver/k8sauditreceivertest"
)

// replayWithWindow posts a recorded scenario's audit webhook bodies through the real k8s_audit
// receiver and k8s_object_link processor configured with the given window, then hands the
// processor the spans of kubetrail's other receivers (more), and returns what the processor exported: the
// recorded capture cut into several windows, as a collector with that window would have written it.
func replayWithWindow(t *testing.T, scenario string, window time.Duration, more ...ptrace.Traces) []ptrace.Traces {
	t.Helper()
	return replayWith(t, scenario, window, func(*k8sobjectlinkprocessor.Config) {}, more...)
}

// replayWith is replayWithWindow with the processor's configuration changed by configure.
func replayWith(t *testing.T, scenario string, window time.Duration, configure func(*k8sobjectlinkprocessor.Config), more ...ptrace.Traces) []ptrace.Traces {
	t.Helper()
	posts, _ := filepath.Glob(filepath.Join("../../testbed/fixtures", scenario, "audit-webhook", "*.json"))
	if len(posts) == 0 {
		t.Fatalf("no recorded webhook bodies for %s", scenario)
	}
	slices.Sort(posts)
	sink := new(consumertest.TracesSink)
	pf := k8sobjectlinkprocessor.NewFactory()
	pcfg := pf.CreateDefaultConfig().(*k8sobjectlinkprocessor.Config)
	pcfg.Window = window
	configure(pcfg)
	proc, err := pf.CreateTraces(context.Background(), processortest.NewNopSettings(pf.Type()), pcfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := proc.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	k8sauditreceivertest.PostCapture(t, posts, window, proc)
	// The other receivers' spans come as k8s_event_spans hands them on: through one of
	// kubetrail's own doors (internal/door), which alone may place Event spans.
	for _, td := range more {
		if err := proc.ConsumeTraces(door.Trusted(context.Background()), td); err != nil {
			t.Fatal(err)
		}
	}
	if err := proc.Shutdown(context.Background()); err != nil { // releases spans held for owner_wait
		t.Fatal(err)
	}
	return sink.AllTraces()
}

// A rollout that crosses window boundaries is several traces joined by previous_window links;
// the command shows it as one tree holding every span of those windows, with the same activity
// as the single-window recording.
func TestRolloutAcrossWindowsIsOneMergedTree(t *testing.T) {
	batches := replayWithWindow(t, "deployment", time.Second)
	src := "file=" + writeJSONL(t, batches...)
	code, out, errOut := kubetrail(t, "trace", "deployment/demo", "-n", "default", "--cluster", "testbed", "--window", "1s", "--source", src, "-o", "json")
	if code != 0 {
		t.Fatal(errOut)
	}
	merged := decodeTree(t, out)
	if len(merged.Windows) < 2 {
		t.Fatalf("the 2 s recording in 1 s windows gave %d Deployment windows", len(merged.Windows))
	}
	for i, w := range merged.Windows[1:] {
		if w.PreviousTraceID != merged.Windows[i].TraceID {
			t.Fatalf("window %d links to trace %q, the window before is %s", i+1, w.PreviousTraceID, merged.Windows[i].TraceID)
		}
	}
	// Every span of the Deployment's window traces is in the tree, once.
	traces := map[string]bool{}
	for _, w := range merged.Windows {
		traces[w.TraceID] = true
	}
	want := map[string]bool{}
	for _, td := range batches {
		for _, rs := range td.ResourceSpans().All() {
			for _, ss := range rs.ScopeSpans().All() {
				for _, s := range ss.Spans().All() {
					if traces[s.TraceID().String()] {
						want[s.TraceID().String()+"/"+s.SpanID().String()] = true
					}
				}
			}
		}
	}
	t.Logf("%d Deployment windows, %d spans in %d traces", len(merged.Windows), len(want), len(traces))
	if got := countTree(merged); got != len(want) || len(want) < 150 {
		t.Fatalf("the merged tree holds %d spans, the %d window traces %d", got, len(traces), len(want))
	}
	// The same activity, object by object, as the one-window recording.
	code, out, errOut = kubetrail(t, "trace", "deployment/demo", "-n", "default", "--source", "file="+recordedFile(t, "deployment"), "-o", "json")
	if code != 0 {
		t.Fatal(errOut)
	}
	one := decodeTree(t, out)
	if a, b := activityByObject(merged), activityByObject(one); !mapsEqual(a, b) {
		t.Fatalf("merged windows differ from one window:\nmerged %v\none    %v", a, b)
	}
}

// activityByObject maps each object of the tree to the span IDs of its activity.
func activityByObject(n *trailNode) map[string][]string {
	out := map[string][]string{}
	var walk func(*trailNode, string)
	walk = func(n *trailNode, path string) {
		path += "/" + n.Kind + ":" + n.Name
		for _, s := range n.Spans {
			out[path] = append(out[path], s.SpanID)
		}
		slices.Sort(out[path])
		for _, c := range n.Children {
			walk(c, path)
		}
	}
	walk(n, "")
	return out
}

func mapsEqual(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

type trailNode = trail.JSONNode

// A trace past max_spans_per_trace goes on in continuation traces; the command follows them and
// shows the same tree as from one trace. The recorded rollout, replayed with the smallest bound
// the processor accepts, is cut into several traces.
func TestContinuedTracesAreOneTree(t *testing.T) {
	batches := replayWith(t, "deployment", 30*time.Minute, func(c *k8sobjectlinkprocessor.Config) { c.MaxSpansPerTrace = 100 })
	traces := map[string]int{}
	for _, td := range batches {
		for _, rs := range td.ResourceSpans().All() {
			for _, ss := range rs.ScopeSpans().All() {
				for _, s := range ss.Spans().All() {
					traces[s.TraceID().String()]++
				}
			}
		}
	}
	if len(traces) < 2 {
		t.Fatalf("the recorded rollout with max_spans_per_trace 100 is %d trace(s): nothing to follow", len(traces))
	}
	code, out, errOut := kubetrail(t, "trace", "deployment/demo", "-n", "default", "--source", "file="+recordedFile(t, "deployment"), "-o", "json")
	if code != 0 {
		t.Fatal(errOut)
	}
	one := decodeTree(t, out)
	// With --uid the window's trace ID is computed, not searched: only the continuation derived
	// from it leads to the rest.
	code, out, errOut = kubetrail(t, "trace", "deployment/demo", "-n", "default", "--cluster", "testbed", "--uid", one.UID,
		"--since", "2026-11-21T10:00:00Z", "--until", "2026-11-21T11:00:00Z", "--source", "file="+writeJSONL(t, batches...), "-o", "json")
	if code != 0 {
		t.Fatal(errOut)
	}
	cut := decodeTree(t, out)
	if a, b := activityByObject(cut), activityByObject(one); !mapsEqual(a, b) {
		t.Fatalf("continued traces differ from one trace:\ncontinued %v\none       %v", a, b)
	}
	if len(cut.Windows) != len(one.Windows) {
		t.Fatalf("%d Deployment windows from continued traces, %d from one: a continuation is not a window", len(cut.Windows), len(one.Windows))
	}
	t.Logf("%d traces (spans per trace %v) merged into one tree of %d spans", len(traces), traces, countTree(cut))
}
