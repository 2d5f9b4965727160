package k8sobjectlinkprocessor

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/kubetrail/kubetrail/internal/k8sconfig"
	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/internal/objid"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/idmap"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/loglimit"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/metadata"
)

// maxOwedSpans bounds the object spans kept for re-sending after the next consumer refused a
// batch; they are small, and a refusal that lasts longer than this many object spans is a
// broken pipeline that the exporter's own queue metrics already show.
const maxOwedSpans = 10000

// objectLinkProcessor is a plain processor.Traces rather than one built by
// processorhelper.NewTraces, for two reasons the helper cannot accommodate:
//   - spans held for owner_wait are released later by a goroutine, which must call the next
//     consumer itself, outside any ConsumeTraces call;
//   - the processor must see the next consumer's answer: when it refuses a batch, the receiver
//     will redeliver it, so the duplicate marks this batch set are removed (or the redelivery
//     would be dropped as a duplicate) and the object spans it emitted are kept and re-sent
//     (the assignments they stand for are now in the ID map, so no later batch would emit them).
//
// It counts spans in and out itself for the same reason the helper would.
type objectLinkProcessor struct {
	cfg    *Config
	logger *zap.Logger
	tel    *metadata.TelemetryBuilder
	next   consumer.Traces
	clock  clock
	mapper model.Mapper
	// discovery is the CRD-aware part of mapper when owner_lookup is on; Shutdown waits for its
	// refresh in flight.
	discovery *k8sconfig.DiscoveryMapper

	store idmap.Store
	redis *idmap.RedisStore // nil with the memory backend
	// budget counts the spans of each trace for max_spans_per_trace (nil: no bound).
	budget *traceBudget
	lookup *ownerLookup
	// newLookupClients builds the apiserver clients at Start; tests replace it.
	newLookupClients func() (*k8sconfig.Clients, error)

	windowLogs *loglimit.Limiter // the window-mismatch warning, at most once per windowMismatchLogEvery
	lookupLogs *loglimit.Limiter // the failing owner look-ups warning, at most once per lookupFailedLogEvery
	// lastSenderWindow is the receivers' window the last check found (0: none, or not ours).
	lastSenderWindow atomic.Int64

	// join pairs apiserver request spans with audit spans (nil when apiserver_join is off);
	// joinPending are audit records for Redis that wait for the next batch's round trip.
	join        *joinMap
	joinMu      sync.Mutex
	joinPending []idmap.Op

	heldMu sync.Mutex
	held   []heldSpan
	// waiting are spans of untrusted doors waiting for their object's assignment: a hold of
	// their own (doors.max_waiting_spans), so that they cannot push held spans out (doors.go).
	waiting []heldSpan
	owed    ptrace.Traces
	// unsent are processed spans the next consumer refused when their hold ended, or that the
	// previous run kept in storage; they are sent as they are.
	unsent ptrace.Traces

	id      component.ID
	storage storage.Client // nil without the storage setting

	host          component.Host
	forbiddenOnce sync.Once
	// forbiddenResources are the resources whose forbidden look-ups were reported.
	forbiddenResources sync.Map

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
	started  bool
}

// heldSpan is one activity span waiting for its object's owner, with its resource and scope.
type heldSpan struct {
	td       ptrace.Traces
	deadline time.Time
}

func newProcessor(set processor.Settings, cfg *Config, next consumer.Traces, clk clock) (*objectLinkProcessor, error) {
	tel, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, err
	}
	p := &objectLinkProcessor{
		cfg:    cfg,
		logger: set.Logger,
		tel:    tel,
		next:   next,
		clock:  clk,
		mapper: model.BuiltinMapper(),
		owed:   ptrace.NewTraces(),
		unsent: ptrace.NewTraces(),
		id:     set.ID,

		windowLogs: loglimit.New(windowMismatchLogEvery),
		lookupLogs: loglimit.New(lookupFailedLogEvery),
	}
	evicted := func(reason string) {
		tel.K8sObjectLinkIDMapEvictions.Add(context.Background(), 1, metric.WithAttributes(attribute.String(attrReason, reason)))
	}
	mem := idmap.NewMemoryStore(cfg.IDMap.Memory, clk.Now, evicted)
	if cfg.MaxSpansPerTrace > 0 {
		p.budget = newTraceBudget(cfg.MaxSpansPerTrace, cfg.Window, func(d int64) {
			tel.K8sObjectLinkTraceCounts.Add(context.Background(), d)
		})
	}
	if cfg.APIServerJoin.Enabled {
		p.join = newJoinMap(cfg.APIServerJoin, clk.Now, func(reason string) {
			tel.K8sObjectLinkApiserverJoinEvictions.Add(context.Background(), 1, metric.WithAttributes(attribute.String(attrReason, reason)))
		})
	}
	switch cfg.IDMap.Backend {
	case BackendRedis:
		rs, err := idmap.NewRedisStore(cfg.IDMap.Redis, mem, clk.Now, idMapTelemetry{tel}, set.Logger)
		if err != nil {
			return nil, err
		}
		p.store, p.redis = rs, rs
	default:
		p.store = mem
	}
	if l := cfg.OwnerLookup.Get(); l != nil {
		api := l.APIConfig
		p.newLookupClients = api.NewClients
	}
	return p, nil
}

// Start connects the optional apiserver client and starts releasing held spans.
func (p *objectLinkProcessor) Start(_ context.Context, host component.Host) error {
	p.host = host
	if p.redis != nil {
		p.redis.SetStatusReporter(func(err error) {
			if err != nil {
				componentstatus.ReportStatus(host, componentstatus.NewRecoverableErrorEvent(err))
			} else {
				componentstatus.ReportStatus(host, componentstatus.NewEvent(componentstatus.StatusOK))
			}
		})
		if err := p.redis.Start(); err != nil {
			return err
		}
	}
	if p.newLookupClients != nil && p.lookup == nil {
		clients, err := p.newLookupClients()
		if err != nil {
			return err
		}
		l := p.cfg.OwnerLookup.Get()
		p.lookup = newOwnerLookup(clients.Metadata, l.Cluster, l.CacheTTL, l.Timeout, p.clock.Now, l.Resources...)
		// With an apiserver at hand, owners of CRD kinds (an Argo Rollout owning ReplicaSets)
		// get their real resource from discovery, so look-ups of their own owners can work.
		if clients.Discovery != nil {
			p.discovery = k8sconfig.NewDiscoveryMapper(clients.Discovery, time.Minute)
			p.discovery.Prefetch()
			p.mapper = model.Chain(model.BuiltinMapper(), p.discovery)
		}
	}
	if p.cfg.Storage != nil && p.storage == nil {
		if err := p.openStorage(context.Background(), host); err != nil {
			return err
		}
		if err := p.sendUnsent(context.Background()); err != nil {
			p.logger.Info("Next consumer refused the spans left unsent by the previous run; retrying", zap.Error(err))
		}
	}
	p.stop, p.done = make(chan struct{}), make(chan struct{})
	p.stopOnce = sync.Once{}
	p.started = true
	var tick <-chan time.Time
	stopTick := func() {}
	every := time.Duration(0)
	switch {
	case p.cfg.OwnerWait > 0:
		// A quarter of the wait: a held span leaves at most 25% late, and the check is cheap.
		every = max(p.cfg.OwnerWait/4, 10*time.Millisecond)
	case p.cfg.Storage != nil:
		every = time.Second // only to retry spans left unsent
	}
	if every > 0 {
		t := p.clock.NewTicker(every)
		tick, stopTick = t.C(), t.Stop
	}
	go p.releaseLoop(tick, stopTick)
	p.logger.Info("k8s_object_link started", zap.String("backend", p.cfg.IDMap.Backend),
		zap.Duration("window", p.cfg.Window), zap.Duration("owner_wait", p.cfg.OwnerWait))
	return nil
}

// Shutdown releases every held span and every owed object span (none is lost while the next
// consumer takes them) and closes the ID map.
func (p *objectLinkProcessor) Shutdown(ctx context.Context) error {
	if p.started {
		p.stopOnce.Do(func() { close(p.stop) })
		<-p.done
		p.started = false
	}
	if p.discovery != nil {
		p.discovery.Close() // kept: a restart reuses the lookup clients and this mapper
	}
	// Held spans, spans left unsent and object spans still owed from a refused batch get their
	// last chance; what the next consumer still refuses is kept in storage, or counted as lost.
	err := p.release(ctx, true)
	if sendErr := p.send(ctx, ptrace.NewTraces(), processResult{}); sendErr != nil {
		err = errors.Join(err, sendErr)
	}
	if p.store != nil && p.redis != nil {
		// Audit records still waiting for a batch's round trip go out now (one round trip at
		// shutdown), so that another replica can still join their request spans.
		if ops := p.takeJoinPending(); len(ops) > 0 {
			_ = p.store.Do(ctx, ops)
		}
	}
	if saveErr := p.saveUnsent(ctx); saveErr != nil {
		err = errors.Join(err, saveErr)
	} else if p.cfg.Storage != nil {
		err = nil // nothing refused is lost: it waits in storage for the next start
	}
	if p.store != nil {
		err = errors.Join(err, p.store.Close(ctx))
		p.store = nil
	}
	return err
}

// Capabilities implements consumer.Traces: activity spans are rewritten in place.
func (p *objectLinkProcessor) Capabilities() consumer.Capabilities {
	return consumer.Capabilities{MutatesData: true}
}

// ConsumeTraces implements consumer.Traces.
func (p *objectLinkProcessor) ConsumeTraces(ctx context.Context, td ptrace.Traces) error {
	if p.store == nil {
		return idmap.ErrClosed
	}
	p.tel.K8sObjectLinkSpansIn.Add(ctx, int64(td.SpanCount()))
	now := p.clock.Now()
	res := p.process(ctx, td, now, freshHold(now, p.cfg.OwnerWait), true, p.trusted(ctx))
	return p.send(ctx, td, res)
}

// send passes td on, with any object spans still owed from a refused batch, and undoes the
// batch's duplicate marks if the next consumer refuses it.
func (p *objectLinkProcessor) send(ctx context.Context, td ptrace.Traces, res processResult) error {
	p.heldMu.Lock()
	owed := p.owed
	p.owed = ptrace.NewTraces()
	p.heldMu.Unlock()
	owedCount := owed.SpanCount()
	if owedCount > 0 {
		owed.ResourceSpans().MoveAndAppendTo(td.ResourceSpans())
	}
	if td.SpanCount() == 0 {
		return nil
	}
	n := td.SpanCount()
	err := p.next.ConsumeTraces(ctx, td)
	if err == nil {
		p.tel.K8sObjectLinkSpansOut.Add(ctx, int64(n))
		return nil
	}
	if len(res.marks) > 0 {
		undo := make([]idmap.Op, len(res.marks))
		for i, key := range res.marks {
			undo[i] = idmap.Op{Kind: idmap.OpDelete, Key: key}
		}
		if store := p.store; store != nil {
			_ = store.Do(context.WithoutCancel(ctx), undo)
		}
	}
	// Object spans owed from before are owed still, with this batch's.
	objectSpans := ptrace.NewTraces()
	if owedCount > 0 {
		owedBack := copyObjectSpans(td)
		owedBack.ResourceSpans().MoveAndAppendTo(objectSpans.ResourceSpans())
	} else if len(res.objects) > 0 || len(res.conts) > 0 {
		// Rebuilt rather than copied up front: refusals are rare, batches are not.
		b := model.NewTracesBuilder(metadata.ScopeName, "")
		for _, n := range res.objects {
			p.objectSpan(b, n)
		}
		for _, c := range res.conts {
			p.continuationSpan(b, c)
		}
		b.Traces().ResourceSpans().MoveAndAppendTo(objectSpans.ResourceSpans())
	}
	if count := objectSpans.SpanCount(); count > 0 {
		p.heldMu.Lock()
		if p.owed.SpanCount()+count <= maxOwedSpans {
			objectSpans.ResourceSpans().MoveAndAppendTo(p.owed.ResourceSpans())
		} else {
			p.tel.K8sObjectLinkSpansDropped.Add(ctx, int64(count), metric.WithAttributes(attribute.String(attrReason, reasonOwedFull)))
		}
		p.heldMu.Unlock()
	}
	return err
}

// copyActivitySpans copies td without its object spans.
func copyActivitySpans(td ptrace.Traces) ptrace.Traces {
	out := ptrace.NewTraces()
	td.CopyTo(out)
	out.ResourceSpans().RemoveIf(func(rs ptrace.ResourceSpans) bool {
		rs.ScopeSpans().RemoveIf(func(ss ptrace.ScopeSpans) bool {
			ss.Spans().RemoveIf(func(s ptrace.Span) bool {
				v, _ := s.Attributes().Get(model.AttrSpanType)
				return v.Str() == model.SpanTypeObject
			})
			return ss.Spans().Len() == 0
		})
		return rs.ScopeSpans().Len() == 0
	})
	return out
}

// copyObjectSpans copies the object spans of td.
func copyObjectSpans(td ptrace.Traces) ptrace.Traces {
	out := ptrace.NewTraces()
	for _, rs := range td.ResourceSpans().All() {
		for _, ss := range rs.ScopeSpans().All() {
			for _, s := range ss.Spans().All() {
				if v, ok := s.Attributes().Get(model.AttrSpanType); !ok || v.Str() != model.SpanTypeObject {
					continue
				}
				ors := out.ResourceSpans().AppendEmpty()
				rs.Resource().CopyTo(ors.Resource())
				ors.SetSchemaUrl(rs.SchemaUrl())
				oss := ors.ScopeSpans().AppendEmpty()
				ss.Scope().CopyTo(oss.Scope())
				oss.SetSchemaUrl(ss.SchemaUrl())
				s.CopyTo(oss.Spans().AppendEmpty())
			}
		}
	}
	return out
}

// processResult is what process leaves for send: the duplicate marks it set (undone if the
// batch is refused), how many spans it held, and the nodes whose object spans it emitted (rebuilt
// and kept for re-sending if the batch is refused; the next consumer may keep td itself).
type processResult struct {
	marks   []string // keys
	held    int
	objects []*node
	// conts are the continuation spans emitted: like object spans, owed if the batch is
	// refused (their marks stay: an object created under one needs it whatever happens).
	conts []*continuation
}

// process rewrites td in place: activity spans move into their root ancestor's window trace
// under their object's span, duplicates and held spans are removed, object spans are appended.
// hold says, per span ordinal, until when the span may be held and whether it must not be. It
// returns the duplicate marks it set (to undo if the batch is refused).
//
// The steps: collect the batch's activity spans, settle their objects' assignments, rewrite,
// drop or mark for holding each span, hold the marked ones, and emit the object spans this
// replica wrote first. trusted says whether td came through a trusted door (doors.go): the
// spans of another door write nothing and only follow existing assignments.
func (p *objectLinkProcessor) process(ctx context.Context, td ptrace.Traces, now time.Time,
	hold holdPolicy, dedup, trusted bool,
) (res processResult) {
	r := newResolver(ctx, p.resolverDeps(), now)
	defer r.release()
	items, jb, spans, gb := p.collectItems(ctx, r, td, hold, dedup, trusted, now)
	if p.join != nil {
		jb.target, jb.deferred = map[int]joinRecord{}, map[int]bool{}
		p.joinRequests(r, &jb, len(items) > 0 || len(gb.guests) > 0)
	}
	p.queueGuests(r, &gb)
	if len(items) == 0 {
		if len(r.ops) > 0 || len(r.writes) > 0 {
			r.flush()
		}
		if len(gb.guests) == 0 && len(gb.refused) == 0 {
			return res
		}
		remove := make([]bool, spans)
		p.finishGuests(ctx, td, r, &gb, remove, dedup)
		if p.join != nil {
			p.joinAfter(ctx, nil, remove, &jb, now)
		}
		if countTrue(remove) > 0 {
			removeSpans(td, remove)
		}
		for t, n := range r.spanCounts {
			p.budget.add(t, n, now)
		}
		return res
	}
	p.resolveItems(r, items, &jb, now)
	p.continueItems(r, items, now)
	remove, toHold := p.rewriteActivitySpans(ctx, r, items, spans)
	p.finishGuests(ctx, td, r, &gb, remove, dedup)
	if p.join != nil {
		p.joinAfter(ctx, items, remove, &jb, now)
	}
	res = p.holdItems(ctx, td, items, toHold, dedup)
	if removed := countTrue(remove); removed > 0 {
		removeSpans(td, remove)
	}
	p.emitObjectSpans(ctx, td, r, &res)
	for t, n := range r.spanCounts {
		p.budget.add(t, n, now)
	}
	return res
}

// collectItems walks td once: it gives every activity span that names an object an item bound
// to its object's node (with the hold deadline hold gives it), collects apiserver request spans
// for the join, teaches r the batch's name → UID pairs and checks the senders' window on the
// first fresh span. spans is the number of spans walked (object spans included): the size of
// the removal mask.
func (p *objectLinkProcessor) collectItems(ctx context.Context, r *resolver, td ptrace.Traces,
	hold holdPolicy, dedup, trusted bool, now time.Time,
) (items []item, jb joinBatch, spans int, gb guestBatch) {
	pos := 0
	windowChecked := false
	total := td.SpanCount()
	invalidMembers := 0
	defer func() {
		if invalidMembers > 0 {
			p.tel.K8sObjectLinkTraceStateSpans.Add(ctx, int64(invalidMembers), metric.WithAttributes(attribute.String(attrResult, resultInvalid)))
		}
	}()
	for _, rs := range td.ResourceSpans().All() {
		resAttrs := rs.Resource().Attributes()
		for _, ss := range rs.ScopeSpans().All() {
			for _, s := range ss.Spans().All() {
				pos++
				attrs := s.Attributes()
				typ, _ := attrs.Get(model.AttrSpanType)
				if !trusted && claimsKubetrail(typ.Str()) {
					gb.refused = append(gb.refused, pos-1)
					continue
				}
				if typ.Str() == model.SpanTypeObject {
					continue
				}
				var ref objid.ObjectRef
				follow := false
				if p.cfg.TraceContext.FollowTraceState {
					var invalid bool
					if ref, follow, invalid = followed(s, typ.Str()); invalid {
						invalidMembers++
					}
				}
				if p.join != nil {
					if id, ok := apiserverRequestSpan(s, typ.Str()); ok {
						if follow {
							// Claimed once it has its final trace (joinAfter).
							jb.late = append(jb.late, joinRequest{auditID: id, span: s})
						} else {
							jb.requests = append(jb.requests, joinRequest{auditID: id, span: s})
							continue
						}
					}
				}
				if !trusted {
					// A guest: it follows an existing assignment at most, and reads nothing else
					// of the span (doors.go).
					if follow {
						if g, ok := p.guestOf(s, pos-1, ref, typ.Str(), hold, now); ok {
							gb.guests = append(gb.guests, g)
						} else {
							p.countGuests(ctx, resultPassed, 1)
						}
					}
					continue
				}
				var obj model.Object
				var w time.Time
				if follow {
					obj = followedObject(ref, resAttrs, attrs, typ.Str())
					w = model.WindowStart(ref.Window, p.cfg.Window)
				} else {
					if typ.Str() == model.SpanTypeController {
						// Without the member (its object had no UID yet): it stays in its caller's trace.
						continue
					}
					var ok bool
					if obj, ok = model.ObjectFromAttributes(resAttrs, attrs); !ok {
						continue
					}
					w = model.WindowStart(s.StartTimestamp().AsTime(), p.cfg.Window)
				}
				// Its strings become ID-map keys and values: bounded as the receivers bound them,
				// whichever trusted door the span came through.
				obj.Bound()
				if obj.UID != "" && obj.Name != "" {
					// Later spans of a batch are later in time: the last UID seen for a name is
					// current. The key is built on the stack; it is a string of its own only
					// when the name is new to the batch or names another object now.
					var buf [128]byte
					if k := obj.AppendNameKey(buf[:0]); r.names[string(k)] != obj.UID {
						r.names[string(k)] = obj.UID
					}
				}
				it := item{span: s, pos: pos - 1, follow: follow}
				if follow {
					it.controller = typ.Str() == model.SpanTypeController
					it.tsWindow = ref.Window.UnixNano()
				}
				if p.join != nil && typ.Str() == model.SpanTypeAudit {
					if v, ok := attrs.Get(model.AttrAuditID); ok {
						it.auditID = v.Str()
					}
				}
				it.dedup = dedup && (typ.Str() == model.SpanTypeAudit || typ.Str() == model.SpanTypeEvent) && !s.SpanID().IsEmpty()
				if it.dedup && !windowChecked {
					// Fresh spans only (dedup is set on the ConsumeTraces path), as received.
					windowChecked = true
					p.checkWindow(ctx, obj, s, w)
				}
				var force bool
				it.deadline, force = hold.span(it.pos)
				it.uidFromName = obj.UID == ""
				n := r.node(obj, w)
				n.direct = true
				n.force = n.force || force
				if n.deadline.IsZero() || it.deadline.Before(n.deadline) {
					n.deadline = it.deadline
				}
				it.node = n
				if p.cfg.TraceContext.Nest && typ.Str() == model.SpanTypeAudit {
					if tc, ok := spanTraceContext(s); ok {
						// Later spans of a batch are later: the last context seen is the object's.
						n.ctx = &nodeContext{tc: tc, start: s.StartTimestamp().AsTime()}
					}
				}
				if items == nil {
					// One per span left at most, sized at the first: no doubling copies, and a
					// batch without kubetrail spans (another service's, the apiserver's) allocates none.
					items = make([]item, 0, total-pos+1)
				}
				items = append(items, it)
			}
		}
	}
	return items, jb, pos, gb
}

// finishGuests decides the batch's guests (doors.go) once its trusted spans are settled: refused
// spans and guests that wait are marked in remove, the others are followed or left as they came.
func (p *objectLinkProcessor) finishGuests(ctx context.Context, td ptrace.Traces, r *resolver, gb *guestBatch, remove []bool, fresh bool) {
	if len(gb.refused) > 0 {
		for _, pos := range gb.refused {
			remove[pos] = true
		}
		p.tel.K8sObjectLinkSpansDropped.Add(ctx, int64(len(gb.refused)), metric.WithAttributes(attribute.String(attrReason, reasonUntrustedClaim)))
	}
	if len(gb.guests) == 0 {
		return
	}
	wait := p.settleGuests(ctx, r, gb)
	for pos := range p.waitGuests(ctx, td, gb, wait, fresh) {
		remove[pos] = true
	}
}

// resolveItems settles the assignments of the items' objects. Round one carries the batch's
// unconditional writes: duplicate marks (whose answers decide which spans drop), the name index
// and relations named by the spans themselves.
func (p *objectLinkProcessor) resolveItems(r *resolver, items []item, jb *joinBatch, now time.Time) {
	// Sized once for the batch: the duplicate marks are most of its operations.
	nd := 0
	for i := range items {
		if items[i].dedup {
			nd++
		}
	}
	seen := make(map[pcommon.SpanID]struct{}, nd)
	dedupExpiry := now.Add(p.cfg.Window + p.cfg.Grace)
	dedupIdx := make([]int, 0, nd)
	r.writes = slices.Grow(r.writes, nd+len(r.names)+len(r.order))
	r.ops, r.cbs = slices.Grow(r.ops, nd), slices.Grow(r.cbs, nd)
	for i := range items {
		it := &items[i]
		if !it.dedup {
			continue
		}
		id := it.span.SpanID()
		if _, dup := seen[id]; dup {
			it.dup = true
			continue
		}
		seen[id] = struct{}{}
		r.writes = append(r.writes, idmap.Op{Kind: idmap.OpSetIfAbsent, Key: idmap.DedupKey(id), ExpireAt: dedupExpiry})
		dedupIdx = append(dedupIdx, i)
	}
	nDedup := len(r.writes)
	for name, uid := range r.names {
		r.writes = append(r.writes, idmap.Op{Kind: idmap.OpSet, Key: idmap.NameKey(name), Value: uid, ExpireAt: now.Add(p.cfg.RelationTTL)})
	}
	for _, n := range r.order {
		if n.direct && !n.obj.Owner.IsZero() {
			r.writeRelation(n)
			r.linkOwner(n)
		}
	}
	// Duplicate marks go out with the first round trip; their answers decide which spans drop.
	dedupOps := r.writes[:nDedup:nDedup]
	r.writes = r.writes[nDedup:]
	for j := range dedupOps {
		it := &items[dedupIdx[j]] // one pointer: the smallest closure, queued per span
		r.queue(dedupOps[j], func(op *idmap.Op) {
			if op.Found {
				it.dup = true
			} else {
				it.mark = op.Key
			}
		})
	}
	if p.join != nil {
		p.joinAudits(r, items, jb)
	}
	p.queueSpanCounts(r, now)
	p.queueContexts(r)
	r.run()
	r.report()
}

// queueSpanCounts sends, with the batch's first round trip, the spans this replica put in each
// trace since the last one, and learns each trace's total from the answers.
func (p *objectLinkProcessor) queueSpanCounts(r *resolver, now time.Time) {
	pending := p.budget.take()
	if len(pending) == 0 {
		return
	}
	expiry := now.Add(p.cfg.Window + p.cfg.Grace)
	for t, n := range pending {
		r.queue(idmap.Op{Kind: idmap.OpIncr, Key: idmap.SpanCountKey(t), Value: strconv.FormatInt(n, 10), ExpireAt: expiry}, func(op *idmap.Op) {
			p.budget.learn(t, op.Value, now)
		})
	}
}

// continueItems decides, for every settled object with activity spans in the batch, whether the
// trace of its span is at max_spans_per_trace; those spans then go to the continuation trace,
// under the object's continuation span there. Whoever sets a continuation span's mark first
// emits it: one more round trip, in the batches that overflow a trace only.
func (p *objectLinkProcessor) continueItems(r *resolver, items []item, now time.Time) {
	if p.budget == nil {
		return
	}
	for i := range items {
		if items[i].dup {
			continue
		}
		n := items[i].node.resolve()
		if n.state != stFinal || n.contChecked {
			continue
		}
		n.contChecked = true
		if d := p.budget.dest(n.asg.TraceID); d != n.asg.TraceID {
			n.cont = d
			r.continueIn(n, d)
		}
	}
	if len(r.conts) == 0 {
		return
	}
	expiry := now.Add(p.cfg.Window + p.cfg.Grace)
	for _, c := range r.conts {
		r.queue(idmap.Op{Kind: idmap.OpSetIfAbsent, Key: idmap.DedupKey(c.span), ExpireAt: expiry}, func(op *idmap.Op) {
			c.emit = !op.Found
		})
	}
	r.flush()
}

// rewriteActivitySpans moves each settled item's span under its object's span (with an owner
// link when the object's trace is not its owner's) and decides the rest: duplicates are marked
// for removal (and counted), held items are marked for removal and returned in toHold, and spans
// whose object stayed unsettled pass on as received. remove is indexed by span ordinal.
func (p *objectLinkProcessor) rewriteActivitySpans(ctx context.Context, r *resolver, items []item, spans int) (remove []bool, toHold []int) {
	remove = make([]bool, spans)
	duplicates, continued, follows := 0, 0, 0
	for i := range items {
		it := &items[i]
		if it.dup {
			remove[it.pos] = true
			duplicates++
			p.logger.Debug("Dropping duplicate activity span", zap.Stringer("span_id", it.span.SpanID()))
			continue
		}
		n := it.node.resolve()
		switch n.state {
		case stHeld:
			remove[it.pos] = true
			toHold = append(toHold, i)
			continue
		case stFinal:
		default:
			// Unsettled after every round (a store that keeps failing): the span keeps the
			// per-object trace its receiver derived, which is still a valid trace.
			p.logger.Debug("Object assignment unsettled; passing the span on as received", zap.String("object", string(n.id.key)))
			continue
		}
		s := it.span
		if it.follow {
			p.rewriteFollowed(r, it, n)
			follows++
			continue
		}
		n.observe(s)
		if !n.cont.IsEmpty() {
			s.SetTraceID(n.cont)
			s.SetParentSpanID(model.ContinuationSpanID(n.asg.SpanID, n.cont))
			continued++
		} else {
			s.SetTraceID(n.asg.TraceID)
			s.SetParentSpanID(n.asg.SpanID)
		}
		r.countSpans(s.TraceID(), 1)
		if it.uidFromName && n.obj.UID != "" {
			s.Attributes().PutStr(model.AttrObjectUID, n.obj.UID)
		}
		if o := n.owner; o != nil {
			o = o.resolve()
			if o.state == stFinal && n.asg.Parent != o.asg.SpanID {
				l := s.Links().AppendEmpty()
				l.SetTraceID(o.asg.TraceID)
				l.SetSpanID(o.asg.SpanID)
				l.Attributes().PutStr(model.AttrLinkType, model.LinkTypeOwner)
			}
		}
	}
	if follows > 0 {
		p.tel.K8sObjectLinkTraceStateSpans.Add(ctx, int64(follows), metric.WithAttributes(attribute.String(attrResult, resultFollowed)))
	}
	if duplicates > 0 {
		p.tel.K8sObjectLinkSpansDropped.Add(ctx, int64(duplicates), metric.WithAttributes(attribute.String(attrReason, reasonDuplicate)))
	}
	if continued > 0 {
		p.tel.K8sObjectLinkTraceContinuations.Add(ctx, int64(continued), metric.WithAttributes(attribute.String(attrSpan, spanActivity)))
	}
	return remove, toHold
}

// holdItems holds the items at toHold and returns the batch's result so far: how many spans it
// held, the duplicate marks to undo if the batch is refused, and the object spans of spans that
// overflowed the hold (processed again, as roots, and appended to td).
func (p *objectLinkProcessor) holdItems(ctx context.Context, td ptrace.Traces, items []item, toHold []int, fresh bool) (res processResult) {
	heldPos, overflowObjects := p.holdSpans(ctx, td, items, toHold, fresh)
	res.held = len(heldPos)
	// A refused batch has its marks undone so that its redelivery passes; a held span stays in
	// our custody whatever the next consumer says, so its mark stays and catches the redelivery.
	for i := range items {
		if items[i].mark != "" && !heldPos[items[i].pos] {
			if res.marks == nil {
				// Sized at the first mark, keys only: undoing a mark is deleting its key.
				res.marks = make([]string, 0, len(items)-i)
			}
			res.marks = append(res.marks, items[i].mark)
		}
	}
	res.objects = overflowObjects
	return res
}

// emitObjectSpans appends to td one object span per assignment this replica wrote first,
// ancestors included, and records their nodes in res.
func (p *objectLinkProcessor) emitObjectSpans(ctx context.Context, td ptrace.Traces, r *resolver, res *processResult) {
	b := model.NewTracesBuilder(metadata.ScopeName, "")
	emitted, placed := 0, 0
	for _, n := range r.order {
		if n.state == stFinal && n.won {
			p.objectSpan(b, n)
			r.countSpans(n.asg.TraceID, 1)
			res.objects = append(res.objects, n)
			emitted++
			if n.placed() {
				emitted++ // its pointer span
				placed++
			}
		}
	}
	continued := 0
	for _, c := range r.conts {
		if c.emit {
			p.continuationSpan(b, c)
			r.countSpans(c.trace, 1)
			res.conts = append(res.conts, c)
			continued++
		}
	}
	if continued > 0 {
		p.tel.K8sObjectLinkTraceContinuations.Add(ctx, int64(continued), metric.WithAttributes(attribute.String(attrSpan, spanContinuation)))
	}
	if placed > 0 {
		p.tel.K8sObjectLinkTraceContextWindowsPlaced.Add(ctx, int64(placed))
	}
	if emitted > 0 || continued > 0 {
		// Continuation spans are object spans too: spans out = spans in + object spans emitted.
		p.tel.K8sObjectLinkObjectSpansEmitted.Add(ctx, int64(emitted+continued))
		b.Traces().ResourceSpans().MoveAndAppendTo(td.ResourceSpans())
	}
}

func countTrue(b []bool) int {
	n := 0
	for _, v := range b {
		if v {
			n++
		}
	}
	return n
}

func removeSpans(td ptrace.Traces, remove []bool) {
	pos := 0
	td.ResourceSpans().RemoveIf(func(rs ptrace.ResourceSpans) bool {
		rs.ScopeSpans().RemoveIf(func(ss ptrace.ScopeSpans) bool {
			ss.Spans().RemoveIf(func(ptrace.Span) bool {
				pos++
				// Spans appended after the walk (released overflow) are beyond the mask.
				return pos <= len(remove) && remove[pos-1]
			})
			return ss.Spans().Len() == 0
		})
		return rs.ScopeSpans().Len() == 0
	})
}
