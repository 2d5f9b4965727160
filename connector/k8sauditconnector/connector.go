package k8sauditconnector

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/connector"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kubetrail/kubetrail/connector/k8sauditconnector/internal/metadata"
	"github.com/kubetrail/kubetrail/internal/auditconv"
	"github.com/kubetrail/kubetrail/internal/bytebudget"
	"github.com/kubetrail/kubetrail/internal/door"
	"github.com/kubetrail/kubetrail/internal/model"
)

// The connector's own values of the dropped counter's reason (the conversion's are
// auditconv.Reason*) and of the input attribute.
const (
	reasonUnknownFormat   = "unknown_format"
	reasonMalformedRecord = "malformed_record"
	reasonNoCluster       = "no_cluster"
	reasonTruncated       = "truncated"
	reasonRequestTooLarge = "request_too_large"
	inputConnector        = "connector"
)

var inputAttribute = auditconv.InputAttribute(inputConnector)

// auditConnector turns log records holding audit events into audit spans.
type auditConnector struct {
	cfg       *Config
	logger    *zap.Logger // sampled: one bad source can send thousands of bad records a second
	next      consumer.Traces
	telemetry *metadata.TelemetryBuilder
	inst      instruments
	conv      *auditconv.Converter
	rd        reader
	dedup     *dedup // nil when dedup_window is 0
	inFlight  *bytebudget.Budget
	merger    *merger    // nil when merge is off
	order     *sequencer // nil when offset_order is off
	now       func() time.Time
	formats   map[string]metric.MeasurementOption
	// orderReasons are the measurement options of offset_order_skips, by reason.
	orderReasons map[string]metric.MeasurementOption

	shapeLogger      *zap.Logger  // unsampled: dropRecord limits it to a line a minute
	lastShapeWarning atomic.Int64 // unix nanoseconds of the last shape warning
}

var _ connector.Logs = (*auditConnector)(nil)

func newAuditConnector(set connector.Settings, cfg *Config, next consumer.Traces) (*auditConnector, error) {
	tb, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, fmt.Errorf("creating telemetry: %w", err)
	}
	logger := set.Logger.WithOptions(zap.WrapCore(func(core zapcore.Core) zapcore.Core {
		return zapcore.NewSamplerWithOptions(core, time.Minute, 5, 0)
	}))
	c := &auditConnector{
		cfg: cfg, logger: logger, shapeLogger: set.Logger, next: next, telemetry: tb, now: time.Now,
		inst:     newInstruments(tb),
		formats:  map[string]metric.MeasurementOption{},
		inFlight: bytebudget.New(cfg.MaxInFlightBytes),
	}
	for _, f := range []string{formatNative, formatAKS, formatGKE} {
		c.formats[f] = metric.WithAttributeSet(attribute.NewSet(attribute.String("format", f)))
	}
	c.orderReasons = map[string]metric.MeasurementOption{}
	for _, r := range []string{orderSkipGap, orderSkipLate} {
		c.orderReasons[r] = metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", r)))
	}
	c.conv = auditconv.New(auditconv.Options{
		Settings:     cfg.Conversion,
		ScopeName:    metadata.ScopeName,
		ScopeVersion: set.BuildInfo.Version,
		Logger:       logger,
		Telemetry:    c.inst.conv,
	})
	c.rd = reader{conv: c.conv, format: cfg.Format}
	if cfg.Merge.Enabled {
		c.merger = newMerger(next, cfg.Merge.MaxBytes, func() time.Time { return c.now() },
			func(ctx context.Context, calls int) { c.inst.mergedCalls.Add(ctx, int64(calls)) },
			func(calls int, err error) {
				c.logger.Warn("Spans of several calls, handed on together, were refused for good: each call is refused with a retryable error and goes on alone for a minute, so that the one at fault gets its own answer",
					zap.Int("calls", calls), zap.Error(err))
			})
	}
	if cfg.OffsetOrder.MaxWait > 0 {
		c.order = newSequencer(cfg.OffsetOrder.MaxWait, func() time.Time { return c.now() },
			func(ctx context.Context, reason string) { c.inst.offsetOrderSkips.Add(ctx, 1, c.orderReasons[reason]) })
	}
	if cfg.DedupWindow > 0 {
		c.dedup = newDedup(cfg.DedupWindow, cfg.DedupMaxBytes, func() time.Time { return c.now() },
			func(d int64) { c.inst.dedupBytes.Add(context.Background(), d) })
	}
	return c, nil
}

func (c *auditConnector) Start(ctx context.Context, _ component.Host) error { return c.conv.Start(ctx) }

func (c *auditConnector) Shutdown(context.Context) error {
	c.telemetry.Shutdown()
	return c.conv.Close()
}

func (*auditConnector) Capabilities() consumer.Capabilities {
	return consumer.Capabilities{MutatesData: false}
}

// batch is the audit events of one ConsumeLogs call, by cluster, in arrival order.
type batch struct {
	clusters []string
	events   map[string][]auditconv.Event
	ids      []dedupKey // the events to remember once the spans are accepted
	pending  map[dedupKey]bool
}

// errInFlightSpent refuses a call while other calls hold max_in_flight_bytes: retryable, so
// that the sender (an OTLP client, the kafka receiver) tries again when they are done.
var errInFlightSpent = errors.New("k8s_audit connector: max_in_flight_bytes is held by other calls; retry later")

// callBudget is what one ConsumeLogs call holds of the in-flight budget.
type callBudget struct {
	budget *bytebudget.Budget
	held   int64
	alone  bool // the last refusal: the call alone would pass the whole budget
}

// charge reserves n bytes more for the call, or reports false.
func (cb *callBudget) charge(n int64) bool {
	if cb.held+n > cb.budget.Max() {
		cb.alone = true
		return false
	}
	if !cb.budget.Acquire(n) {
		cb.alone = false
		return false
	}
	cb.held += n
	return true
}

// ConsumeLogs converts the records' audit events into spans and hands them on in one call. Its
// error is the next consumer's, unchanged, so that a source that can redeliver (Kafka, Pub/Sub)
// does; a record that cannot be read is counted and logged, and the rest go on.
//
// What the call holds decoded is charged to max_in_flight_bytes: a call that alone would pass
// it converts the records that fit, hands their spans on and refuses the rest with a permanent
// error (counted as request_too_large); a call that finds the budget held by others is refused
// whole, before anything is handed on, with a retryable error.
func (c *auditConnector) ConsumeLogs(ctx context.Context, ld plog.Logs) (err error) {
	received := c.now()
	var st auditconv.Stats
	b := batch{events: map[string][]auditconv.Event{}, pending: map[dedupKey]bool{}}
	cb := &callBudget{budget: c.inFlight}
	rd := c.rd
	rd.charge = func(n int64) bool {
		if !cb.charge(n) {
			return false
		}
		c.inst.inFlightBytes.Add(ctx, n)
		return true
	}
	duplicates, refused := 0, 0
	n := 0
	defer func() {
		if p := recover(); p != nil {
			c.logger.Error("Converting audit events panicked", zap.Any("panic", p))
			err = consumererror.NewPermanent(fmt.Errorf("converting audit events: panic: %v", p))
			st.Drop(auditconv.ReasonInvalidEvent, len(b.ids))
		}
		c.inFlight.Release(cb.held)
		c.inst.inFlightBytes.Add(ctx, -cb.held)
		st.Record(ctx, c.inst.conv)
		if duplicates > 0 {
			c.inst.duplicateEvents.Add(ctx, int64(duplicates))
		}
	}()
	for _, rl := range ld.ResourceLogs().All() {
		res := rl.Resource().Attributes()
		for _, sl := range rl.ScopeLogs().All() {
			for _, lr := range sl.LogRecords().All() {
				if refused > 0 {
					refused++
					st.Drop(reasonRequestTooLarge, 1)
					continue
				}
				dups, over := c.read(ctx, &rd, &b, &st, lr, res)
				duplicates += dups
				switch {
				case over && cb.alone:
					refused = 1
					st.Drop(reasonRequestTooLarge, 1)
				case over:
					st, duplicates = auditconv.Stats{}, 0 // all of it comes again
					c.inst.inFlightRefused.Add(ctx, 1)
					if c.order != nil {
						// Its partition's later offsets need not wait for it: it comes again, late.
						c.order.done(c.order.wait(ctx))
					}
					return errInFlightSpent
				}
			}
		}
	}
	td := c.convert(ctx, &b, received, &st)
	if n = td.SpanCount(); n > 0 {
		// Marked as kubetrail's own door: k8s_object_link lets only such spans write the trail.
		if err := c.handOn(door.Trusted(ctx), td, cb.held); err != nil {
			if consumererror.IsPermanent(err) {
				st.Drop(auditconv.ReasonConsumerPermanent, n)
			}
			return err
		}
	}
	if c.dedup != nil {
		c.dedup.remember(b.ids)
	}
	if refused > 0 {
		c.logger.Warn("Refusing log records past what one call may hold decoded: send smaller batches, or raise max_in_flight_bytes",
			zap.Int("records", refused), zap.Int64("max_in_flight_bytes", c.inFlight.Max()))
		// InvalidArgument: the sender's request is too large, which the OTLP receiver answers
		// 400 (gRPC and HTTP); a permanent error without a status would be a 500.
		return consumererror.NewPermanent(status.Errorf(codes.InvalidArgument,
			"k8s_audit connector: %d log records past max_in_flight_bytes (%d bytes decoded) refused", refused, c.inFlight.Max()))
	}
	return nil
}

// convert turns the batch's events into spans. A call from the kafka receiver converts after
// the offsets before it in its partition (offset_order), so that an object's writes are diffed
// in the order they were written even when several of its messages are in flight together.
func (c *auditConnector) convert(ctx context.Context, b *batch, received time.Time, st *auditconv.Stats) ptrace.Traces {
	if c.order != nil {
		t := c.order.wait(ctx)
		defer c.order.done(t)
	}
	td := ptrace.NewTraces()
	for _, cluster := range b.clusters {
		events := b.events[cluster]
		c.conv.RecordLag(ctx, events, received, inputAttribute)
		part := c.conv.Convert(cluster, events, st)
		part.ResourceSpans().MoveAndAppendTo(td.ResourceSpans())
	}
	return td
}

// handOn gives the spans of a call to the next consumer, merged with concurrent calls' when
// merge is on; held is the call's decoded estimate.
func (c *auditConnector) handOn(ctx context.Context, td ptrace.Traces, held int64) error {
	if c.merger == nil {
		return c.next.ConsumeTraces(ctx, td)
	}
	return c.merger.consume(ctx, td, held)
}

// read decodes one record into the batch and returns how many of its events were duplicates,
// and whether it was refused for want of in-flight room (the call's budget says why).
func (c *auditConnector) read(ctx context.Context, rd *reader, b *batch, st *auditconv.Stats, lr plog.LogRecord, res pcommon.Map) (dups int, over bool) {
	d, err := rd.read(lr, res)
	if errors.Is(err, auditconv.ErrOverBudget) {
		return 0, true
	}
	if err != nil {
		c.dropRecord(st, err)
		return 0, false
	}
	c.inst.logRecords.Add(ctx, 1, c.formats[d.format])
	cluster := c.clusterOf(lr.Attributes(), res, d.cluster)
	if cluster == "" {
		st.Drop(reasonNoCluster, max(len(d.events), 1))
		c.logger.Warn("Dropping audit events whose cluster is unknown or not a valid cluster name",
			zap.String("cluster_attribute", c.cfg.ClusterAttribute), zap.Int("events", len(d.events)))
		return 0, false
	}
	for _, ev := range d.events {
		if c.dedup != nil && auditconv.DedupAuditID(ev.AuditID) && becomesSpan(&ev) {
			key := c.dedup.key(cluster, ev.AuditID)
			if b.pending[key] || c.dedup.seen(key) {
				dups++
				continue
			}
			b.pending[key] = true
			b.ids = append(b.ids, key)
		}
		if _, ok := b.events[cluster]; !ok {
			b.clusters = append(b.clusters, cluster)
		}
		b.events[cluster] = append(b.events[cluster], ev)
	}
	return dups, false
}

// dropRecord counts and logs a record that gave no audit event. A record of an unknown shape
// is logged once a minute with the shape it had (body type, attribute keys), since one
// misconfigured receiver sends nothing else; a truncated event names its auditID.
func (c *auditConnector) dropRecord(st *auditconv.Stats, err error) {
	var trunc *truncatedError
	switch {
	case errors.As(err, &trunc):
		st.Drop(reasonTruncated, 1)
		c.logger.Warn("Dropping an audit event that the log service cut short: raise the source's event size limit or take this cluster's events from another path",
			zap.String("reason", reasonTruncated), zap.String("audit_id", trunc.auditID))
	case errors.Is(err, errUnknownFormat):
		st.Drop(reasonUnknownFormat, 1)
		now, last := c.now().UnixNano(), c.lastShapeWarning.Load()
		if now-last >= int64(time.Minute) && c.lastShapeWarning.CompareAndSwap(last, now) {
			c.shapeLogger.Warn("Dropping log records of a shape that holds no audit event the connector reads (logged once a minute; otelcol_k8s_audit_dropped_events{reason=\"unknown_format\"} counts them all): check the receiver's format or encoding setting",
				zap.String("reason", reasonUnknownFormat), zap.Error(err))
		}
	default:
		st.Drop(reasonMalformedRecord, 1)
		c.logger.Warn("Dropping a log record that holds no readable audit event; the other records of its batch are kept",
			zap.String("reason", reasonMalformedRecord), zap.Error(err))
	}
}

// becomesSpan reports whether an event is of a stage that can become a span: the other stages
// of the same request share its auditID and must not count as its duplicates.
func becomesSpan(ev *auditconv.Event) bool {
	return ev.Stage == "ResponseComplete" || ev.Stage == "Panic"
}

// clusterOf is the record's cluster: the value of cluster_attribute when set and found (the
// record's attributes, then its resource's), else the configured cluster, else the one the
// envelope names (an AKS resourceId, a GKE entry's cluster_name); "" when the one chosen is not
// a valid cluster name. A configured cluster wins over an envelope's, so that these spans meet
// the k8s_event_spans spans of the same cluster, whatever the provider writes.
func (c *auditConnector) clusterOf(attrs, res pcommon.Map, envelope string) string {
	found := ""
	if name := c.cfg.ClusterAttribute; name != "" {
		for _, m := range []pcommon.Map{attrs, res} {
			if v, ok := m.Get(name); ok {
				found = clusterOf(firstString(v))
				break
			}
		}
	}
	if found == "" {
		found = c.cfg.Cluster
	}
	if found == "" {
		found = envelope
	}
	if !model.ValidClusterName(found) {
		return ""
	}
	return found
}

// firstString is a string attribute's value, or the first element of a slice (the awsfirehose
// receiver's aws.log.group.names).
func firstString(v pcommon.Value) string {
	if v.Type() == pcommon.ValueTypeSlice {
		if v.Slice().Len() == 0 {
			return ""
		}
		return v.Slice().At(0).AsString()
	}
	return v.AsString()
}

// clusterOf takes the cluster name out of the values providers put it in: an EKS log group
// (/aws/eks/<cluster>/cluster), an AKS resource ID (…/managedClusters/<cluster>, lower-cased),
// or the name.
func clusterOf(v string) string {
	if rest, ok := strings.CutPrefix(v, "/aws/eks/"); ok {
		name, _, _ := strings.Cut(rest, "/")
		return name
	}
	// Azure writes resource IDs upper-case (ARM names are case-insensitive); the cluster's
	// name, as kubectl and the chart know it, is lower-case.
	lower := strings.ToLower(v)
	if i := strings.LastIndex(lower, "/managedclusters/"); i >= 0 {
		name, _, _ := strings.Cut(lower[i+len("/managedclusters/"):], "/")
		return name
	}
	return v
}
