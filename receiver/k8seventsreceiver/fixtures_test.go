package k8seventsreceiver

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/pdatatest/ptracetest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	eventsv1 "k8s.io/api/events/v1"

	"github.com/kubetrail/kubetrail/internal/goldentest"
	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/receiver/k8seventsreceiver/internal/metadata"
)

// fixturesDir holds the watch streams recorded from a real control plane (testbed/).
const fixturesDir = "../../testbed/fixtures"

type watchLine struct {
	Type   string          `json:"type"`
	Object eventsv1.Event  `json:"object"`
	Raw    json.RawMessage `json:"-"`
}

func readFixture(t *testing.T, scenario string) []watchLine {
	t.Helper()
	f, err := os.Open(filepath.Join(fixturesDir, scenario, "events.jsonl"))
	if err != nil {
		t.Fatalf("fixture %s: %v (record it with `make record SCENARIO=%s`)", scenario, err, scenario)
	}
	defer f.Close()
	var lines []watchLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		var l watchLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("fixture %s line %d: %v", scenario, len(lines)+1, err)
		}
		lines = append(lines, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(lines) == 0 {
		t.Fatalf("fixture %s has no watch events", scenario)
	}
	return lines
}

// replay feeds watch events to a fresh tracker, as the reflector would, and converts what it
// emits the way the pipeline does; at the end of the stream the series still open are closed,
// as when they go quiet.
func replay(t *testing.T, lines []watchLine) ptrace.Traces {
	t.Helper()
	tm := newTelemetry(t)
	tr := newTracker(tm.set.Logger, tm.tb, time.Now, 0, nil)
	conv := &converter{cluster: "testbed", mapper: model.BuiltinMapper(), window: model.DefaultWindow}
	b := model.NewTracesBuilder(metadata.ScopeName, "test")
	emit := func(item workItem) {
		for _, s := range item.spans {
			conv.appendSpan(b, s)
		}
	}
	for _, l := range lines {
		ev, _ := strip(&l.Object)
		if l.Type == "DELETED" {
			item, _ := tr.forget(ev)
			emit(item)
			continue
		}
		if item, ok := tr.observe(ev, false); ok {
			emit(item)
		}
	}
	emit(tr.closeAll(seriesQuiet))
	return b.Traces()
}

// permute shuffles the watch events across Events but keeps each Event's own versions in
// order: the apiserver delivers one object's changes in order, while the order between objects
// differs between a list (by name) and a watch (by resourceVersion), and between replicas.
func permute(lines []watchLine, seed uint64) []watchLine {
	r := rand.New(rand.NewPCG(seed, seed))
	byUID := map[string][]watchLine{}
	var uids []string
	for _, l := range lines {
		uid := string(l.Object.UID)
		if _, ok := byUID[uid]; !ok {
			uids = append(uids, uid)
		}
		byUID[uid] = append(byUID[uid], l)
	}
	// Draw the UID of each next line at random, weighted by what it has left.
	out := make([]watchLine, 0, len(lines))
	for len(out) < len(lines) {
		i := r.IntN(len(lines) - len(out))
		for _, uid := range uids {
			n := len(byUID[uid])
			if i < n {
				out = append(out, byUID[uid][0])
				byUID[uid] = byUID[uid][1:]
				break
			}
			i -= n
		}
	}
	return out
}

var compareOpts = []ptracetest.CompareTracesOption{
	ptracetest.IgnoreResourceSpansOrder(),
	ptracetest.IgnoreScopeSpansOrder(),
	ptracetest.IgnoreSpansOrder(),
}

func TestRecordedFixtures(t *testing.T) {
	for _, scenario := range []string{"deployment", "unschedulable", "conflict", "recreate", "secret", "job"} {
		t.Run(scenario, func(t *testing.T) {
			lines := readFixture(t, scenario)
			got := replay(t, lines)
			path := filepath.Join("testdata", "golden", scenario+".yaml")
			want := goldentest.Traces(t, path, got)
			if err := ptracetest.CompareTraces(want, got, compareOpts...); err != nil {
				t.Fatalf("replay in recorded order differs from %s: %v", path, err)
			}
			for seed := uint64(1); seed <= 5; seed++ {
				if err := ptracetest.CompareTraces(want, replay(t, permute(lines, seed)), compareOpts...); err != nil {
					t.Fatalf("replay permuted with seed %d differs from %s: %v", seed, path, err)
				}
			}
			if err := ptracetest.CompareTraces(want, replay(t, append(append([]watchLine{}, lines...), lines...)), compareOpts...); err != nil {
				t.Fatalf("replaying the stream twice (a relist) added spans: %v", err)
			}
			// Any order at all, even one the apiserver never produces (an Event's versions out
			// of order), loses no occurrence and invents none: the same span IDs and names.
			for seed := uint64(1); seed <= 5; seed++ {
				shuffled := append([]watchLine{}, lines...)
				rand.New(rand.NewPCG(seed, 0)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
				if a, b := spanKeys(got), spanKeys(replay(t, shuffled)); !slices.Equal(a, b) {
					t.Fatalf("fully shuffled replay (seed %d) gives spans %v, want %v", seed, b, a)
				}
			}
			assertOccurrences(t, lines, got)
		})
	}
}

// assertOccurrences checks the spans against the fixture itself: each Event is one span for its
// first occurrence and, when it recurred, one series span with its count, from its first to its
// last observation, on its regarding object, all with distinct span IDs.
func assertOccurrences(t *testing.T, lines []watchLine, td ptrace.Traces) {
	t.Helper()
	type seen struct {
		count       int32
		first, last time.Time
	}
	events := map[string]seen{}
	for _, l := range lines {
		ev, _ := strip(&l.Object)
		c, at := occurrenceCount(ev), occurrenceTime(ev)
		if old, ok := events[string(ev.UID)]; !ok || c > old.count {
			events[string(ev.UID)] = seen{count: c, first: firstOccurrenceTime(ev, at), last: at}
		}
	}
	want := 0
	for _, e := range events {
		want++
		if e.count > 1 {
			want++
		}
	}
	ids := map[pcommon.SpanID]bool{}
	eachSpan(td, func(res pcommon.Map, span ptrace.Span) {
		if ids[span.SpanID()] {
			t.Errorf("span ID %s emitted twice", span.SpanID())
		}
		ids[span.SpanID()] = true
		obj, ok := model.ObjectFromAttributes(res, span.Attributes())
		if !ok {
			t.Fatalf("span %s carries no object identity", span.Name())
		}
		if svc, _ := res.Get(model.AttrServiceName); svc.Str() != obj.Kind {
			t.Errorf("span %s: service.name %q is not the object's kind %q", span.Name(), svc.Str(), obj.Kind)
		}
		window := model.WindowStart(span.StartTimestamp().AsTime(), model.DefaultWindow)
		if span.ParentSpanID() != model.ObjectSpanID(obj.Key(), window) || span.TraceID() != model.ObjectTraceID(obj.Key(), window) {
			t.Errorf("span %s on %s is not parented to its object's span", span.Name(), obj.DisplayName())
		}
		uid, _ := span.Attributes().Get(model.AttrEventUID)
		count, _ := span.Attributes().Get(model.AttrEventCount)
		e := events[uid.Str()]
		start, end := span.StartTimestamp().AsTime(), span.EndTimestamp().AsTime()
		if n, series := span.Attributes().Get(model.AttrEventSeriesOccurrences); series {
			if count.Int() != int64(e.count) || n.Int() != int64(e.count) || !start.Equal(e.first) || !end.Equal(e.last) {
				t.Errorf("series span %s of %s: count %d, %d occurrences, [%v, %v]; want %d from %v to %v",
					span.Name(), uid.Str(), count.Int(), n.Int(), start, end, e.count, e.first, e.last)
			}
		} else if count.Int() != 1 || !start.Equal(e.first) || !end.Equal(start) {
			t.Errorf("occurrence span %s of %s: count %d at [%v, %v]; want the first occurrence at %v", span.Name(), uid.Str(), count.Int(), start, end, e.first)
		}
	})
	if len(ids) != want {
		t.Errorf("%d spans, want one per Event and one per series: %d", len(ids), want)
	}
}

// spanKeys lists "name/spanID" of every span, sorted.
func spanKeys(td ptrace.Traces) []string {
	var keys []string
	eachSpan(td, func(_ pcommon.Map, s ptrace.Span) { keys = append(keys, s.Name()+"/"+s.SpanID().String()) })
	slices.Sort(keys)
	return keys
}

func eachSpan(td ptrace.Traces, fn func(res pcommon.Map, span ptrace.Span)) {
	for _, rs := range td.ResourceSpans().All() {
		for _, ss := range rs.ScopeSpans().All() {
			for _, span := range ss.Spans().All() {
				fn(rs.Resource().Attributes(), span)
			}
		}
	}
}

// spansOf returns the spans with the given name, with their object.
func spansOf(td ptrace.Traces, name string) (spans []ptrace.Span, objs []model.Object) {
	eachSpan(td, func(res pcommon.Map, span ptrace.Span) {
		if span.Name() == name {
			o, _ := model.ObjectFromAttributes(res, span.Attributes())
			spans, objs = append(spans, span), append(objs, o)
		}
	})
	return spans, objs
}

func TestDeploymentFixtureNarratesTheRollout(t *testing.T) {
	td := replay(t, readFixture(t, "deployment"))
	for _, tc := range []struct {
		reason, kind, resource string
	}{
		{"ScalingReplicaSet", "Deployment", "deployments"},
		{"SuccessfulCreate", "ReplicaSet", "replicasets"},
		{"Scheduled", "Pod", "pods"},
	} {
		spans, objs := spansOf(td, tc.reason)
		if len(spans) == 0 {
			t.Errorf("no %s span", tc.reason)
		}
		for i, o := range objs {
			if o.Kind != tc.kind || o.Resource != tc.resource || o.Group != "" && tc.kind == "Pod" || o.UID == "" {
				t.Errorf("%s span %d is on %+v, want a %s (%s) with a UID", tc.reason, i, o, tc.kind, tc.resource)
			}
			if spans[i].Status().Code() != ptrace.StatusCodeUnset {
				t.Errorf("%s is a Normal Event but its span has status %s", tc.reason, spans[i].Status().Code())
			}
		}
	}
	// The deployment controller reported one ScalingReplicaSet twice (deprecated count 2): its
	// first occurrence is a span, and the series of both is one more.
	counts := map[string][]int64{}
	spans, _ := spansOf(td, "ScalingReplicaSet")
	for _, s := range spans {
		uid, _ := s.Attributes().Get(model.AttrEventUID)
		c, _ := s.Attributes().Get(model.AttrEventCount)
		counts[uid.Str()] = append(counts[uid.Str()], c.Int())
	}
	repeated := false
	for _, cs := range counts {
		slices.Sort(cs)
		if slices.Equal(cs, []int64{1, 2}) {
			repeated = true
		}
	}
	if !repeated {
		t.Errorf("no ScalingReplicaSet Event produced its occurrence span and a series span of 2: %v", counts)
	}
	// Every ScalingReplicaSet names the deployment controller, also those client-go's aggregator
	// combined, which carry it only as deprecatedSource.component; and those say they are combined.
	var combined int
	for _, s := range spans {
		attrs := s.Attributes().AsRaw()
		if attrs[model.AttrEventReportingCtrl] != "deployment-controller" {
			t.Errorf("ScalingReplicaSet %q: %s = %v, want deployment-controller", attrs[model.AttrEventNote], model.AttrEventReportingCtrl, attrs[model.AttrEventReportingCtrl])
		}
		note, _ := attrs[model.AttrEventNote].(string)
		isCombined := strings.HasPrefix(note, "(combined from similar events)")
		if isCombined {
			combined++
		}
		if got, _ := attrs[model.AttrEventAggregated].(bool); got != isCombined {
			t.Errorf("ScalingReplicaSet %q: %s = %v", attrs[model.AttrEventNote], model.AttrEventAggregated, attrs[model.AttrEventAggregated])
		}
	}
	if combined == 0 {
		t.Error("the fixture's combined ScalingReplicaSet Events gave no span")
	}
}

func TestUnschedulableFixtureFailsThenSchedules(t *testing.T) {
	lines := readFixture(t, "unschedulable")
	td := replay(t, lines)
	failed, fobjs := spansOf(td, "FailedScheduling")
	if len(failed) == 0 {
		t.Fatal("no FailedScheduling span")
	}
	want := map[string]int32{}
	for _, l := range lines {
		if l.Object.Reason == "FailedScheduling" {
			c := occurrenceCount(&l.Object)
			want[string(l.Object.UID)] = max(want[string(l.Object.UID)], c)
		}
	}
	// Each FailedScheduling Event is a span; the one the scheduler repeated (series.count 2)
	// is also one series span covering both attempts.
	var wantSpans, wantOccurrences int64
	for _, c := range want {
		wantSpans++
		wantOccurrences += int64(c)
		if c > 1 {
			wantSpans++
		}
	}
	occurrences := int64(0)
	for _, s := range failed {
		if n, ok := s.Attributes().Get(model.AttrEventSeriesOccurrences); ok {
			occurrences += n.Int() - 1 // the first is the occurrence span's
		} else {
			occurrences++
		}
	}
	if int64(len(failed)) != wantSpans || len(want) < 2 || occurrences != wantOccurrences {
		t.Errorf("%d FailedScheduling spans covering %d occurrences, want one per Event and one per series, %d, covering %d",
			len(failed), occurrences, wantSpans, wantOccurrences)
	}
	for i, s := range failed {
		if s.Status().Code() != ptrace.StatusCodeError || s.Status().Message() == "" {
			t.Errorf("FailedScheduling is a Warning: want status Error with the note, got %s %q", s.Status().Code(), s.Status().Message())
		}
		if fobjs[i].Kind != "Pod" {
			t.Errorf("FailedScheduling is on a %s, want the Pod", fobjs[i].Kind)
		}
	}
	scheduled, sobjs := spansOf(td, "Scheduled")
	if len(scheduled) != 1 || sobjs[0].UID != fobjs[0].UID {
		t.Fatalf("want one Scheduled span on the pending Pod, got %d", len(scheduled))
	}
	if scheduled[0].TraceID() != failed[0].TraceID() {
		t.Error("FailedScheduling and Scheduled of one Pod in one window are in different traces")
	}
	for _, f := range failed {
		if !scheduled[0].StartTimestamp().AsTime().After(f.EndTimestamp().AsTime()) {
			t.Error("the Pod was scheduled before its last FailedScheduling")
		}
	}
}

func TestRecreateFixtureKeepsIncarnationsApart(t *testing.T) {
	td := replay(t, readFixture(t, "recreate"))
	spans, objs := spansOf(td, "Scheduled")
	traces := map[pcommon.TraceID]string{}
	for i, s := range spans {
		if objs[i].Name != "phoenix" {
			continue
		}
		traces[s.TraceID()] = objs[i].UID
	}
	uids := map[string]bool{}
	for _, uid := range traces {
		uids[uid] = true
	}
	if len(traces) != 2 || len(uids) != 2 {
		t.Fatalf("Pod phoenix, deleted and created again, gave %d traces for %d UIDs; want two of each", len(traces), len(uids))
	}
}

func TestJobFixtureCountsEveryRepeat(t *testing.T) {
	td := replay(t, readFixture(t, "job"))
	spans, objs := spansOf(td, "UnexpectedJob")
	var counts []string
	for i, s := range spans {
		if objs[i].Kind != "CronJob" || objs[i].Resource != "cronjobs" || objs[i].Group != "batch" {
			t.Errorf("UnexpectedJob span on %+v, want the CronJob", objs[i])
		}
		c, _ := s.Attributes().Get(model.AttrEventCount)
		d := fmt.Sprintf("#%d", c.Int())
		if n, ok := s.Attributes().Get(model.AttrEventSeriesOccurrences); ok {
			d += fmt.Sprintf(" ×%d over %s", n.Int(), s.EndTimestamp().AsTime().Sub(s.StartTimestamp().AsTime()))
		}
		counts = append(counts, d)
	}
	slices.Sort(counts)
	// core/v1 deprecated count 3, first at 10:49:46, last at 10:49:47 (1 s precision).
	if !slices.Equal(counts, []string{"#1", "#3 ×3 over 1s"}) {
		t.Fatalf("UnexpectedJob spans %v, want the first occurrence and one series span of 3 over 1s", counts)
	}
}
