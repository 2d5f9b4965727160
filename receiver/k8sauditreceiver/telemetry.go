package k8sauditreceiver

import (
	"context"

	"go.opentelemetry.io/otel/metric"

	"github.com/kubetrail/kubetrail/internal/auditconv"
)

// The values of the reason attribute on the receiver's counters. The counters themselves are
// generated from metadata.yaml (internal/metadata), which lists these values per counter for
// documentation.md: a value added here belongs in that list too, and in reasons_test.go, whose
// TestReasonsMatchMetadata compares the two.
const (
	// otelcol_k8s_audit_rejected_requests
	reasonMalformedJSON   = "malformed_json"
	reasonWrongKind       = "wrong_kind"
	reasonTooLarge        = "too_large"
	reasonReadError       = "read_error"
	reasonBadEncoding     = "bad_encoding"
	reasonMethod          = "method_not_allowed"
	reasonNotFound        = "not_found"
	reasonNoCluster       = "no_cluster"
	reasonPipelineBusy    = "pipeline_refused"
	reasonPipelineFailure = "pipeline_failed"
	reasonInFlightBytes   = "in_flight_bytes"
	// reasonTooManyEvents: an EventList with more items than max_events_per_request (413).
	reasonTooManyEvents = "too_many_events"
	// reasonTooManyValues: an object body whose values, indexed, would hold more than
	// max_in_flight_bytes on their own (413).
	reasonTooManyValues = "too_many_values"
	// reasonClientNotAllowed: a verified client certificate whose names are not in
	// allowed_client_names (403 on rejected_requests, which the TLS handshake leaves for a
	// request without a verified chain; the handshake's refusals are refused_connections).
	reasonClientNotAllowed = "client_not_allowed"
	// reasonTooSlow: a body that arrived slower than min_body_rate (408).
	reasonTooSlow = "too_slow"

	// otelcol_k8s_audit_refused_connections (and reasonClientNotAllowed)
	// reasonTooManyConnections: a connection past max_connections, closed as accepted.
	reasonTooManyConnections = "too_many_connections"

	// otelcol_k8s_audit_dropped_events
	// (and the conversion's own reasons, auditconv.Reason*)
	reasonMalformedLine = "malformed_line"
	reasonLineTooLong   = "line_too_long"

	// the input attribute of otelcol_k8s_audit_receive_lag
	inputNameWebhook = "webhook"
	inputNameFile    = "file"
)

// addWithReason counts n items with a reason; it ignores n <= 0.
func addWithReason(ctx context.Context, c metric.Int64Counter, n int, reason string) {
	auditconv.AddWithReason(ctx, c, n, reason)
}
