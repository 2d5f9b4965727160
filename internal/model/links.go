package model

import (
	"encoding/hex"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// AttrLinkType says why a span links to another; its values are the LinkType* constants. Every
// component writes the same names (the component READMEs list which links each one adds).
const (
	AttrLinkType = "kubetrail.link.type"
	// LinkTypeConflict links a write refused with 409 Conflict to the write that won the race.
	LinkTypeConflict = "conflict"
	// LinkTypePreviousWindow links an object span to the same object's span of the window before.
	LinkTypePreviousWindow = "previous_window"
	// LinkTypeOwner links an activity span to its owner's object span when the object's
	// assignment in this window was fixed before the owner was known (first writer wins).
	LinkTypeOwner = "owner"
	// LinkTypeTraceContext links an audit span, and its object's span, to the trace context the
	// object carried in its trace-context annotation.
	LinkTypeTraceContext = "trace_context"
	// LinkTypeLinkedSpan links a linked span (SpanTypeLinked) to the span of another component
	// that links to the object's trace context.
	LinkTypeLinkedSpan = "linked_span"
	// LinkTypeAPIServerRequest links an audit span and the apiserver's own request span of the
	// same audit ID (the later one to the earlier one).
	LinkTypeAPIServerRequest = "apiserver_request"
	// LinkTypeRelated links an event span to the object span, in the span's window, of the
	// Event's related object (the Node of a scheduling Event, the PVC of a mount failure).
	LinkTypeRelated = "related"
	// LinkTypeContinuation links an object's span in a continuation trace (a trace that goes on
	// from one past max_spans_per_trace) to the object's span in the trace before.
	LinkTypeContinuation = "continuation"
	// LinkTypeCaller links a controller span to the span its caller was in when it started
	// the work on the object (pkg/objecttrace).
	LinkTypeCaller = "caller"
)

// AttrTraceContinues is, on an object span in a continuation trace, the ID (hex) of the trace it
// goes on from.
const AttrTraceContinues = "kubetrail.trace.continues"

// AttrTracePlacedIn is, on an object span in the object's derived trace, the ID (hex) of the trace
// the object's window was placed in instead: the trace a trace-context annotation named. The span
// is a pointer for readers that compute derived trace IDs; the object's spans are in that trace.
const AttrTracePlacedIn = "kubetrail.trace.placed_in"

// The object annotations that carry a trace context.
const (
	// AnnotationTraceparent carries a W3C traceparent as KEP-5915 ("Standardize async trace
	// context propagation") names it: the propagator's key under tracing.k8s.io/. Its
	// ".0", ".1", … forms carry further contexts, read as further links.
	AnnotationTraceparent = "tracing.k8s.io/traceparent"
	// AnnotationTracestate carries the W3C tracestate of AnnotationTraceparent's context (and
	// ".0", ".1", … of the indexed ones).
	AnnotationTracestate = "tracing.k8s.io/tracestate"
	// AnnotationLegacyTraceContext is the key of the object-lifecycle tracing KEP (647) that
	// KEP-5915 supersedes: still read, no longer written.
	AnnotationLegacyTraceContext = "trace.kubernetes.io/context"
)

// ValidTracestate says whether v is a W3C tracestate (list members key=value, at most 32, keys
// and values of the allowed characters): what a link may carry as its trace state. At most 512
// bytes, the length W3C lets a propagator cut at.
func ValidTracestate(v string) bool {
	if len(v) > 512 {
		return false
	}
	_, err := trace.ParseTraceState(v)
	return err == nil
}

// DefaultTraceContextAnnotations are the keys read by default, in the order their contexts are
// linked (the first one a root object's window may be placed in).
func DefaultTraceContextAnnotations() []string {
	return []string{AnnotationTraceparent, AnnotationLegacyTraceContext}
}

// TracestateKeyOf is the tracestate key that goes with a traceparent key: for a key
// whose name is "traceparent" (KEP-5915's, or another prefix's), the same prefix's
// "tracestate"; "" for others (the legacy key carries a traceparent only).
func TracestateKeyOf(key string) string {
	prefix, ok := strings.CutSuffix(key, "/traceparent")
	if !ok {
		return ""
	}
	return prefix + "/tracestate"
}

// AttrNodeName is the node a Pod is bound to (semantic conventions' k8s.node.name).
const AttrNodeName = string(semconv.K8SNodeNameKey)

// Reasons ParseTraceparent gives for a value it refuses.
const (
	TraceparentBadLength  = "length"        // shorter than a version-00 traceparent
	TraceparentBadFormat  = "format"        // dashes misplaced, or upper-case or non-hex digits
	TraceparentBadVersion = "version"       // version ff, which W3C forbids
	TraceparentZeroID     = "zero_id"       // an all-zero trace ID or parent ID
	TraceparentTrailing   = "trailing_data" // version 00 with data after the flags
)

// TraceContext is a parsed W3C traceparent.
type TraceContext struct {
	TraceID pcommon.TraceID
	SpanID  pcommon.SpanID
	Flags   uint8
}

// ParseTraceparent parses a W3C traceparent value ("00-<32 hex>-<16 hex>-<2 hex>"). It returns
// the reason (a Traceparent* constant) when the value is malformed. Versions above 00 are read
// by their 00 prefix, as the W3C specification asks of a parser that knows only 00.
func ParseTraceparent(v string) (TraceContext, string) {
	const size = 55
	var tc TraceContext
	if len(v) < size {
		return tc, TraceparentBadLength
	}
	if v[2] != '-' || v[35] != '-' || v[52] != '-' ||
		!lowerHex(v[0:2]) || !lowerHex(v[3:35]) || !lowerHex(v[36:52]) || !lowerHex(v[53:55]) {
		return tc, TraceparentBadFormat
	}
	var version [1]byte
	_, _ = hex.Decode(version[:], []byte(v[0:2]))
	switch {
	case version[0] == 0xff:
		return tc, TraceparentBadVersion
	case len(v) > size && version[0] == 0:
		return tc, TraceparentTrailing
	case len(v) > size && v[size] != '-':
		return tc, TraceparentBadFormat
	}
	var flags [1]byte
	_, _ = hex.Decode(tc.TraceID[:], []byte(v[3:35]))
	_, _ = hex.Decode(tc.SpanID[:], []byte(v[36:52]))
	_, _ = hex.Decode(flags[:], []byte(v[53:55]))
	tc.Flags = flags[0]
	if tc.TraceID.IsEmpty() || tc.SpanID.IsEmpty() {
		return TraceContext{}, TraceparentZeroID
	}
	return tc, ""
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
