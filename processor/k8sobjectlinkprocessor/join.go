package k8sobjectlinkprocessor

import (
	"container/list"
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/idmap"
)

// The apiserver traces its own requests (KEP-647, --tracing-config-file): the server span of
// each request carries the request's audit ID in the attribute attrAPIServerAuditID, and its
// children are the handler's span and the etcd calls. k8s_audit's audit span of the same write
// carries the same ID (k8s.audit.id). The two streams arrive in either order (the apiserver's
// span exporter batches for seconds, the audit webhook for one to thirty), so whichever span of
// the pair comes second gets a link to the first (kubetrail.link.type=apiserver_request).
//
// The first side waits in a small map, bounded by count and bytes and by apiserver_join.ttl;
// with the Redis ID map it is also written there (record "j:<audit ID>"), in the batch's first
// pipelined round trip, so that replicas which each see one side still join.

// attrAPIServerAuditID is the attribute of the apiserver's request spans that holds the audit
// ID (k8s.io/apiserver endpoints/filters/traces.go, also on the handler's child span).
const attrAPIServerAuditID = "audit-id"

// Sides of a join record.
const (
	sideAudit   = 'a'
	sideRequest = 'r'
)

// joinRecord is one side of a pair: which side, and the span a link to it points at.
type joinRecord struct {
	side    byte
	traceID pcommon.TraceID
	spanID  pcommon.SpanID
}

const joinRecordSize = 1 + 16 + 8

func (r joinRecord) encode() string {
	var b [joinRecordSize]byte
	b[0] = r.side
	copy(b[1:17], r.traceID[:])
	copy(b[17:25], r.spanID[:])
	return string(b[:])
}

func decodeJoinRecord(s string) (joinRecord, bool) {
	var r joinRecord
	if len(s) != joinRecordSize || (s[0] != sideAudit && s[0] != sideRequest) {
		return r, false
	}
	r.side = s[0]
	copy(r.traceID[:], s[1:17])
	copy(r.spanID[:], s[17:25])
	return r, true
}

func joinKey(auditID string) string { return "j:" + auditID }

// joinEntryOverhead approximates an entry's cost beyond its audit ID: the record, the list
// element, the map slot and the key's string header.
const joinEntryOverhead = 160

// joinMap holds the first side of each pair until the second arrives or ttl passes. Every
// entry lives as long, so insertion order is expiry order: the oldest leave first, whether
// expired or pushed out by max_entries or max_bytes.
type joinMap struct {
	ttl        time.Duration
	maxEntries int
	maxBytes   int64
	now        func() time.Time
	onEvict    func(reason string)

	mu    sync.Mutex
	index map[string]*list.Element
	order list.List // of *joinEntry, oldest first
	bytes int64
}

type joinEntry struct {
	auditID string
	rec     joinRecord
	expire  time.Time
}

func newJoinMap(cfg APIServerJoinConfig, now func() time.Time, onEvict func(string)) *joinMap {
	return &joinMap{ttl: cfg.TTL, maxEntries: cfg.MaxEntries, maxBytes: cfg.MaxBytes, now: now, onEvict: onEvict,
		index: make(map[string]*list.Element)}
}

// claim records rec as the side of auditID seen now, unless the other side is waiting: then
// that record is returned (and leaves the map: the pair is joined). A side seen again (a
// redelivery) changes nothing.
func (m *joinMap) claim(auditID string, rec joinRecord) (joinRecord, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	m.expire(now)
	if el, ok := m.index[auditID]; ok {
		e := el.Value.(*joinEntry)
		if e.rec.side == rec.side {
			return joinRecord{}, false
		}
		m.remove(el)
		return e.rec, true
	}
	m.index[auditID] = m.order.PushBack(&joinEntry{auditID: auditID, rec: rec, expire: now.Add(m.ttl)})
	m.bytes += int64(len(auditID)) + joinEntryOverhead
	for m.order.Len() > m.maxEntries {
		m.remove(m.order.Front())
		m.onEvict(idmap.ReasonMaxEntries)
	}
	for m.bytes > m.maxBytes && m.order.Len() > 0 {
		m.remove(m.order.Front())
		m.onEvict(idmap.ReasonMaxBytes)
	}
	return joinRecord{}, false
}

// peek returns the waiting record of auditID, if any.
func (m *joinMap) peek(auditID string) (joinRecord, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.index[auditID]; ok {
		if e := el.Value.(*joinEntry); e.expire.After(m.now()) {
			return e.rec, true
		}
	}
	return joinRecord{}, false
}

func (m *joinMap) expire(now time.Time) {
	for el := m.order.Front(); el != nil && !el.Value.(*joinEntry).expire.After(now); el = m.order.Front() {
		m.remove(el)
		m.onEvict(reasonJoinExpired)
	}
}

func (m *joinMap) remove(el *list.Element) {
	e := m.order.Remove(el).(*joinEntry)
	delete(m.index, e.auditID)
	m.bytes -= int64(len(e.auditID)) + joinEntryOverhead
}

func (m *joinMap) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.order.Len()
}

// maxJoinAuditIDBytes is the audit receiver's bound of an audit ID (auditconv.MaxAuditIDBytes).
const maxJoinAuditIDBytes = 128

// apiserverRequestSpan reports whether s is the apiserver's server span of a request, and its
// audit ID: a span that is not kubetrail's, of kind server, with the audit-id attribute.
func apiserverRequestSpan(s ptrace.Span, typ string) (string, bool) {
	if typ != "" || s.Kind() != ptrace.SpanKindServer {
		return "", false
	}
	v, ok := s.Attributes().Get(attrAPIServerAuditID)
	if !ok || v.Type() != pcommon.ValueTypeStr || v.Str() == "" || len(v.Str()) > maxJoinAuditIDBytes {
		// An audit ID over the receivers' bound is no apiserver's (they are UUIDs): it never
		// becomes a key of the join map or of Redis.
		return "", false
	}
	return v.Str(), true
}

// linkJoined adds the apiserver_request link from s to the other side of its pair.
func linkJoined(s ptrace.Span, auditID string, to joinRecord) {
	l := s.Links().AppendEmpty()
	l.SetTraceID(to.traceID)
	l.SetSpanID(to.spanID)
	la := l.Attributes()
	la.PutStr(model.AttrLinkType, model.LinkTypeAPIServerRequest)
	la.PutStr(model.AttrAuditID, auditID)
}

// joinRequest is an apiserver request span of the batch.
type joinRequest struct {
	auditID string
	span    ptrace.Span
}

// joinBatch is the batch's part of the join: its apiserver request spans, and for audit spans
// (by item index) what the Redis round trip answered.
type joinBatch struct {
	requests []joinRequest
	target   map[int]joinRecord // audit item → the request span Redis knew
	deferred map[int]bool       // audit item whose record goes out with the next batch
	// late are request spans that follow an object's trace state: they claim their audit ID
	// once moved to their final trace, in memory (joinAfter).
	late []joinRequest
}

// joinRequests runs before the batch's first round trip. Request spans claim their audit ID
// (their IDs are final) and link at once when the audit span waited here; with Redis the others
// are also written there, in the batch's first round trip. Audit records of earlier batches
// (joinPending) ride on that round trip too, but only when the batch makes one anyway (it has
// activity spans, or request spans Redis must answer): a batch of other spans (another
// service's, or the apiserver's without a request's server span) leaves them for the next.
func (p *objectLinkProcessor) joinRequests(r *resolver, jb *joinBatch, hasItems bool) {
	expire := r.now.Add(p.cfg.APIServerJoin.TTL)
	var asks []idmap.Op
	var answers []func(*idmap.Op)
	for _, req := range jb.requests {
		rec := joinRecord{side: sideRequest, traceID: req.span.TraceID(), spanID: req.span.SpanID()}
		if other, ok := p.join.claim(req.auditID, rec); ok && other.side == sideAudit {
			linkJoined(req.span, req.auditID, other)
			p.tel.K8sObjectLinkApiserverJoins.Add(r.ctx, 1, metricSource(sourceMemory))
			continue
		}
		if p.redis == nil {
			continue
		}
		span, id := req.span, req.auditID
		asks = append(asks, idmap.Op{Kind: idmap.OpSetIfAbsent, Key: joinKey(id), Value: rec.encode(), ExpireAt: expire})
		answers = append(answers, func(op *idmap.Op) {
			if other, ok := decodeJoinRecord(op.Value); op.Found && ok && other.side == sideAudit {
				linkJoined(span, id, other)
				p.tel.K8sObjectLinkApiserverJoins.Add(r.ctx, 1, metricSource(sourceRedis))
			}
		})
	}
	if p.redis == nil || !hasItems && len(asks) == 0 {
		return
	}
	// The pending audit records go first: should this batch hold a request span of one of them
	// (its audit span left this replica's map), the request's SET NX GET then finds it. Should
	// another replica's request span be in Redis already, that pair stays unjoined: its audit
	// span has left.
	for _, op := range p.joinPending.take() {
		r.queue(op, func(*idmap.Op) {})
	}
	for i := range asks {
		r.queue(asks[i], answers[i])
	}
}

// joinAudits queues the Redis part of the audit spans' join, before the batch's first round
// trip. An audit span does not know its final trace yet unless this replica already knows the
// object's assignment: those are written now (SET NX GET answers whether the request span is
// there); the others only ask, and their record goes out with the next batch's first round
// trip, which is how the join costs no round trip of its own.
func (p *objectLinkProcessor) joinAudits(r *resolver, items []item, jb *joinBatch) {
	if p.redis == nil {
		return
	}
	expire := r.now.Add(p.cfg.APIServerJoin.TTL)
	r.localRound()
	for i := range items {
		it := &items[i]
		if it.auditID == "" {
			continue
		}
		if rec, ok := p.join.peek(it.auditID); ok && rec.side == sideRequest {
			continue // joined in memory after the rewrite
		}
		idx := i
		cb := func(op *idmap.Op) {
			if other, ok := decodeJoinRecord(op.Value); op.Found && ok {
				if other.side == sideRequest {
					jb.target[idx] = other
				}
				return
			}
			if op.Kind == idmap.OpGet {
				jb.deferred[idx] = true
			}
		}
		if n := it.node.resolve(); n.state == stFinal {
			rec := joinRecord{side: sideAudit, traceID: n.asg.TraceID, spanID: it.span.SpanID()}
			r.queue(idmap.Op{Kind: idmap.OpSetIfAbsent, Key: joinKey(it.auditID), Value: rec.encode(), ExpireAt: expire}, cb)
		} else {
			r.queue(idmap.Op{Kind: idmap.OpGet, Key: joinKey(it.auditID)}, cb)
		}
	}
}

// joinAfter runs once the audit spans have their final trace: each claims its audit ID in
// memory (linking to a request span waiting there) or takes the link Redis answered; records
// Redis has not got yet wait for the next batch's round trip.
func (p *objectLinkProcessor) joinAfter(ctx context.Context, items []item, remove []bool, jb *joinBatch, now time.Time) {
	for _, req := range jb.late {
		rec := joinRecord{side: sideRequest, traceID: req.span.TraceID(), spanID: req.span.SpanID()}
		if other, ok := p.join.claim(req.auditID, rec); ok && other.side == sideAudit {
			linkJoined(req.span, req.auditID, other)
			p.tel.K8sObjectLinkApiserverJoins.Add(ctx, 1, metricSource(sourceMemory))
		}
	}
	for i := range items {
		it := &items[i]
		if it.auditID == "" || remove[it.pos] {
			continue
		}
		rec := joinRecord{side: sideAudit, traceID: it.span.TraceID(), spanID: it.span.SpanID()}
		if other, ok := p.join.claim(it.auditID, rec); ok && other.side == sideRequest {
			linkJoined(it.span, it.auditID, other)
			p.tel.K8sObjectLinkApiserverJoins.Add(ctx, 1, metricSource(sourceMemory))
			continue
		}
		if other, ok := jb.target[i]; ok {
			linkJoined(it.span, it.auditID, other)
			p.tel.K8sObjectLinkApiserverJoins.Add(ctx, 1, metricSource(sourceRedis))
			continue
		}
		if jb.deferred[i] {
			op := idmap.Op{Kind: idmap.OpSetIfAbsent, Key: joinKey(it.auditID), Value: rec.encode(), ExpireAt: now.Add(p.cfg.APIServerJoin.TTL)}
			if !p.joinPending.add(p.cfg.APIServerJoin.MaxEntries, op) {
				p.tel.K8sObjectLinkApiserverJoinEvictions.Add(ctx, 1, metric.WithAttributes(attribute.String(attrReason, reasonJoinPendingFull)))
			}
		}
	}
}

func metricSource(s string) metric.AddOption {
	return metric.WithAttributes(attribute.String(attrSource, s))
}
