// Package metadata holds the k8s_event_spans receiver's type, stability and own telemetry. It is
// written by hand because mdatagen is not available to this build; it keeps mdatagen's shape so
// that generating it later changes no caller.
package metadata

import (
	"errors"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

var (
	Type      = component.MustNewType("k8s_event_spans")
	ScopeName = "github.com/kubetrail/kubetrail/receiver/k8seventsreceiver"
)

const TracesStability = component.StabilityLevelAlpha

// Reasons recorded on the dropped-events counter.
const (
	ReasonMissingRegarding  = "missing_regarding"
	ReasonMissingTime       = "missing_time"
	ReasonMissingUID        = "missing_uid"
	ReasonTooOld            = "too_old"
	ReasonConsumerPermanent = "consumer_permanent"
	ReasonCoalesced         = "coalesced"
)

// Reasons recorded on the duplicates counter.
const (
	DuplicateSameResourceVersion = "same_resource_version"
	DuplicateNoNewOccurrence     = "no_new_occurrence"
	DuplicateCheckpointed        = "checkpointed"
)

// Reasons recorded on the watch-restarts and errors counters.
const (
	RestartWatchClosed = "watch_closed"
	RestartStalled     = "stalled"
	RestartError       = "error"

	ErrorListWatch       = "list_watch"
	ErrorForbidden       = "forbidden"
	ErrorConsumer        = "consumer"
	ErrorCheckpointRead  = "checkpoint_read"
	ErrorCheckpointWrite = "checkpoint_write"
)

// ReasonKey is the attribute that carries the reason on every counter that has one.
const ReasonKey = "reason"

// TelemetryBuilder holds the receiver's own instruments, built on the component's MeterProvider
// like mdatagen's generated builder.
type TelemetryBuilder struct {
	// EventsReceived counts Event objects handed over by the list-watch (adds, updates, list items).
	EventsReceived metric.Int64Counter
	// SpansEmitted counts event spans accepted by the next consumer.
	SpansEmitted metric.Int64Counter
	// Duplicates counts Event versions that carried no new occurrence, by reason.
	Duplicates metric.Int64Counter
	// Dropped counts Events or occurrences that did not become spans although seen, by reason.
	Dropped metric.Int64Counter
	// WatchRestarts counts list-watch restarts, by reason.
	WatchRestarts metric.Int64Counter
	// Errors counts failures talking to the apiserver, the consumer or the storage, by reason.
	Errors metric.Int64Counter
	// TrackedEvents is the number of Events whose occurrence state is held in memory.
	TrackedEvents metric.Int64UpDownCounter
}

// NewTelemetryBuilder creates the instruments on settings.MeterProvider.
func NewTelemetryBuilder(settings component.TelemetrySettings) (*TelemetryBuilder, error) {
	meter := settings.MeterProvider.Meter(ScopeName)
	var tb TelemetryBuilder
	var errs, err error
	tb.EventsReceived, err = meter.Int64Counter("otelcol_k8s_event_spans_events_received",
		metric.WithDescription("Event objects delivered by the list-watch (list items, adds and updates)."),
		metric.WithUnit("{events}"))
	errs = errors.Join(errs, err)
	tb.SpansEmitted, err = meter.Int64Counter("otelcol_k8s_event_spans_spans_emitted",
		metric.WithDescription("Event occurrence spans accepted by the next consumer."),
		metric.WithUnit("{spans}"))
	errs = errors.Join(errs, err)
	tb.Duplicates, err = meter.Int64Counter("otelcol_k8s_event_spans_duplicates_suppressed",
		metric.WithDescription("Event versions not turned into spans because they carried no new occurrence, by reason."),
		metric.WithUnit("{events}"))
	errs = errors.Join(errs, err)
	tb.Dropped, err = meter.Int64Counter("otelcol_k8s_event_spans_dropped",
		metric.WithDescription("Events or occurrences seen but not emitted (malformed, too old, refused), by reason."),
		metric.WithUnit("{events}"))
	errs = errors.Join(errs, err)
	tb.WatchRestarts, err = meter.Int64Counter("otelcol_k8s_event_spans_watch_restarts",
		metric.WithDescription("List-watch restarts (watch closed or expired, stalled, error), by reason."),
		metric.WithUnit("{restarts}"))
	errs = errors.Join(errs, err)
	tb.Errors, err = meter.Int64Counter("otelcol_k8s_event_spans_errors",
		metric.WithDescription("Errors from the apiserver, the consumer or the checkpoint storage, by reason."),
		metric.WithUnit("{errors}"))
	errs = errors.Join(errs, err)
	tb.TrackedEvents, err = meter.Int64UpDownCounter("otelcol_k8s_event_spans_tracked_events",
		metric.WithDescription("Events whose occurrence state the receiver holds in memory."),
		metric.WithUnit("{events}"))
	errs = errors.Join(errs, err)
	return &tb, errs
}

// WithReason is the measurement option for a counter's reason attribute.
func WithReason(reason string) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(attribute.String(ReasonKey, reason)))
}
