package k8sobjectlinkprocessor

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/idmap"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/metadata"
)

// The attribute keys of the processor's own metrics. The instruments are generated from
// metadata.yaml (internal/metadata), which lists each attribute's values per metric for
// documentation.md.
const (
	attrResult = "result" // assignments: created|reused; owner look-ups: hit|miss|error; reconciled: written|conflict; trace state: followed|invalid
	attrSource = "source" // owner look-ups: relation|apiserver; apiserver joins: memory|redis
	attrReason = "reason" // every drop, release, eviction or error says why
	attrSpan   = "span"   // trace continuations: activity|continuation
	attrKind   = "kind"   // ID map marks: duplicate|graft|continuation
)

// The values of those attributes, per attribute of metadata.yaml. A value added here belongs in
// metadata.yaml too, and in reasons_test.go, whose TestAttributeValuesMatchMetadata compares the two.
// The ID map's own (eviction_reason, reconcile_result, redis_error_reason) are internal/idmap's,
// in its telemetry.go.
const (
	// assignment_result (otelcol_k8s_object_link_assignments)
	resultCreated = "created"
	resultReused  = "reused"

	// lookup_result and lookup_source (otelcol_k8s_object_link_owner_lookups)
	resultHit       = "hit" // the owner, or that the object is a root
	resultMiss      = "miss"
	resultError     = "error"
	resultForbidden = "forbidden" // RBAC: the resource's objects are not looked up for cache_ttl
	sourceRelation  = "relation"
	sourceAPIServer = "apiserver"

	// join_source (otelcol_k8s_object_link_apiserver_joins)
	sourceMemory = "memory"
	sourceRedis  = "redis"

	// trace_state_result (otelcol_k8s_object_link_trace_state_spans)
	resultFollowed = "followed"
	resultInvalid  = "invalid" // the kubetrail member did not decode

	// mark_kind (otelcol_k8s_object_link_id_map_marks)
	kindDuplicate    = "duplicate"
	kindGraft        = "graft"
	kindContinuation = "continuation"

	// continued_span (otelcol_k8s_object_link_trace_continuations)
	spanActivity     = "activity"
	spanContinuation = "continuation"

	// drop_reason (otelcol_k8s_object_link_spans_dropped)
	reasonDuplicate       = "duplicate"
	reasonOwedFull        = "owed_full"
	reasonShutdownRefused = "shutdown_refused"
	reasonUntrustedClaim  = "untrusted_claim" // an untrusted door's span claiming to be kubetrail's

	// mark_result (otelcol_k8s_object_link_pending_marks)
	resultTakenOver   = "taken_over"  // a pending mark past abandonAfter: the span passed on again
	resultUnconfirmed = "unconfirmed" // a confirmation past maxConfirms: the mark stays pending

	// untrusted_result (otelcol_k8s_object_link_untrusted_spans)
	resultPassed  = "passed"
	resultWaiting = "waiting"
	resultLinked  = "linked" // a linked span was emitted for it (linked.go)

	// release_reason (otelcol_k8s_object_link_spans_released)
	reasonOwnerFound  = "owner_found"
	reasonHoldTimeout = "timeout"
	reasonShutdown    = "shutdown"
	reasonHoldFull    = "hold_full"

	// join_eviction_reason (otelcol_k8s_object_link_apiserver_join_evictions), besides the ID
	// map's idmap.ReasonMaxEntries and idmap.ReasonMaxBytes
	reasonJoinExpired     = "expired"
	reasonJoinPendingFull = "pending_full" // a Redis record that could not be queued for replay
)

// idMapTelemetry records what the Redis ID map reports (idmap.Telemetry) on the processor's
// instruments.
type idMapTelemetry struct{ tel *metadata.TelemetryBuilder }

func (t idMapTelemetry) RedisError(reason string) {
	t.tel.K8sObjectLinkRedisErrors.Add(context.Background(), 1, metric.WithAttributes(attribute.String(attrReason, reason)))
}

func (t idMapTelemetry) RedisReset(ctx context.Context) { t.tel.K8sObjectLinkRedisResets.Add(ctx, 1) }

func (t idMapTelemetry) RedisRoundTrip(ctx context.Context, took time.Duration) {
	t.tel.K8sObjectLinkRedisRoundTrips.Add(ctx, 1)
	t.tel.K8sObjectLinkRedisLatency.Record(ctx, float64(took.Microseconds())/1000)
}

func (t idMapTelemetry) RedisReconciled(result string) {
	t.tel.K8sObjectLinkRedisReconciled.Add(context.Background(), 1, metric.WithAttributes(attribute.String(attrResult, result)))
}

// registerIDMapSize reports the in-memory ID map's records and estimated bytes (the memory
// backend, or the cache in front of Redis) and its marks as gauges, read when the metrics are
// collected.
func registerIDMapSize(tel *metadata.TelemetryBuilder, mem *idmap.MemoryStore) error {
	if err := tel.RegisterK8sObjectLinkIDMapRecordsCallback(func(_ context.Context, o metric.Int64Observer) error {
		n, _ := mem.Size()
		o.Observe(int64(n))
		return nil
	}); err != nil {
		return err
	}
	if err := tel.RegisterK8sObjectLinkIDMapMarksCallback(func(_ context.Context, o metric.Int64Observer) error {
		n := mem.Marks()
		o.Observe(int64(n.Duplicate), metric.WithAttributes(attribute.String(attrKind, kindDuplicate)))
		o.Observe(int64(n.Graft), metric.WithAttributes(attribute.String(attrKind, kindGraft)))
		o.Observe(int64(n.Continuation), metric.WithAttributes(attribute.String(attrKind, kindContinuation)))
		return nil
	}); err != nil {
		return err
	}
	return tel.RegisterK8sObjectLinkIDMapBytesCallback(func(_ context.Context, o metric.Int64Observer) error {
		_, b := mem.Size()
		o.Observe(b)
		return nil
	})
}
