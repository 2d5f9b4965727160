package k8seventsreceiver

import (
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"

	"github.com/kubetrail/kubetrail/internal/model"
)

// regardingObject is the identity of the object an Event is about (docs/design.md, Spans). Events name a
// kind, spans also carry the resource, so the mapper translates; an unknown kind leaves the
// resource out rather than guessing a plural.
func regardingObject(cluster string, m model.Mapper, ref *corev1.ObjectReference) model.Object {
	group, version := model.SplitAPIVersion(ref.APIVersion)
	o := model.Object{
		Cluster:   cluster,
		Group:     group,
		Version:   version,
		Kind:      ref.Kind,
		Namespace: ref.Namespace,
		Name:      ref.Name,
		UID:       string(ref.UID),
	}
	if o.UID == o.Name {
		// The kubelet and kube-proxy build their Node reference from the node name alone,
		// UID included. A real UID is never the object's name; keyed by it the Node would
		// be a different object from the one the audit receiver sees. The name key lets the
		// processor resolve the real UID.
		o.UID = ""
	}
	if m != nil {
		if info, ok := m.ByKind(group, ref.Kind); ok {
			o.Resource = info.Resource
			if !info.Namespaced {
				o.Namespace = ""
			}
			if o.Version == "" {
				// Same references: no apiVersion. The audit spans of the object carry one.
				o.Version = info.Version
			}
		}
	}
	return o
}

// hasRegarding reports whether the Event names an object it can be attached to.
func hasRegarding(ev *eventsv1.Event) bool {
	r := &ev.Regarding
	return r.Kind != "" && (r.UID != "" || r.Name != "")
}

// converter turns stripped Events into spans.
type converter struct {
	cluster string
	mapper  model.Mapper
	window  time.Duration
}

// appendSpan writes one span into b: an Event's first occurrence, or a series of its
// occurrences (see spanSpec).
func (c *converter) appendSpan(b *model.TracesBuilder, s spanSpec) {
	ev := s.ev
	obj := regardingObject(c.cluster, c.mapper, &ev.Regarding)
	span := b.AppendSpan(obj)

	// A series span sits in the window of its start, like every span.
	window := model.WindowStart(s.start, c.window)
	key := obj.Key()
	span.SetTraceID(model.ObjectTraceID(key, window))
	span.SetParentSpanID(model.ObjectSpanID(key, window))
	if s.series() {
		span.SetSpanID(model.EventSeriesSpanID(string(ev.UID), ev.ResourceVersion, s.first, s.count, s.start, s.end))
	} else {
		span.SetSpanID(model.EventSpanID(string(ev.UID), occurrenceID(s.count)))
	}
	span.SetName(ev.Reason)
	span.SetKind(ptrace.SpanKindInternal)
	span.SetStartTimestamp(pcommon.NewTimestampFromTime(s.start))
	span.SetEndTimestamp(pcommon.NewTimestampFromTime(s.end))
	if ev.Type == corev1.EventTypeWarning {
		span.Status().SetCode(ptrace.StatusCodeError)
		span.Status().SetMessage(ev.Note)
	}

	attrs := span.Attributes()
	attrs.EnsureCapacity(22)
	attrs.PutStr(model.AttrSpanType, model.SpanTypeEvent)
	obj.PutOwner(attrs)
	putStr(attrs, model.AttrEventReason, ev.Reason)
	putStr(attrs, model.AttrEventAction, ev.Action)
	putStr(attrs, model.AttrEventType, ev.Type)
	putStr(attrs, model.AttrEventNote, ev.Note)
	putStr(attrs, model.AttrEventReportingCtrl, ev.ReportingController)
	putStr(attrs, model.AttrEventReportingInstance, ev.ReportingInstance)
	if aggregated(ev) {
		attrs.PutBool(model.AttrEventAggregated, true)
	}
	attrs.PutInt(model.AttrEventCount, int64(s.count))
	if s.series() {
		attrs.PutInt(model.AttrEventSeriesOccurrences, int64(s.count)-int64(s.first)+1)
	}
	putStr(attrs, model.AttrEventUID, string(ev.UID))
	putStr(attrs, model.AttrEventName, ev.Name)
	if r := ev.Related; r != nil {
		rel := regardingObject(c.cluster, c.mapper, r)
		putStr(attrs, model.AttrEventRelatedKind, r.Kind)
		putStr(attrs, model.AttrEventRelatedName, r.Name)
		putStr(attrs, model.AttrEventRelatedNamespace, r.Namespace)
		putStr(attrs, model.AttrEventRelatedUID, string(r.UID))
		putStr(attrs, model.AttrEventRelatedAPIVersion, rel.APIVersion())
		if r.Kind != "" && (rel.UID != "" || rel.Name != "") {
			// The related object's span in this span's window, derived as the processor
			// derives it (docs/design.md, Links): its UID key when the reference has a UID,
			// else its name key. The trace ID is the related object's own per-object trace,
			// the only one a receiver can know; resolve the link by its span ID.
			relKey := rel.Key()
			l := span.Links().AppendEmpty()
			l.SetTraceID(model.ObjectTraceID(relKey, window))
			l.SetSpanID(model.ObjectSpanID(relKey, window))
			l.Attributes().PutStr(model.AttrLinkType, model.LinkTypeRelated)
		}
	}
}

func putStr(m pcommon.Map, key, value string) {
	if value != "" {
		m.PutStr(key, value)
	}
}
