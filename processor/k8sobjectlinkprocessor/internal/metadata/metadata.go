// Package metadata holds the k8s_object_link processor's identity (type, stability, scope) and its
// own telemetry. It is written by hand: mdatagen is not available to this project.
package metadata

import (
	"errors"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/otel/metric"
)

var (
	// Type is the component type users write in their configuration.
	Type = component.MustNewType("k8s_object_link")
	// ScopeName is the instrumentation scope of the object spans and of the processor's metrics.
	ScopeName = "github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor"
)

// TracesStability is the stability of the traces signal.
const TracesStability = component.StabilityLevelAlpha

// Attribute keys and values of the processor's own metrics.
const (
	AttrResult = "result" // assignments: created|reused; owner look-ups: hit|miss|error
	AttrSource = "source" // owner look-ups: span|relation|apiserver
	AttrReason = "reason" // every drop, release or error says why
)

// Telemetry is the processor's own instruments. Every counter that records a drop, a release or
// an error carries a reason attribute.
type Telemetry struct {
	Assignments       metric.Int64Counter
	ObjectSpans       metric.Int64Counter
	OwnerLookups      metric.Int64Counter
	SpansHeld         metric.Int64Counter
	SpansReleased     metric.Int64Counter
	SpansDropped      metric.Int64Counter
	HeldSpans         metric.Int64UpDownCounter
	IDMapEvictions    metric.Int64Counter
	RedisRoundTrips   metric.Int64Counter
	RedisErrors       metric.Int64Counter
	RedisLatency      metric.Float64Histogram
	RedisReconciled   metric.Int64Counter
	SpansIn, SpansOut metric.Int64Counter
	WindowMismatches  metric.Int64Counter
	APIServerJoins    metric.Int64Counter
	JoinEvictions     metric.Int64Counter
}

// NewTelemetry builds the instruments on the component's MeterProvider.
func NewTelemetry(set component.TelemetrySettings) (*Telemetry, error) {
	m := set.MeterProvider.Meter(ScopeName)
	var t Telemetry
	var errs []error
	counter := func(name, desc, unit string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit(unit))
		errs = append(errs, err)
		return c
	}
	t.Assignments = counter("otelcol_k8s_object_link_assignments",
		"Object-window assignments, by result: created (this replica wrote it first) or reused.", "{assignment}")
	t.ObjectSpans = counter("otelcol_k8s_object_link_object_spans_emitted",
		"Object spans emitted (once per object per window across replicas).", "{span}")
	t.OwnerLookups = counter("otelcol_k8s_object_link_owner_lookups",
		"Owner look-ups by source (relation, apiserver) and result (hit, miss, error).", "{lookup}")
	t.SpansHeld = counter("otelcol_k8s_object_link_spans_held",
		"Activity spans held back while their object's owner may still be in flight.", "{span}")
	t.SpansReleased = counter("otelcol_k8s_object_link_spans_released",
		"Held spans released, by reason: owner_found, timeout, shutdown.", "{span}")
	t.SpansDropped = counter("otelcol_k8s_object_link_spans_dropped",
		"Spans dropped, by reason: duplicate (the same derived span ID seen within the TTL), owed_full, shutdown_refused.", "{span}")
	t.IDMapEvictions = counter("otelcol_k8s_object_link_id_map_evictions",
		"In-memory ID map entries evicted before their TTL, by reason: max_entries, max_bytes.", "{entry}")
	t.RedisRoundTrips = counter("otelcol_k8s_object_link_redis_round_trips",
		"Pipelined round trips to Redis.", "{round_trip}")
	t.RedisErrors = counter("otelcol_k8s_object_link_redis_errors",
		"Redis errors, by reason: unavailable, timeout, auth, reply, pending_full.", "{error}")
	t.RedisReconciled = counter("otelcol_k8s_object_link_redis_reconciled",
		"Records written from memory to Redis after an outage, by result: written, conflict.", "{record}")
	t.WindowMismatches = counter("otelcol_k8s_object_link_window_mismatches",
		"Batches whose first activity span a receiver derived with another window than this processor's.", "{batch}")
	t.APIServerJoins = counter("otelcol_k8s_object_link_apiserver_joins",
		"Apiserver request spans and audit spans joined by a link, by source: memory or redis.", "{join}")
	t.JoinEvictions = counter("otelcol_k8s_object_link_apiserver_join_evictions",
		"Entries of the apiserver join map that left unjoined, by reason: expired, max_entries, max_bytes.", "{entry}")
	t.SpansIn = counter("otelcol_k8s_object_link_spans_in", "Spans received.", "{span}")
	t.SpansOut = counter("otelcol_k8s_object_link_spans_out", "Spans passed on (activity, object and pass-through).", "{span}")
	var err error
	t.HeldSpans, err = m.Int64UpDownCounter("otelcol_k8s_object_link_held_spans",
		metric.WithDescription("Spans currently held."), metric.WithUnit("{span}"))
	errs = append(errs, err)
	t.RedisLatency, err = m.Float64Histogram("otelcol_k8s_object_link_redis_latency",
		metric.WithDescription("Latency of one pipelined Redis round trip."), metric.WithUnit("ms"),
		metric.WithExplicitBucketBoundaries(0.25, 0.5, 1, 2, 5, 10, 25, 50, 100, 250, 1000))
	errs = append(errs, err)
	return &t, errors.Join(errs...)
}
