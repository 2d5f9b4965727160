package k8seventsreceiver

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// The values of the reason attribute on the receiver's counters. The counters themselves are
// generated from metadata.yaml (internal/metadata), which lists these values per counter for
// documentation.md: a value added here belongs in that list too, and in reasons_test.go, whose
// TestReasonsMatchMetadata compares the two.
const (
	// otelcol_k8s_event_spans_dropped
	reasonMissingRegarding  = "missing_regarding"
	reasonMissingTime       = "missing_time"
	reasonMissingUID        = "missing_uid"
	reasonTooOld            = "too_old"
	reasonConsumerPermanent = "consumer_permanent"
	reasonShutdownRefused   = "shutdown_refused"

	// otelcol_k8s_event_spans_duplicates_suppressed
	duplicateSameResourceVersion = "same_resource_version"
	duplicateNoNewOccurrence     = "no_new_occurrence"
	duplicateCheckpointed        = "checkpointed"

	// otelcol_k8s_event_spans_series_closed
	seriesQuiet    = "quiet"
	seriesWindow   = "window"
	seriesEvicted  = "evicted"
	seriesDeleted  = "deleted"
	seriesShutdown = "shutdown"

	// otelcol_k8s_event_spans_watch_restarts
	restartWatchClosed = "watch_closed"
	restartStalled     = "stalled"
	restartError       = "error"

	// otelcol_k8s_event_spans_errors
	errorListWatch       = "list_watch"
	errorForbidden       = "forbidden"
	errorConsumer        = "consumer"
	errorCheckpointRead  = "checkpoint_read"
	errorCheckpointWrite = "checkpoint_write"
)

// reasonKey is the attribute that carries the reason on every counter that has one.
const reasonKey = "reason"

// withReason is the measurement option for a counter's reason attribute.
func withReason(reason string) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(attribute.String(reasonKey, reason)))
}
