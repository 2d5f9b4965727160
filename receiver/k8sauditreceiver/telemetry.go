package k8sauditreceiver

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
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
	// reasonClientNotAllowed: a verified client certificate whose names are not in
	// allowed_client_names (403).
	reasonClientNotAllowed = "client_not_allowed"

	// otelcol_k8s_audit_filtered_events
	reasonStage             = "stage"
	reasonReadVerb          = "read_verb"
	reasonVerb              = "verb"
	reasonNonResource       = "non_resource"
	reasonExcludedResource  = "excluded_resource"
	reasonExcludedUserAgent = "excluded_user_agent"
	// reasonDryRun: a write made with ?dryRun=All (kubectl --dry-run=server) changed nothing.
	reasonDryRun = "dry_run"

	// otelcol_k8s_audit_dropped_events
	reasonInvalidEvent      = "invalid_event"
	reasonInvalidTimestamp  = "invalid_timestamp"
	reasonMalformedLine     = "malformed_line"
	reasonLineTooLong       = "line_too_long"
	reasonConsumerPermanent = "consumer_permanent"

	// otelcol_k8s_audit_diff_cache_evictions
	// reasonEvictedCount: the least recently used object left to keep diff_cache_size.
	reasonEvictedCount = "count"
	// reasonEvictedBytes: the least recently used object left to keep diff_cache_max_bytes.
	reasonEvictedBytes = "bytes"
	// reasonEvictedTooLarge: a body larger on its own than diff_cache_max_bytes was not kept.
	reasonEvictedTooLarge = "too_large"
)

// withReason is the measurement option for a counter's reason attribute.
func withReason(reason string) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", reason)))
}

// addWithReason counts n items with a reason; it ignores n <= 0.
func addWithReason(ctx context.Context, c metric.Int64Counter, n int, reason string) {
	if n > 0 {
		c.Add(ctx, int64(n), withReason(reason))
	}
}
