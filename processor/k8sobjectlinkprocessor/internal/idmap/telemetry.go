package idmap

import (
	"context"
	"time"
)

// Telemetry is told what the Redis store does that the processor's own metrics count; the
// processor records it on its instruments (metadata.yaml: otelcol_k8s_object_link_redis_*). The
// memory store's evictions go to the callback NewMemoryStore takes.
type Telemetry interface {
	// RedisError: a failed round trip, ping or record operation, by reason (Reason*).
	RedisError(reason string)
	// RedisReset: Redis lost its records since this replica last looked.
	RedisReset(ctx context.Context)
	// RedisRoundTrip: one pipeline sent, and how long its answer took.
	RedisRoundTrip(ctx context.Context, took time.Duration)
	// RedisReconciled: one record replayed after an outage or a loss, by result (Result*).
	RedisReconciled(result string)
}

// The values the stores give their reasons and results. They are values of attributes of the
// processor's metadata.yaml, whose reasons_test.go compares the two: a value added here belongs
// there too.
const (
	// eviction_reason (otelcol_k8s_object_link_id_map_evictions)
	ReasonMaxEntries = "max_entries"
	ReasonMaxBytes   = "max_bytes"

	// reconcile_result (otelcol_k8s_object_link_redis_reconciled)
	ResultWritten  = "written"
	ResultConflict = "conflict" // another replica wrote a different value meanwhile

	// redis_error_reason (otelcol_k8s_object_link_redis_errors)
	ReasonUnavailable = "unavailable" // network error, connection refused, or a server-wide reply error
	ReasonTimeout     = "timeout"     // a round trip or ping exceeded id_map.redis.timeout
	ReasonAuth        = "auth"        // WRONGPASS, NOAUTH, NOPERM, ERR AUTH …, a bad database index
	ReasonReply       = "reply"       // a reply error about one record (WRONGTYPE on a foreign key)
	ReasonPendingFull = "pending_full"
)
