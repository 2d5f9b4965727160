package auditconv

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
)

// Options configure a Converter.
type Options struct {
	// Settings are the component's conversion keys.
	Settings Settings
	// ScopeName and ScopeVersion name the instrumentation scope of the spans: the component
	// that converted them.
	ScopeName    string
	ScopeVersion string
	// Logger reports refused events; give it a sampled core, since one bad client can send
	// thousands a second and each is counted anyway. Nil: no logging.
	Logger *zap.Logger
	// Telemetry are the component's instruments; nil instruments count nothing.
	Telemetry Telemetry
}

// Telemetry holds the instruments a Converter and the doors in front of it count with. Every
// k8s_audit component generates them from its metadata.yaml under the same names
// (otelcol_k8s_audit_*), so a dashboard reads the receiver and the connector alike; the connector
// labels every measurement input=connector, so that both in one collector write distinct series.
type Telemetry struct {
	FilteredEvents      metric.Int64Counter
	DroppedEvents       metric.Int64Counter
	TraceContextInvalid metric.Int64Counter
	CacheObjects        metric.Int64UpDownCounter
	CacheBytes          metric.Int64UpDownCounter
	CacheEvictions      metric.Int64Counter
	// DiffsSkipped counts writes left without a diff because their base was not the cached
	// body (base_not_seen) or they arrived after a newer write (out_of_order).
	DiffsSkipped metric.Int64Counter
	// DiffBaseRecords counts the records of the shared diff base by result (ReasonShared*).
	DiffBaseRecords metric.Int64Counter
	// ReceiveLag is the time from an event's stageTimestamp to its arrival, in seconds.
	ReceiveLag metric.Float64Histogram
}

func (t Telemetry) cacheObjects() func(int64) {
	if t.CacheObjects == nil {
		return nil
	}
	return func(d int64) { t.CacheObjects.Add(context.Background(), d) }
}

func (t Telemetry) cacheBytes() func(int64) {
	if t.CacheBytes == nil {
		return nil
	}
	return func(d int64) { t.CacheBytes.Add(context.Background(), d) }
}

func (t Telemetry) cacheEviction() func(string) {
	if t.CacheEvictions == nil {
		return nil
	}
	return func(reason string) { t.CacheEvictions.Add(context.Background(), 1, WithReason(reason)) }
}

// The reasons the conversion counts by. Each component's metadata.yaml lists them per counter
// for its documentation.md; its reasons test compares the two.
const (
	// otelcol_k8s_audit_filtered_events
	ReasonStage             = reasonStage
	ReasonReadVerb          = reasonReadVerb
	ReasonVerb              = reasonVerb
	ReasonNonResource       = reasonNonResource
	ReasonExcludedResource  = reasonExcludedResource
	ReasonExcludedUserAgent = reasonExcludedUserAgent
	ReasonDryRun            = reasonDryRun
	// otelcol_k8s_audit_dropped_events
	ReasonInvalidEvent      = reasonInvalidEvent
	ReasonInvalidTimestamp  = reasonInvalidTimestamp
	ReasonConsumerPermanent = "consumer_permanent"
	// otelcol_k8s_audit_diffs_skipped
	ReasonDiffBaseNotSeen = diffSkippedBaseNotSeen
	ReasonDiffOutOfOrder  = diffSkippedOutOfOrder
	// otelcol_k8s_audit_diff_cache_evictions
	ReasonEvictedCount    = reasonEvictedCount
	ReasonEvictedBytes    = reasonEvictedBytes
	ReasonEvictedTooLarge = reasonEvictedTooLarge
	// otelcol_k8s_audit_trace_context_invalid, beside model.Traceparent*
	ReasonContextTooMany    = contextTooMany
	ReasonContextTracestate = contextTracestate
)

const (
	reasonInvalidEvent     = "invalid_event"
	reasonInvalidTimestamp = "invalid_timestamp"
)

// WithReason is the measurement option for a counter's reason attribute.
func WithReason(reason string) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", reason)))
}

// AddWithReason counts n items with a reason; it ignores n <= 0 and a nil counter.
func AddWithReason(ctx context.Context, c metric.Int64Counter, n int, reason string) {
	if n > 0 && c != nil {
		c.Add(ctx, int64(n), WithReason(reason))
	}
}

// Start connects the shared diff base, when one is configured; see sharedBases.start.
func (c *Converter) Start(ctx context.Context) error {
	if c.shared == nil {
		return nil
	}
	return c.shared.start(ctx)
}

// Close lets the shared diff base's connections go.
func (c *Converter) Close() error {
	if c.shared == nil {
		return nil
	}
	return c.shared.close()
}

// Convert turns the events of one cluster into spans, one ResourceSpans per object kind, and
// counts in st what it filtered and dropped.
func (c *Converter) Convert(cluster string, events []Event, st *Stats) ptrace.Traces {
	return c.convert(cluster, events, st)
}

// Drop counts n events lost for reason (a door's own reasons: a malformed line, a permanent
// refusal downstream).
func (s *Stats) Drop(reason string, n int) { s.drop(reason, n) }

// Record adds the batch's counts to the instruments.
func (s *Stats) Record(ctx context.Context, t Telemetry) {
	for reason, n := range s.filtered {
		AddWithReason(ctx, t.FilteredEvents, n, reason)
	}
	for reason, n := range s.dropped {
		AddWithReason(ctx, t.DroppedEvents, n, reason)
	}
	for reason, n := range s.badContexts {
		AddWithReason(ctx, t.TraceContextInvalid, n, reason)
	}
	for reason, n := range s.skippedDiffs {
		AddWithReason(ctx, t.DiffsSkipped, n, reason)
	}
}

// SkippedDiffs is how many writes of the batch were left without a diff for reason.
func (s *Stats) SkippedDiffs(reason string) int { return s.skippedDiffs[reason] }

// Dropped is how many events the batch lost for reason.
func (s *Stats) Dropped(reason string) int { return s.dropped[reason] }

// Filtered is how many events the batch filtered for reason.
func (s *Stats) Filtered(reason string) int { return s.filtered[reason] }

// RecordLag records, for each event with a stage timestamp, how long before received the
// apiserver finished it, with the door's input attribute (webhook, file, connector): the
// histogram tells an event that is late from one that is lost.
func (c *Converter) RecordLag(ctx context.Context, events []Event, received time.Time, input metric.MeasurementOption) {
	h := c.tel.ReceiveLag
	if h == nil {
		return
	}
	for i := range events {
		ts := events[i].StageTimestamp
		if ts.IsZero() {
			ts = events[i].RequestReceivedTimestamp
		}
		if ts.IsZero() {
			continue
		}
		h.Record(ctx, max(received.Sub(ts), 0).Seconds(), input)
	}
}

// InputAttribute is the measurement option naming the door events came in by.
func InputAttribute(input string) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(attribute.String("input", input)))
}

// ErrWrongKind marks a well-formed JSON document that is not an audit.k8s.io/v1 Event or
// EventList.
var ErrWrongKind = errWrongKind

// IsWrongKind reports whether err says the document was JSON of another kind.
func IsWrongKind(err error) bool { return errors.Is(err, errWrongKind) }

// DecodeBody decodes an audit.k8s.io/v1 EventList or Event into events, reusing the storage of
// reuse, with the bodies read as c will convert them (see decodeBodyInto). The events refer to
// data's bytes: data must not change until they are released.
func (c *Converter) DecodeBody(data []byte, reuse []Event) ([]Event, error) {
	return decodeBodyInto(data, reuse, c.decodeFilters())
}

// decodeFilters are the filters the decoder reads bodies for (see bodyReader); a nil Converter
// has none, and the decoder then validates every body, as decodeBody does.
func (c *Converter) decodeFilters() *filters {
	if c == nil {
		return nil
	}
	return &c.filters
}

// DecodeLimits bound what decoding one body may hold (see DecodeBodyLimited).
type DecodeLimits struct {
	// MaxItems is the most events a body may hold: decoding stops at the first item past it,
	// before decoding that item, with a *TooManyItemsError. 0: no limit.
	MaxItems int
	// Charge, when set, is asked for room as the estimated memory of the decoded events grows:
	// EventBytes per event, and each element of their lists (groups, sourceIPs, annotations,
	// status causes) and of the response bodies indexed while decoding (ValueBytes each, asked
	// before the index grows to hold them), at least 64 KiB at a time. When it reports false,
	// decoding stops at once with ErrOverBudget (ErrValuesOverBudget for an index). What it
	// granted is the caller's to give back.
	Charge func(bytes int64) bool
}

// EventBytes is the memory one decoded event is estimated to hold, besides its body's bytes,
// until its batch is converted and consumed: the Event, twice over for its slice's growth, and
// the span made of it. A door charges it per item, whatever the item's size.
const EventBytes = eventBytes

// ValueBytes is what each value (JSON node) of a response body indexed while decoding is charged:
// its index node, twice over for the node slice's growth.
const ValueBytes = nodeBytes

// ErrOverBudget says DecodeLimits.Charge refused room for more decoded events.
var ErrOverBudget = errOverBudget

// ErrValuesOverBudget is the ErrOverBudget (errors.Is holds for both) refused for the values of a
// response body being indexed, as they are indexed.
var ErrValuesOverBudget = errValuesOverBudget

// DecodeBodyLimited is DecodeBody within lim: a webhook body cannot make the decoder hold more
// events, or more memory, than its door allows, whatever its size in bytes.
func (c *Converter) DecodeBodyLimited(data []byte, reuse []Event, lim DecodeLimits) ([]Event, error) {
	return decodeBodyLimited(data, reuse, c.decodeFilters(), &decodeCost{maxItems: lim.MaxItems, charge: lim.Charge})
}

// DecodeItem decodes one event as an EventList holds it: an Event whose kind and apiVersion may
// be absent (the apiserver writes them on the list only), within lim as DecodeBodyLimited. A
// record of the k8s_audit receiver's edge output (RawEventName) is one.
func (c *Converter) DecodeItem(data []byte, lim DecodeLimits) ([]Event, error) {
	cost := &decodeCost{maxItems: lim.MaxItems, charge: lim.Charge}
	events, err := decodeDocument(data, false, true, nil, bodyReader{filter: c.decodeFilters(), index: true, cost: cost})
	if err != nil {
		return nil, fmt.Errorf("decoding audit event: %w", err)
	}
	return events, nil
}

// DecodeLine decodes one audit log line (a single Event).
func (c *Converter) DecodeLine(line []byte) (Event, error) {
	return decodeLine(line, c.decodeFilters())
}

// eventsPool holds the event slices of batches: an EventList of 400 events is some 200 KB of
// Event structs, and nothing keeps them once the batch is converted.
var eventsPool = sync.Pool{New: func() any { return new([]Event) }}

// GetEvents returns pooled storage for a batch's events; give it back with PutEvents.
func GetEvents() *[]Event { return eventsPool.Get().(*[]Event) }

// PutEvents empties the events (their strings and the slices of the body must not outlive the
// batch; see Event.reset) and returns their storage to the pool, unless one unusually large
// batch grew it. A slice comes back empty beyond its length: only the events of this batch
// need emptying, or, when decoding failed part way (events nil), all of the storage it may
// have written.
func PutEvents(p *[]Event, events []Event) {
	if events == nil {
		events = *p
		events = events[:cap(events)]
	}
	for i := range events {
		putNodes(events[i].respIndex.nodes) // indexes the converter did not take
		events[i].reset()
	}
	if cap(events) <= maxPooledEvents {
		*p = events[:0]
		eventsPool.Put(p)
	}
}

// maxPooledEvents is the largest event slice kept for reuse: the apiserver's default batch is
// 400 events (--audit-webhook-batch-max-size).
const maxPooledEvents = 4096

// DecodeBody decodes an EventList or Event with every body validated, as a converter with no
// filters would read it.
func DecodeBody(data []byte) ([]Event, error) { return decodeBody(data) }

// ValidResource reports whether r is a resource as the apiserver names it (a lower-case plural,
// a DNS-1035 label): what an objectRef must hold to be converted, for a door that builds one.
func ValidResource(r string) bool { return validResource(r) }
