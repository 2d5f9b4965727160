package k8seventsreceiver

import (
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// strip reduces a watched Event (events.k8s.io/v1 or core/v1) to the fields conversion and
// occurrence tracking read, as an events.k8s.io/v1 Event so both API groups share one code path.
// It keeps ObjectMeta's identity because client-go's watch-list stores key objects by
// namespace/name; labels, annotations and managedFields, often most of an Event's bytes, go.
func strip(obj any) (*eventsv1.Event, bool) {
	switch ev := obj.(type) {
	case *eventsv1.Event:
		out := &eventsv1.Event{
			ObjectMeta:               stripMeta(&ev.ObjectMeta),
			EventTime:                ev.EventTime,
			Series:                   ev.Series,
			Action:                   ev.Action,
			Reason:                   ev.Reason,
			Regarding:                ev.Regarding,
			Related:                  ev.Related,
			Note:                     ev.Note,
			Type:                     ev.Type,
			DeprecatedFirstTimestamp: ev.DeprecatedFirstTimestamp,
			DeprecatedLastTimestamp:  ev.DeprecatedLastTimestamp,
			DeprecatedCount:          ev.DeprecatedCount,
		}
		out.ReportingController, out.ReportingInstance = reporter(ev.ReportingController, ev.ReportingInstance, ev.DeprecatedSource)
		return out, true
	case *corev1.Event:
		// The mapping mirrors the apiserver's own conversion between the two API groups.
		out := &eventsv1.Event{
			ObjectMeta:               stripMeta(&ev.ObjectMeta),
			EventTime:                ev.EventTime,
			Action:                   ev.Action,
			Reason:                   ev.Reason,
			Regarding:                ev.InvolvedObject,
			Related:                  ev.Related,
			Note:                     ev.Message,
			Type:                     ev.Type,
			DeprecatedFirstTimestamp: ev.FirstTimestamp,
			DeprecatedLastTimestamp:  ev.LastTimestamp,
			DeprecatedCount:          ev.Count,
		}
		out.ReportingController, out.ReportingInstance = reporter(ev.ReportingController, ev.ReportingInstance, ev.Source)
		if ev.Series != nil {
			out.Series = &eventsv1.EventSeries{Count: ev.Series.Count, LastObservedTime: ev.Series.LastObservedTime}
		}
		return out, true
	case eventsv1.Event:
		return strip(&ev)
	}
	return nil, false
}

// reporter is who reported an Event, by one rule for both API groups: reportingController, else
// the source's component; reportingInstance, else the source's host, each field on its own.
// client-go's core/v1 recorder (tools/record, which kube-controller-manager's controllers use)
// fills both pairs, but the Event its aggregator builds copies only source, which events.k8s.io/v1
// serves as deprecatedSource: without the fallback that API group loses the reporter of exactly
// the Events of a busy controller.
func reporter(controller, instance string, src corev1.EventSource) (string, string) {
	if controller == "" {
		controller = src.Component
	}
	if instance == "" {
		instance = src.Host
	}
	return controller, instance
}

// aggregatedPrefix starts the message of an Event that client-go's recorder made by combining
// similar Events (tools/record's EventAggregator: same source, object, type and reason, 10
// different messages within 10 minutes); the message is the latest one's, after the prefix.
const aggregatedPrefix = "(combined from similar events)"

// aggregated reports whether the recorder combined similar Events into ev.
func aggregated(ev *eventsv1.Event) bool {
	return strings.HasPrefix(ev.Note, aggregatedPrefix)
}

func stripMeta(m *metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:              m.Name,
		Namespace:         m.Namespace,
		UID:               m.UID,
		ResourceVersion:   m.ResourceVersion,
		CreationTimestamp: m.CreationTimestamp,
	}
}

// transform is the cache.TransformFunc the reflector applies inside its watch-list buffer, so
// that even the initial stream of a large cluster is held stripped.
func transform(obj any) (any, error) {
	if ev, ok := strip(obj); ok {
		return ev, nil
	}
	return obj, nil
}

// occurrenceCount is how many times the Event has happened: the series count, the deprecated
// count of core/v1-style recorders, and 1 for an Event that carries neither (a single
// occurrence reported through events.k8s.io/v1, which gets a series only when it recurs).
func occurrenceCount(ev *eventsv1.Event) int32 {
	if ev.Series != nil && ev.Series.Count > 0 {
		return ev.Series.Count
	}
	if ev.DeprecatedCount > 0 {
		return ev.DeprecatedCount
	}
	return 1
}

// occurrenceTime is when the Event's latest occurrence happened: the series' last observation,
// the deprecated last timestamp for a repeated core/v1 Event, else the first occurrence's time.
// It is zero when the Event carries no time at all.
func occurrenceTime(ev *eventsv1.Event) time.Time {
	if ev.Series != nil && !ev.Series.LastObservedTime.IsZero() {
		return ev.Series.LastObservedTime.Time
	}
	if ev.DeprecatedCount > 1 && !ev.DeprecatedLastTimestamp.IsZero() {
		return ev.DeprecatedLastTimestamp.Time
	}
	switch {
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	case !ev.DeprecatedLastTimestamp.IsZero():
		return ev.DeprecatedLastTimestamp.Time
	case !ev.DeprecatedFirstTimestamp.IsZero():
		return ev.DeprecatedFirstTimestamp.Time
	}
	return time.Time{}
}

// firstOccurrenceTime is when the Event first happened: eventTime for events.k8s.io/v1 (which
// series do not move), the deprecated first timestamp for core/v1 recorders, else last.
func firstOccurrenceTime(ev *eventsv1.Event, last time.Time) time.Time {
	switch {
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	case !ev.DeprecatedFirstTimestamp.IsZero():
		return ev.DeprecatedFirstTimestamp.Time
	}
	return last
}

// occurrenceID is the occurrence part of an event span ID: the occurrence's number, counting
// from 1 (docs/design.md, IDs), also for an Event without a count, rather than its
// resourceVersion. An events.k8s.io/v1 Event has no count only until it recurs: a receiver
// that first sees it with a series (after a restart without checkpoint, or a replica started
// later) can no longer know the resourceVersion its first occurrence had, and would give that
// occurrence a second ID. The number is known to every observer.
func occurrenceID(count int32) string {
	return strconv.FormatInt(int64(count), 10)
}
