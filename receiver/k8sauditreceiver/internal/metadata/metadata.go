// Package metadata holds the k8s_audit receiver's type, stability and own telemetry. It is
// written by hand because mdatagen is not available to this build; it keeps mdatagen's shape so
// that generating it later changes no caller.
package metadata

import (
	"context"
	"errors"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

var (
	Type      = component.MustNewType("k8s_audit")
	ScopeName = "github.com/kubetrail/kubetrail/receiver/k8sauditreceiver"
)

const TracesStability = component.StabilityLevelAlpha

// Reasons recorded on the rejected-requests counter.
const (
	ReasonMalformedJSON   = "malformed_json"
	ReasonWrongKind       = "wrong_kind"
	ReasonTooLarge        = "too_large"
	ReasonReadError       = "read_error"
	ReasonBadEncoding     = "bad_encoding"
	ReasonMethod          = "method_not_allowed"
	ReasonNotFound        = "not_found"
	ReasonNoCluster       = "no_cluster"
	ReasonPipelineBusy    = "pipeline_refused"
	ReasonPipelineFailure = "pipeline_failed"
	ReasonInFlightBytes   = "in_flight_bytes"
	// ReasonClientNotAllowed: a verified client certificate whose names are not in
	// allowed_client_names (403).
	ReasonClientNotAllowed = "client_not_allowed"
)

// Reasons recorded on the filtered-events and dropped-events counters.
const (
	ReasonStage             = "stage"
	ReasonReadVerb          = "read_verb"
	ReasonVerb              = "verb"
	ReasonNonResource       = "non_resource"
	ReasonExcludedResource  = "excluded_resource"
	ReasonExcludedUserAgent = "excluded_user_agent"
	ReasonInvalidEvent      = "invalid_event"
	ReasonInvalidTimestamp  = "invalid_timestamp"
	ReasonMalformedLine     = "malformed_line"
	ReasonLineTooLong       = "line_too_long"
	ReasonConsumerPermanent = "consumer_permanent"
)

// Reasons recorded on the diff-cache evictions counter.
const (
	// ReasonEvictedCount: the least recently used object left to keep diff_cache_size.
	ReasonEvictedCount = "count"
	// ReasonEvictedBytes: the least recently used object left to keep diff_cache_max_bytes.
	ReasonEvictedBytes = "bytes"
	// ReasonEvictedTooLarge: a body larger on its own than diff_cache_max_bytes was not kept.
	ReasonEvictedTooLarge = "too_large"
)

// TelemetryBuilder holds the receiver's own instruments, built on the component's
// MeterProvider like mdatagen's generated builder.
type TelemetryBuilder struct {
	// RejectedRequests counts webhook requests answered with an error, by reason.
	RejectedRequests metric.Int64Counter
	// FilteredEvents counts audit events deliberately not turned into spans, by reason.
	FilteredEvents metric.Int64Counter
	// DroppedEvents counts audit events lost despite being wanted, by reason.
	DroppedEvents metric.Int64Counter
	// FileLines counts audit log lines read from files.
	FileLines metric.Int64Counter
	// DiffCacheObjects is the number of object bodies held for field diffs.
	DiffCacheObjects metric.Int64UpDownCounter
	// InFlightBytes is the body bytes the webhook is reading, decoding and converting now.
	InFlightBytes metric.Int64UpDownCounter
	// DiffCacheBytes is the estimated size of what the diff cache holds.
	DiffCacheBytes metric.Int64UpDownCounter
	// DiffCacheEvictions counts objects (or bodies) the diff cache let go to stay bounded, by reason.
	DiffCacheEvictions metric.Int64Counter
	// TraceContextInvalid counts malformed trace-context annotations ignored, by reason.
	TraceContextInvalid metric.Int64Counter
}

// NewTelemetryBuilder creates the instruments on settings.MeterProvider.
func NewTelemetryBuilder(settings component.TelemetrySettings) (*TelemetryBuilder, error) {
	meter := settings.MeterProvider.Meter(ScopeName)
	var tb TelemetryBuilder
	var errs, err error
	tb.RejectedRequests, err = meter.Int64Counter("otelcol_k8s_audit_rejected_requests",
		metric.WithDescription("Webhook requests answered with an error status, by reason."),
		metric.WithUnit("{requests}"))
	errs = errors.Join(errs, err)
	tb.FilteredEvents, err = meter.Int64Counter("otelcol_k8s_audit_filtered_events",
		metric.WithDescription("Audit events not turned into spans by configuration or by design (stage, verb, exclusions), by reason."),
		metric.WithUnit("{events}"))
	errs = errors.Join(errs, err)
	tb.DroppedEvents, err = meter.Int64Counter("otelcol_k8s_audit_dropped_events",
		metric.WithDescription("Audit events lost: unparseable, invalid, or permanently refused by the pipeline, by reason."),
		metric.WithUnit("{events}"))
	errs = errors.Join(errs, err)
	tb.FileLines, err = meter.Int64Counter("otelcol_k8s_audit_file_lines",
		metric.WithDescription("Audit log lines read from files."),
		metric.WithUnit("{lines}"))
	errs = errors.Join(errs, err)
	tb.DiffCacheObjects, err = meter.Int64UpDownCounter("otelcol_k8s_audit_diff_cache_objects",
		metric.WithDescription("Object bodies held in the last-body cache for field diffs."),
		metric.WithUnit("{objects}"))
	errs = errors.Join(errs, err)
	tb.InFlightBytes, err = meter.Int64UpDownCounter("otelcol_k8s_audit_in_flight_bytes",
		metric.WithDescription("Webhook body bytes being read, decoded and converted now (bounded by max_in_flight_bytes)."),
		metric.WithUnit("By"))
	errs = errors.Join(errs, err)
	tb.DiffCacheBytes, err = meter.Int64UpDownCounter("otelcol_k8s_audit_diff_cache_bytes",
		metric.WithDescription("Estimated bytes held by the last-body cache: bodies (JSON, or parsed for the most recent), writes kept for conflict links, and the entries themselves."),
		metric.WithUnit("By"))
	errs = errors.Join(errs, err)
	tb.DiffCacheEvictions, err = meter.Int64Counter("otelcol_k8s_audit_diff_cache_evictions",
		metric.WithDescription("Objects evicted from the last-body cache to stay within diff_cache_size (count) or diff_cache_max_bytes (bytes), and bodies not kept because one alone exceeds diff_cache_max_bytes (too_large), by reason."),
		metric.WithUnit("{evictions}"))
	errs = errors.Join(errs, err)
	tb.TraceContextInvalid, err = meter.Int64Counter("otelcol_k8s_audit_trace_context_invalid",
		metric.WithDescription("Trace-context annotations ignored because their value is not a W3C traceparent, by reason (length, format, version, zero_id, trailing_data)."),
		metric.WithUnit("{annotations}"))
	errs = errors.Join(errs, err)
	return &tb, errs
}

// Reason is the attribute set of a counter increment with the given reason.
func Reason(reason string) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", reason)))
}

// Add is a convenience for counting n items with a reason; it ignores n <= 0.
func Add(ctx context.Context, c metric.Int64Counter, n int, reason string) {
	if n > 0 {
		c.Add(ctx, int64(n), Reason(reason))
	}
}
