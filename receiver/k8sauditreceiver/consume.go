package k8sauditreceiver

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/receiver/receiverhelper"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/kubetrail/kubetrail/internal/auditconv"
	"github.com/kubetrail/kubetrail/internal/door"
	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/receiver/k8sauditreceiver/internal/metadata"
)

// The input attribute of otelcol_k8s_audit_receive_lag, one per door of this receiver.
var (
	inputWebhook = auditconv.InputAttribute(inputNameWebhook)
	inputFile    = auditconv.InputAttribute(inputNameFile)
)

// consume converts a batch of one cluster and hands it to the next consumer, counting what
// was filtered and dropped and how late the events arrived. It returns the span count and the
// consumer's error; a panic in the converter becomes a permanent error, since the same events
// would panic again.
func (r *auditReceiver) consume(ctx context.Context, obs *receiverhelper.ObsReport, input metric.MeasurementOption, cluster string, events []auditconv.Event) (n int, err error) {
	r.conv.RecordLag(ctx, events, time.Now(), input)
	ctx = obs.StartTracesOp(ctx)
	var st auditconv.Stats
	defer func() {
		if p := recover(); p != nil {
			r.set.Logger.Error("Converting audit events panicked", zap.Any("panic", p), zap.String("cluster", cluster))
			err = consumererror.NewPermanent(fmt.Errorf("converting %d audit events of cluster %s: panic: %v", len(events), cluster, p))
			st.Drop(auditconv.ReasonInvalidEvent, len(events))
		}
		st.Record(ctx, r.tel)
		obs.EndTracesOp(ctx, "audit", n, err)
	}()
	td := r.conv.Convert(cluster, events, &st)
	n = td.SpanCount()
	if n == 0 {
		return 0, nil
	}
	// Marked as kubetrail's own door: k8s_object_link lets only such spans write the trail.
	err = r.next.ConsumeTraces(door.Trusted(ctx), td)
	if err != nil && consumererror.IsPermanent(err) {
		st.Drop(auditconv.ReasonConsumerPermanent, n)
	}
	return n, err
}

// consumeEdge hands a batch of one cluster, its events as received, to the edge output: a log
// record each, its body the event's JSON bytes, grouped in one ResourceLogs per object whose
// resource is k8s.cluster.name and the object's key (API group, resource, namespace, name), or
// with edge.shards in one ResourceLogs per shard of objects whose resource is k8s.cluster.name
// and kubetrail.edge.shard, so that an exporter partitioning by resource attributes (kafka's
// partition_logs_by_resource_attributes) keeps each object's events in one partition, in order.
// It returns the record count and the consumer's error.
func (r *auditReceiver) consumeEdge(ctx context.Context, obs *receiverhelper.ObsReport, cluster string, events []auditconv.RawEvent) (n int, err error) {
	if len(events) == 0 {
		return 0, nil
	}
	ctx = obs.StartLogsOp(ctx)
	ld := edgeLogs(cluster, events, time.Now(), r.set.BuildInfo.Version, r.cfg.Edge.Shards)
	n = ld.LogRecordCount()
	err = r.edge.ConsumeLogs(ctx, ld)
	obs.EndLogsOp(ctx, "audit", n, err)
	return n, err
}

// attrEdgeShard is the resource attribute of the edge output's groups with edge.shards.
const attrEdgeShard = "kubetrail.edge.shard"

// edgeLogs builds the logs of consumeEdge; observed is every record's observed time, shards is
// edge.shards.
func edgeLogs(cluster string, events []auditconv.RawEvent, observed time.Time, version string, shards int) plog.Logs {
	ld := plog.NewLogs()
	rls := ld.ResourceLogs()
	byKey := make(map[auditconv.ObjectKey]plog.LogRecordSlice, 8)
	var byShard map[int]plog.LogRecordSlice
	if shards > 0 {
		byShard = make(map[int]plog.LogRecordSlice, min(shards, len(events)))
	}
	ts := pcommon.NewTimestampFromTime(observed)
	for _, ev := range events {
		var records plog.LogRecordSlice
		var ok bool
		shard := 0
		if shards > 0 {
			shard = edgeShard(ev.Key, shards)
			records, ok = byShard[shard]
		} else {
			records, ok = byKey[ev.Key]
		}
		if !ok {
			rl := rls.AppendEmpty()
			attrs := rl.Resource().Attributes()
			attrs.EnsureCapacity(5)
			attrs.PutStr(model.AttrClusterName, cluster)
			if shards > 0 {
				attrs.PutInt(attrEdgeShard, int64(shard))
			} else {
				for _, kv := range [...]struct{ k, v string }{
					{model.AttrObjectAPIGroup, ev.Key.APIGroup}, {model.AttrObjectResource, ev.Key.Resource},
					{model.AttrNamespaceName, ev.Key.Namespace}, {model.AttrObjectName, ev.Key.Name},
				} {
					if kv.v != "" {
						attrs.PutStr(kv.k, kv.v)
					}
				}
			}
			sl := rl.ScopeLogs().AppendEmpty()
			sl.Scope().SetName(metadata.ScopeName)
			sl.Scope().SetVersion(version)
			records = sl.LogRecords()
			if shards > 0 {
				byShard[shard] = records
			} else {
				byKey[ev.Key] = records
			}
		}
		lr := records.AppendEmpty()
		lr.SetEventName(auditconv.RawEventName)
		lr.SetObservedTimestamp(ts)
		// The body is the event's text in the request's one copy (shareCopy), not a copy of its
		// own. A string and not bytes: the kafka exporter copies each ResourceLogs into a message
		// of its own (partition_logs_by_resource_attributes), which copies a bytes value's bytes but
		// only a string's header; in otlp_json the event is then its text, not base64. Protobuf
		// carries it unchecked, as every Go reader of OTLP does; the apiserver's JSON is UTF-8
		// (encoding/json writes nothing else).
		lr.Body().SetStr(auditconv.TextView(ev.Raw))
	}
	return ld
}

// edgeShard is the shard of an object among shards: FNV-1a (64 bits) of its key's parts, each
// ended by a zero byte, mixed by murmur3's finalizer, modulo shards. It is the same in every edge
// replica and release, so an object's events keep one Kafka key while edge.shards stays the
// same. The finalizer matters: FNV-1a's low bits depend only on the low bits of the input bytes,
// so names that differ in a suffix crowd into a few residues of an even shard count.
func edgeShard(k auditconv.ObjectKey, shards int) int {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for _, part := range [...]string{k.APIGroup, k.Resource, k.Namespace, k.Name} {
		for i := 0; i < len(part); i++ {
			h = (h ^ uint64(part[i])) * prime
		}
		h *= prime // the zero byte between parts: ("a", "b/c") is not ("a/b", "c")
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return int(h % uint64(shards))
}
