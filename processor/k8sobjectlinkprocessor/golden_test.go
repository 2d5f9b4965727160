package k8sobjectlinkprocessor

import (
	"context"
	"encoding/json"
	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/golden"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/pdatatest/ptracetest"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/kubetrail/kubetrail/internal/goldentest"
	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/metadata"
	"github.com/kubetrail/kubetrail/receiver/k8sauditreceiver/k8sauditreceivertest"
)

const fixturesDir = "../../testbed/fixtures"

// replayFixture posts a scenario's recorded audit webhook bodies, in arrival order, to a real
// k8s_audit receiver whose next consumer is this processor, then shuts the processor down so
// that spans still held for owner_wait are released, and returns everything it passed on.
func replayFixture(t *testing.T, scenario string) ptrace.Traces {
	t.Helper()
	posts, err := filepath.Glob(filepath.Join(fixturesDir, scenario, "audit-webhook", "*.json"))
	if err != nil || len(posts) == 0 {
		t.Fatalf("no webhook captures for %s: %v", scenario, err)
	}
	slices.Sort(posts)
	p, sink := startFixtureProcessor(t, scenario)
	k8sauditreceivertest.PostCapture(t, posts, 0, p)
	return stopFixtureProcessor(t, p, sink)
}

// startFixtureProcessor starts a processor of the default configuration whose clock stands
// still at the recording's start: no owner wait expires on its own, so the held spans leave at
// Shutdown, deterministically.
func startFixtureProcessor(t *testing.T, scenario string) (*objectLinkProcessor, *consumertest.TracesSink) {
	t.Helper()
	var meta struct {
		Start time.Time `json:"start"`
	}
	raw, err := os.ReadFile(filepath.Join(fixturesDir, scenario, "scenario.json"))
	if err != nil || json.Unmarshal(raw, &meta) != nil {
		t.Fatalf("scenario.json of %s: %v", scenario, err)
	}
	sink := new(consumertest.TracesSink)
	p, err := newProcessor(processortest.NewNopSettings(metadata.Type), createDefaultConfig(), sink, newFakeClock(meta.Start))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	return p, sink
}

// stopFixtureProcessor shuts p down, releasing what it held, and returns all it passed on.
func stopFixtureProcessor(t *testing.T, p *objectLinkProcessor, sink *consumertest.TracesSink) ptrace.Traces {
	t.Helper()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	all := ptrace.NewTraces()
	for _, td := range sink.AllTraces() {
		td.ResourceSpans().MoveAndAppendTo(all.ResourceSpans())
	}
	return all
}

func TestGoldenFixturesThroughTheAuditReceiver(t *testing.T) {
	dirs, _ := filepath.Glob(filepath.Join(fixturesDir, "*", "audit-webhook"))
	if len(dirs) == 0 {
		t.Fatal("no recorded fixtures under " + fixturesDir)
	}
	for _, d := range dirs {
		scenario := filepath.Base(filepath.Dir(d))
		t.Run(scenario, func(t *testing.T) {
			got := replayFixture(t, scenario)
			path := filepath.Join("testdata", "golden", scenario+".yaml")
			want := goldentest.Traces(t, path, got)
			if err := ptracetest.CompareTraces(want, got,
				ptracetest.IgnoreResourceSpansOrder(), ptracetest.IgnoreScopeSpansOrder(), ptracetest.IgnoreSpansOrder()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// tree indexes one replay's output.
type tree struct {
	objects  map[pcommon.SpanID]ptrace.Span
	byName   map[string][]ptrace.Span
	names    map[pcommon.SpanID]string // object spans' display names (span names are kinds)
	children map[pcommon.SpanID][]ptrace.Span
	activity []ptrace.Span
}

func buildTree(td ptrace.Traces) tree {
	tr := tree{objects: map[pcommon.SpanID]ptrace.Span{}, byName: map[string][]ptrace.Span{}, names: map[pcommon.SpanID]string{}, children: map[pcommon.SpanID][]ptrace.Span{}}
	for _, rs := range td.ResourceSpans().All() {
		for _, ss := range rs.ScopeSpans().All() {
			for _, s := range ss.Spans().All() {
				if spanType(s) == model.SpanTypeObject {
					tr.objects[s.SpanID()] = s
					name := displayName(rs.Resource().Attributes(), s)
					tr.names[s.SpanID()] = name
					tr.byName[name] = append(tr.byName[name], s)
					tr.children[s.ParentSpanID()] = append(tr.children[s.ParentSpanID()], s)
				} else {
					tr.activity = append(tr.activity, s)
				}
			}
		}
	}
	return tr
}

func TestFixtureDeploymentIsOneTreePerWindow(t *testing.T) {
	tr := buildTree(replayFixture(t, "deployment"))
	deploys := tr.byName["Deployment default/demo"]
	if len(deploys) == 0 {
		t.Fatal("no Deployment default/demo object span")
	}
	windows := map[int64]bool{}
	for _, d := range deploys {
		w := d.StartTimestamp().AsTime().UnixNano()
		if windows[w] {
			t.Fatal("more than one Deployment default/demo span in one window")
		}
		windows[w] = true
		assertRoot(t, d)
		var rsNames []string
		for _, c := range tr.children[d.SpanID()] {
			if c.TraceID() != d.TraceID() {
				t.Fatalf("%s is under the Deployment but in another trace", c.Name())
			}
			rsNames = append(rsNames, tr.names[c.SpanID()])
		}
		if len(rsNames) != 2 || !strings.HasPrefix(rsNames[0], "ReplicaSet default/demo-") || !strings.HasPrefix(rsNames[1], "ReplicaSet default/demo-") || rsNames[0] == rsNames[1] {
			t.Fatalf("the Deployment's children must be exactly the two ReplicaSets, got %v", rsNames)
		}
	}
	pods := 0
	for name, spans := range tr.byName {
		if !strings.HasPrefix(name, "Pod default/demo-") {
			continue
		}
		for _, pod := range spans {
			pods++
			parent, ok := tr.objects[pod.ParentSpanID()]
			if !ok {
				t.Fatalf("%s has no parent object span", name)
			}
			// Pod names are <ReplicaSet name>-<suffix>: the parent must be that ReplicaSet.
			rsName := strings.TrimPrefix(tr.names[parent.SpanID()], "ReplicaSet default/")
			if !strings.HasPrefix(strings.TrimPrefix(name, "Pod default/"), rsName+"-") || parent.TraceID() != pod.TraceID() {
				t.Fatalf("%s must sit under its own ReplicaSet, sits under %s", name, tr.names[parent.SpanID()])
			}
		}
	}
	if pods < 5 {
		t.Fatalf("the scenario ran at least five Pods, the tree has %d", pods)
	}
	for _, s := range tr.activity {
		obj, ok := tr.objects[s.ParentSpanID()]
		if !ok {
			continue // spans of objects outside any tree (e.g. kube-system noise) are checked below
		}
		if obj.TraceID() != s.TraceID() {
			t.Fatalf("%s is under %s but in another trace", s.Name(), obj.Name())
		}
	}
	for _, s := range tr.activity {
		if _, ok := tr.objects[s.ParentSpanID()]; !ok {
			t.Fatalf("activity span %q has no object span parent", s.Name())
		}
	}
}

func TestFixtureJobNestsCronJobJobPod(t *testing.T) {
	tr := buildTree(replayFixture(t, "job"))
	cj := tr.byName["CronJob default/nightly"]
	if len(cj) != 1 {
		t.Fatalf("want one CronJob span, got %d", len(cj))
	}
	assertRoot(t, cj[0])
	jobs := tr.byName["Job default/nightly-manual"]
	if len(jobs) != 1 {
		t.Fatalf("want one Job span, got %d", len(jobs))
	}
	assertChild(t, cj[0], jobs[0])
	pods := 0
	for name, spans := range tr.byName {
		if strings.HasPrefix(name, "Pod default/nightly-manual-") {
			pods += len(spans)
			assertChild(t, jobs[0], spans[0])
		}
	}
	if pods != 2 {
		t.Fatalf("want the Job's two Pods under it, got %d", pods)
	}
}

func TestFixtureRecreateGivesTwoObjectsPerName(t *testing.T) {
	tr := buildTree(replayFixture(t, "recreate"))
	for _, name := range []string{"Pod default/phoenix", "Service default/phoenix"} {
		spans := tr.byName[name]
		if len(spans) != 2 || spans[0].SpanID() == spans[1].SpanID() {
			t.Fatalf("%s was created twice: want two object spans, got %d", name, len(spans))
		}
	}
}

// TestSpanNamesAreASmallSetPerKind (span model 1.0, docs/span-model.md): over every recorded
// scenario, through the audit receiver and the processor, and over the Events receiver's
// recordings, span names are the kind (object spans), "<verb> <resource>[/<subresource>]"
// (audit spans) or the reason (event spans): no user, node, object name, namespace or number
// in a name, and a few names per kind. Every ResourceSpans and ScopeSpans carries the span
// model's schema URL.
func TestSpanNamesAreASmallSetPerKind(t *testing.T) {
	dirs, _ := filepath.Glob(filepath.Join(fixturesDir, "*", "audit-webhook"))
	var all []ptrace.Traces
	for _, d := range dirs {
		all = append(all, replayFixture(t, filepath.Base(filepath.Dir(d))))
	}
	events, _ := filepath.Glob(filepath.Join("..", "..", "receiver", "k8seventsreceiver", "testdata", "golden", "*.yaml"))
	for _, path := range events {
		td, err := golden.ReadTraces(path)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, td)
	}
	if len(dirs) < 5 || len(events) < 5 {
		t.Fatalf("%d audit and %d Events recordings, want every scenario's", len(dirs), len(events))
	}
	byKind := map[string]map[string]bool{}
	spans := 0
	for _, td := range all {
		for _, rs := range td.ResourceSpans().All() {
			res := rs.Resource().Attributes()
			kind := attrOr(res, model.AttrServiceName)
			for _, ss := range rs.ScopeSpans().All() {
				if rs.SchemaUrl() != model.SchemaURL || ss.SchemaUrl() != model.SchemaURL {
					t.Fatalf("%s spans with schema URLs %q / %q", kind, rs.SchemaUrl(), ss.SchemaUrl())
				}
				for _, s := range ss.Spans().All() {
					spans++
					name, a := s.Name(), s.Attributes()
					if byKind[kind] == nil {
						byKind[kind] = map[string]bool{}
					}
					byKind[kind][name] = true
					if strings.ContainsAny(name, "0123456789:") {
						t.Errorf("%s span %q: a number or a user prefix in the name", kind, name)
					}
					for _, v := range []string{attrOr(res, model.AttrObjectName), attrOr(res, model.AttrNamespaceName),
						attrOr(a, model.AttrUserName), attrOr(a, model.AttrNodeName), attrOr(a, model.AttrEventReportingCtrl)} {
						if v != "" && v != kind && strings.Contains(name, v) {
							t.Errorf("%s span %q names %q", kind, name, v)
						}
					}
					switch attrOr(a, model.AttrSpanType) {
					case model.SpanTypeObject:
						if name != kind {
							t.Errorf("object span %q of kind %s", name, kind)
						}
					case model.SpanTypeAudit:
						want := attrOr(a, model.AttrAuditVerb) + " " + attrOr(res, model.AttrObjectResource)
						if sub := attrOr(a, model.AttrAuditSubresource); sub != "" {
							want += "/" + sub
						}
						if name != want {
							t.Errorf("audit span %q, want %q", name, want)
						}
					case model.SpanTypeEvent:
						if name != attrOr(a, model.AttrEventReason) {
							t.Errorf("event span %q, reason %q", name, attrOr(a, model.AttrEventReason))
						}
					}
				}
			}
		}
	}
	for kind, names := range byKind {
		if len(names) > 16 {
			t.Errorf("%s has %d span names: %v", kind, len(names), slices.Sorted(maps.Keys(names)))
		}
	}
	if spans < 300 {
		t.Fatalf("%d spans read, want the recordings'", spans)
	}
}

func attrOr(m pcommon.Map, key string) string {
	if v, ok := m.Get(key); ok {
		return v.AsString()
	}
	return ""
}
