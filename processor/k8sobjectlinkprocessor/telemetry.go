package k8sobjectlinkprocessor

// The attribute keys of the processor's own metrics. The instruments are generated from
// metadata.yaml (internal/metadata), which lists each attribute's values per metric for
// documentation.md.
const (
	attrResult = "result" // assignments: created|reused; owner look-ups: hit|miss|error; reconciled: written|conflict; trace state: followed|invalid
	attrSource = "source" // owner look-ups: relation|apiserver; apiserver joins: memory|redis
	attrReason = "reason" // every drop, release, eviction or error says why
	attrSpan   = "span"   // trace continuations: activity|continuation
)

// The values of those attributes, per attribute of metadata.yaml. A value added here belongs in
// metadata.yaml too, and in reasons_test.go, whose TestAttributeValuesMatchMetadata compares the two.
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

	// reconcile_result (otelcol_k8s_object_link_redis_reconciled)
	resultWritten  = "written"
	resultConflict = "conflict" // another replica wrote a different value meanwhile

	// join_source (otelcol_k8s_object_link_apiserver_joins)
	sourceMemory = "memory"
	sourceRedis  = "redis"

	// trace_state_result (otelcol_k8s_object_link_trace_state_spans)
	resultFollowed = "followed"
	resultInvalid  = "invalid" // the kubetrail member did not decode

	// continued_span (otelcol_k8s_object_link_trace_continuations)
	spanActivity     = "activity"
	spanContinuation = "continuation"

	// drop_reason (otelcol_k8s_object_link_spans_dropped)
	reasonDuplicate       = "duplicate"
	reasonOwedFull        = "owed_full"
	reasonShutdownRefused = "shutdown_refused"
	reasonUntrustedClaim  = "untrusted_claim" // an untrusted door's span claiming to be kubetrail's

	// untrusted_result (otelcol_k8s_object_link_untrusted_spans)
	resultPassed  = "passed"
	resultWaiting = "waiting"

	// release_reason (otelcol_k8s_object_link_spans_released)
	reasonOwnerFound  = "owner_found"
	reasonHoldTimeout = "timeout"
	reasonShutdown    = "shutdown"
	reasonHoldFull    = "hold_full"

	// eviction_reason (otelcol_k8s_object_link_id_map_evictions) and join_eviction_reason
	// (otelcol_k8s_object_link_apiserver_join_evictions)
	reasonMaxEntries      = "max_entries"
	reasonMaxBytes        = "max_bytes"
	reasonJoinExpired     = "expired"
	reasonJoinPendingFull = "pending_full" // a Redis record that could not be queued for replay

	// redis_error_reason (otelcol_k8s_object_link_redis_errors)
	reasonUnavailable = "unavailable" // network error, connection refused, or a server-wide reply error
	reasonTimeout     = "timeout"     // a round trip or ping exceeded id_map.redis.timeout
	reasonAuth        = "auth"        // WRONGPASS, NOAUTH, NOPERM, ERR AUTH …, a bad database index
	reasonReply       = "reply"       // a reply error about one record (WRONGTYPE on a foreign key)
	reasonPendingFull = "pending_full"
)
