package k8seventsreceiver

import (
	"reflect"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubetrail/kubetrail/internal/model"
)

// convertOne strips ev (an events.k8s.io/v1 or a core/v1 Event) and converts it as the pipeline does.
func convertOne(t *testing.T, ev any, spec spanSpec) (ptrace.ResourceSpans, ptrace.Span) {
	t.Helper()
	conv := &converter{cluster: "prod", mapper: model.BuiltinMapper(), window: model.DefaultWindow}
	b := model.NewTracesBuilder("scope", "v")
	stripped, ok := strip(ev)
	if !ok {
		t.Fatalf("strip refused %T", ev)
	}
	spec.ev = stripped
	conv.appendSpan(b, spec)
	rs := b.Traces().ResourceSpans().At(0)
	return rs, rs.ScopeSpans().At(0).Spans().At(0)
}

// occurrence is the span of an Event's first occurrence at at.
func occurrence(at time.Time) spanSpec { return spanSpec{count: 1, start: at, end: at} }

func TestConvertEventSpan(t *testing.T) {
	at := t0.Add(1500 * time.Microsecond)
	ev := testEvent("e-1", "10", withWarning("FailedScheduling"), func(ev *eventsv1.Event) {
		ev.Related = &corev1.ObjectReference{Kind: "Node", Name: "kwok-node-0", UID: "node-1"}
	})
	rs, span := convertOne(t, ev, occurrence(at))

	t.Run("the span is named after the reason and sits at the occurrence time", func(t *testing.T) {
		if span.Name() != "FailedScheduling" || span.StartTimestamp() != span.EndTimestamp() || !span.StartTimestamp().AsTime().Equal(at) {
			t.Fatalf("span %q [%v, %v], want FailedScheduling at %v", span.Name(), span.StartTimestamp(), span.EndTimestamp(), at)
		}
	})
	t.Run("a Warning is an error carrying the note", func(t *testing.T) {
		if span.Status().Code() != ptrace.StatusCodeError || span.Status().Message() != ev.Note {
			t.Fatalf("status %s %q", span.Status().Code(), span.Status().Message())
		}
	})
	t.Run("IDs derive from the regarding object, its window and the occurrence", func(t *testing.T) {
		key := model.UIDKey("prod", "pod-uid-1")
		w := model.WindowStart(at, model.DefaultWindow)
		if span.TraceID() != model.ObjectTraceID(key, w) || span.ParentSpanID() != model.ObjectSpanID(key, w) || span.SpanID() != model.EventSpanID("e-1", "1") {
			t.Fatal("trace, parent or span ID is not the derived one")
		}
	})
	t.Run("the resource is the regarding object's identity", func(t *testing.T) {
		want := map[string]any{
			model.AttrClusterName: "prod", model.AttrServiceName: "Pod", model.AttrObjectAPIGroup: "", model.AttrObjectAPIVersion: "v1",
			model.AttrObjectResource: "pods", model.AttrObjectKind: "Pod", model.AttrNamespaceName: "default", model.AttrObjectName: "web-1",
			model.AttrObjectUID: "pod-uid-1", "k8s.pod.name": "web-1", "k8s.pod.uid": "pod-uid-1",
		}
		if got := rs.Resource().Attributes().AsRaw(); !reflect.DeepEqual(got, want) || rs.SchemaUrl() != model.SchemaURL {
			t.Fatalf("resource %v (schema %q), want %v", got, rs.SchemaUrl(), want)
		}
	})
	want := map[string]any{
		model.AttrSpanType:               model.SpanTypeEvent,
		model.AttrEventReason:            "FailedScheduling",
		model.AttrEventAction:            "Binding",
		model.AttrEventType:              "Warning",
		model.AttrEventNote:              ev.Note,
		model.AttrEventReportingCtrl:     "default-scheduler",
		model.AttrEventReportingInstance: "default-scheduler-host",
		model.AttrEventCount:             int64(1),
		model.AttrEventUID:               "e-1",
		model.AttrEventName:              "web-1.e-1",
		model.AttrEventRelatedKind:       "Node",
		model.AttrEventRelatedName:       "kwok-node-0",
		model.AttrEventRelatedUID:        "node-1",
		model.AttrEventRelatedAPIVersion: "v1", // the reference has none: the known kind's
	}
	t.Run("every event attribute and the related object are set", func(t *testing.T) {
		got := span.Attributes().AsRaw()
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s = %v, want %v", k, got[k], v)
			}
		}
		if len(got) != len(want) {
			t.Errorf("%d attributes, want %d: %v", len(got), len(want), got)
		}
	})
	t.Run("the related object is a link to its object span in the span's window", func(t *testing.T) {
		key := model.UIDKey("prod", "node-1")
		w := model.WindowStart(at, model.DefaultWindow)
		if span.Links().Len() != 1 {
			t.Fatalf("%d links, want 1", span.Links().Len())
		}
		l := span.Links().At(0)
		typ, _ := l.Attributes().Get(model.AttrLinkType)
		if l.SpanID() != model.ObjectSpanID(key, w) || l.TraceID() != model.ObjectTraceID(key, w) || typ.Str() != model.LinkTypeRelated {
			t.Fatalf("link to %s/%s type %q, want the Node's object span, type %s", l.TraceID(), l.SpanID(), typ.Str(), model.LinkTypeRelated)
		}
	})

	t.Run("a series span runs from the first to the last observation and carries the count", func(t *testing.T) {
		end := t0.Add(12 * time.Minute)
		_, series := convertOne(t, ev, spanSpec{first: 1, count: 37, start: t0, end: end})
		if series.Name() != "FailedScheduling" || !series.StartTimestamp().AsTime().Equal(t0) || !series.EndTimestamp().AsTime().Equal(end) {
			t.Fatalf("series span %q [%v, %v], want FailedScheduling [%v, %v]", series.Name(), series.StartTimestamp().AsTime(), series.EndTimestamp().AsTime(), t0, end)
		}
		if series.SpanID() != model.EventSeriesSpanID("e-1", "10", 1, 37, t0, end) {
			t.Fatal("the series span's ID is not the derived one")
		}
		got := series.Attributes().AsRaw()
		if got[model.AttrEventCount] != int64(37) || got[model.AttrEventSeriesOccurrences] != int64(37) {
			t.Fatalf("count %v, occurrences %v; want 37 and 37", got[model.AttrEventCount], got[model.AttrEventSeriesOccurrences])
		}
		if len(got) != len(want)+1 {
			t.Errorf("%d attributes, want the occurrence span's and %s: %v", len(got), model.AttrEventSeriesOccurrences, got)
		}
		_, later := convertOne(t, ev, spanSpec{first: 38, count: 40, start: end.Add(time.Hour), end: end.Add(time.Hour + time.Minute)})
		if n, _ := later.Attributes().Get(model.AttrEventSeriesOccurrences); n.Int() != 3 {
			t.Errorf("a later segment 38..40 covers %d occurrences, want 3", n.Int())
		}
	})
}

func TestConvertRelatedObjectByNameKey(t *testing.T) {
	// A kubelet-style reference: UID = name, no apiVersion. The link goes to the Node's name
	// key, like the regarding object in TestConvertNodeReferenceWithTheNameAsUID.
	ev := testEvent("r", "1", func(ev *eventsv1.Event) {
		ev.Related = &corev1.ObjectReference{Kind: "Node", Name: "kwok-node-0", UID: "kwok-node-0"}
	})
	_, span := convertOne(t, ev, occurrence(t0))
	key := model.Object{Cluster: "prod", Resource: "nodes", Kind: "Node", Name: "kwok-node-0"}.Key()
	w := model.WindowStart(t0, model.DefaultWindow)
	if span.Links().Len() != 1 || span.Links().At(0).SpanID() != model.ObjectSpanID(key, w) {
		t.Fatal("a related reference without a real UID must link to the object's name key")
	}
	// Without a related object, or with one that names nothing, there is no link.
	for _, rel := range []*corev1.ObjectReference{nil, {Kind: "Node"}} {
		ev := testEvent("r", "1", func(ev *eventsv1.Event) { ev.Related = rel })
		if _, span := convertOne(t, ev, occurrence(t0)); span.Links().Len() != 0 {
			t.Errorf("related %+v gave %d links", rel, span.Links().Len())
		}
	}
}

// asCore is ev as a core/v1 recorder writes it and the core/v1 watch delivers it.
func asCore(ev *eventsv1.Event) *corev1.Event {
	return &corev1.Event{
		ObjectMeta:          ev.ObjectMeta,
		InvolvedObject:      ev.Regarding,
		Reason:              ev.Reason,
		Message:             ev.Note,
		Source:              ev.DeprecatedSource,
		FirstTimestamp:      ev.DeprecatedFirstTimestamp,
		LastTimestamp:       ev.DeprecatedLastTimestamp,
		Count:               ev.DeprecatedCount,
		Type:                ev.Type,
		EventTime:           ev.EventTime,
		Action:              ev.Action,
		Related:             ev.Related,
		ReportingController: ev.ReportingController,
		ReportingInstance:   ev.ReportingInstance,
	}
}

// Who reported an Event is one rule for both API groups: reportingController, else the
// (deprecated) source's component; reportingInstance, else its host. client-go's aggregator
// writes Events with only the source (the deployment fixture's combined ScalingReplicaSet).
func TestReporterIsOneRuleForBothAPIGroups(t *testing.T) {
	src := corev1.EventSource{Component: "deployment-controller", Host: "cm-host-0"}
	tests := []struct {
		name                 string
		controller, instance string
		source               corev1.EventSource
		wantCtrl, wantInst   string
	}{
		{"the reporting fields win over the source", "default-scheduler", "sched-0", src, "default-scheduler", "sched-0"},
		{"only the source (an aggregated Event): its component and host", "", "", src, "deployment-controller", "cm-host-0"},
		{"the controller set, the instance from the host", "replicaset-controller", "", src, "replicaset-controller", "cm-host-0"},
		{"the instance set, the controller from the component", "", "kcm-1", src, "deployment-controller", "kcm-1"},
		{"a component without host: no instance", "", "", corev1.EventSource{Component: "node-controller"}, "node-controller", ""},
		{"nothing at all: neither attribute", "", "", corev1.EventSource{}, "", ""},
	}
	for _, tt := range tests {
		ev := testEvent("r", "1", func(ev *eventsv1.Event) {
			ev.ReportingController, ev.ReportingInstance, ev.DeprecatedSource = tt.controller, tt.instance, tt.source
		})
		for _, in := range []struct {
			group string
			ev    any
		}{{"events.k8s.io/v1", ev}, {"core/v1", asCore(ev)}} {
			t.Run(in.group+"/"+tt.name, func(t *testing.T) {
				_, span := convertOne(t, in.ev, occurrence(t0))
				attrs := span.Attributes().AsRaw()
				for key, want := range map[string]string{model.AttrEventReportingCtrl: tt.wantCtrl, model.AttrEventReportingInstance: tt.wantInst} {
					got, ok := attrs[key]
					if want == "" && ok || want != "" && got != want {
						t.Errorf("%s = %v (present %t), want %q", key, got, ok, want)
					}
				}
			})
		}
	}
}

// An Event client-go's recorder combined from similar Events says so: k8s.event.aggregated=true,
// absent on any other Event.
func TestAggregatedEventsSaySo(t *testing.T) {
	tests := []struct {
		name, note string
		want       bool
	}{
		{"the aggregator's prefix", "(combined from similar events): Scaled down replica set demo-65b6865b5c from 1 to 0", true},
		{"a plain note", "Scaled down replica set demo-65b6865b5c from 1 to 0", false},
		{"the words elsewhere in the note", "Back-off restarting (combined from similar events)", false},
		{"an empty note", "", false},
	}
	for _, tt := range tests {
		ev := testEvent("g", "1", func(ev *eventsv1.Event) { ev.Note = tt.note })
		for _, in := range []struct {
			group string
			ev    any
		}{{"events.k8s.io/v1", ev}, {"core/v1", asCore(ev)}} {
			t.Run(in.group+"/"+tt.name, func(t *testing.T) {
				_, span := convertOne(t, in.ev, occurrence(t0))
				got, ok := span.Attributes().AsRaw()[model.AttrEventAggregated]
				if ok != tt.want || ok && got != true {
					t.Errorf("%s = %v (present %t), want present and true: %t", model.AttrEventAggregated, got, ok, tt.want)
				}
			})
		}
	}
}

func TestConvertClusterScopedAndUnknownKinds(t *testing.T) {
	node := testEvent("n", "1", func(ev *eventsv1.Event) {
		ev.Regarding = corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: "kwok-node-0", UID: "node-1", Namespace: "default"}
	})
	rs, _ := convertOne(t, node, occurrence(t0))
	if _, ok := rs.Resource().Attributes().Get(model.AttrNamespaceName); ok {
		t.Error("a Node Event's span carries a namespace")
	}
	crd := testEvent("c", "2", func(ev *eventsv1.Event) {
		ev.Regarding = corev1.ObjectReference{APIVersion: "example.com/v1", Kind: "Widget", Namespace: "default", Name: "w", UID: "w-1"}
	})
	rs, _ = convertOne(t, crd, occurrence(t0))
	attrs := rs.Resource().Attributes().AsRaw()
	if _, ok := attrs[model.AttrObjectResource]; ok || attrs[model.AttrObjectKind] != "Widget" || attrs[model.AttrObjectAPIGroup] != "example.com" {
		t.Errorf("an unknown kind must keep its kind and group and leave the resource out: %v", attrs)
	}
}

// The kubelet and kube-proxy report Node Events with a reference they build from the node name
// alone: UID = name, no apiVersion. Taken as a UID it would key the Node apart from the Node the
// audit receiver sees (its real UID), splitting one object in two.
func TestConvertNodeReferenceWithTheNameAsUID(t *testing.T) {
	ev := testEvent("k", "1", func(ev *eventsv1.Event) {
		ev.Regarding = corev1.ObjectReference{Kind: "Node", Name: "kwok-node-0", UID: "kwok-node-0"}
	})
	rs, span := convertOne(t, ev, occurrence(t0))
	attrs := rs.Resource().Attributes().AsRaw()
	if _, ok := attrs[model.AttrObjectUID]; ok {
		t.Errorf("a UID equal to the name is not a UID: %v", attrs)
	}
	if attrs[model.AttrObjectAPIVersion] != "v1" || attrs[model.AttrObjectResource] != "nodes" {
		t.Errorf("a reference without apiVersion takes the known kind's version: %v", attrs)
	}
	key := model.Object{Cluster: "prod", Resource: "nodes", Kind: "Node", Name: "kwok-node-0"}.Key()
	w := model.WindowStart(t0, model.DefaultWindow)
	if span.TraceID() != model.ObjectTraceID(key, w) || span.ParentSpanID() != model.ObjectSpanID(key, w) {
		t.Error("the span must sit under the Node's name key, which the processor resolves to its UID")
	}
}

func TestOccurrenceTime(t *testing.T) {
	tests := []struct {
		name string
		ev   *eventsv1.Event
		want time.Time
	}{
		{"eventTime for a single events.k8s.io occurrence", testEvent("a", "1"), t0},
		{"series lastObservedTime for a series", testEvent("a", "1", withSeries(2, t0.Add(time.Minute))), t0.Add(time.Minute)},
		{"deprecatedLastTimestamp for a repeated core Event", testEvent("a", "1", withDeprecatedCount(3, t0, t0.Add(time.Hour))), t0.Add(time.Hour).Truncate(time.Second)},
		{"deprecatedLastTimestamp when eventTime is missing", testEvent("a", "1", withDeprecatedCount(1, t0, t0)), t0.Truncate(time.Second)},
		{"deprecatedFirstTimestamp as a last resort", testEvent("a", "1", withoutTimes(), func(ev *eventsv1.Event) { ev.DeprecatedFirstTimestamp = metav1.NewTime(t0) }), t0.Truncate(time.Second)},
		{"zero when the Event has no time", testEvent("a", "1", withoutTimes()), time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Round-trip through JSON precision: Time has seconds, MicroTime microseconds.
			got := occurrenceTime(tt.ev)
			if !got.Truncate(time.Second).Equal(tt.want.Truncate(time.Second)) || (tt.want.IsZero() != got.IsZero()) {
				t.Fatalf("occurrenceTime = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestStripKeepsOnlyWhatConversionNeeds(t *testing.T) {
	ev := testEvent("a", "1")
	s, ok := strip(ev)
	if !ok || s.Labels != nil || s.ManagedFields != nil || s.UID != ev.UID || s.ResourceVersion != "1" || s.Note != ev.Note {
		t.Fatalf("strip kept %+v", s.ObjectMeta)
	}
	if _, ok := strip(&corev1.Pod{}); ok {
		t.Fatal("strip accepted a Pod")
	}
}

func TestTransformStripsEventsAndPassesOtherObjects(t *testing.T) {
	out, err := transform(testEvent("a", "1"))
	if ev, ok := out.(*eventsv1.Event); err != nil || !ok || ev.ManagedFields != nil {
		t.Fatalf("transform(Event) = %T, %v; want a stripped Event", out, err)
	}
	pod := &corev1.Pod{}
	if out, err := transform(pod); err != nil || out != pod {
		t.Fatalf("transform(Pod) = %v, %v; want the Pod unchanged", out, err)
	}
}
