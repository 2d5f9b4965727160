package model

import (
	"crypto/sha256"
	"encoding/binary"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/kubetrail/kubetrail/internal/objid"
)

// IDs are derived, not random; an object's own (ObjectSpanID, ObjectTraceID) come from
// internal/objid, which pkg/objecttrace shares (docs/design.md, IDs): two collector replicas that see the same object in
// the same window, or the same audit event twice, compute the same IDs without talking to each
// other. Each kind of ID hashes a distinct domain tag so that, say, an audit ID can never collide
// with an object key that happens to have the same bytes.
const (
	domainAuditSpan = "kubetrail/audit-span/v1\x00"
	domainEventSpan = "kubetrail/event-span/v1\x00"
	// domainEventSeries is the span of a repeating Event's series (or one segment of it).
	domainEventSeries = "kubetrail/event-series-span/v1\x00"
	// domainContinuationTrace and domainContinuationSpan: a trace past the processor's span bound
	// continues in another (see ContinuationTraceID).
	domainContinuationTrace = "kubetrail/continuation-trace/v1\x00"
	domainContinuationSpan  = "kubetrail/continuation-span/v1\x00"
)

// ContinuationTraceID is the trace that continues trace t once t holds the processor's bound of
// spans (max_spans_per_trace): every replica derives the same one, and a reader that has t
// computes where it goes on, and on from there.
func ContinuationTraceID(t pcommon.TraceID) pcommon.TraceID {
	var buf [64]byte
	b := append(buf[:0], domainContinuationTrace...)
	b = append(b, t[:]...)
	return traceID(sha256.Sum256(b))
}

// ContinuationSpanID is the span, in the continuation trace t, that stands for the object span
// span of the trace before: the spans of that object which overflow go under it.
func ContinuationSpanID(span pcommon.SpanID, t pcommon.TraceID) pcommon.SpanID {
	var buf [64]byte
	b := append(buf[:0], domainContinuationSpan...)
	b = append(b, span[:]...)
	b = append(b, t[:]...)
	return spanID(sha256.Sum256(b))
}

// ObjectSpanID is the span ID of the object span of key in the window starting at window.
func ObjectSpanID(key Key, window time.Time) pcommon.SpanID {
	return pcommon.SpanID(objid.ObjectSpanID(string(key), window))
}

// ObjectTraceID is the per-object trace ID of key in the window starting at window: the trace a
// receiver puts an activity span in before the processor moves it to its root ancestor's trace.
func ObjectTraceID(key Key, window time.Time) pcommon.TraceID {
	return pcommon.TraceID(objid.ObjectTraceID(string(key), window))
}

// AuditSpanID is the span ID of the audit event with the given audit ID: the apiserver may
// deliver an event twice (batch retries, webhook plus log file), and both copies get one ID.
func AuditSpanID(auditID string) pcommon.SpanID {
	var buf [128]byte
	b := append(buf[:0], domainAuditSpan...)
	b = append(b, auditID...)
	return spanID(sha256.Sum256(b))
}

// EventSpanID is the span ID of one occurrence of a Kubernetes Event: occurrence is the
// occurrence number, i.e. the series count (or the deprecated count), and "1" for an Event that
// has not recurred. Not the resourceVersion: a receiver that first sees an Event after it became a
// series cannot know the resourceVersion its first occurrence had, and must still derive the same
// ID for that occurrence as a receiver that saw it happen.
func EventSpanID(eventUID, occurrence string) pcommon.SpanID {
	var buf [160]byte
	b := append(buf[:0], domainEventSpan...)
	b = append(b, eventUID...)
	b = append(b, 0)
	b = append(b, occurrence...)
	return spanID(sha256.Sum256(b))
}

// EventSeriesSpanID is the span ID of the series span of a repeating Event: the span that covers
// its occurrences first..last, from start to end, described by the Event's version
// resourceVersion (docs/design.md, IDs). Every input that decides the span's content is hashed,
// so two observers that derive the same ID have built the same span: replicas, relists and
// restarts that saw the same versions agree, and an observer that saw different ones (a series
// cut elsewhere, a version missed) gets a different ID, never the same ID with other content.
func EventSeriesSpanID(eventUID, resourceVersion string, first, last int32, start, end time.Time) pcommon.SpanID {
	var buf [192]byte
	b := append(buf[:0], domainEventSeries...)
	b = append(b, eventUID...)
	b = append(b, 0)
	b = append(b, resourceVersion...)
	b = append(b, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(first))
	b = binary.BigEndian.AppendUint32(b, uint32(last))
	b = binary.BigEndian.AppendUint64(b, uint64(start.UnixNano()))
	b = binary.BigEndian.AppendUint64(b, uint64(end.UnixNano()))
	return spanID(sha256.Sum256(b))
}

// spanID and traceID never return the all-zero ID, which OTLP treats as "no ID".
func spanID(sum [32]byte) pcommon.SpanID {
	var id pcommon.SpanID
	copy(id[:], sum[:8])
	if id.IsEmpty() {
		id[7] = 1
	}
	return id
}

func traceID(sum [32]byte) pcommon.TraceID {
	var id pcommon.TraceID
	copy(id[:], sum[:16])
	if id.IsEmpty() {
		id[15] = 1
	}
	return id
}
