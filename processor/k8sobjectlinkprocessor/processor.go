package k8sobjectlinkprocessor

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/kubetrail/kubetrail/internal/k8sconfig"
	"github.com/kubetrail/kubetrail/internal/model"
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
	joinPending waitingWrites

	// confirms are the duplicate marks of batches the next consumer took, for Redis with the
	// next batch's first round trip (marks.go).
	confirms waitingWrites

	heldMu sync.Mutex
	held   []heldSpan
	// waiting are spans of untrusted doors waiting for their object's assignment: a hold of
	// their own (doors.max_waiting_spans), so that they cannot push held spans out (doors.go).
	waiting []heldSpan
	// identityServices are doors.identity.services (nil: off); moved the traces identity guests
	// moved, for their later spans (identity.go).
	identityServices map[string]bool
	moved, stays     *movedTraces
	// indexed are the linked-context records written lately (linked.go).
	indexed *indexedContexts
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
	p.indexed = newIndexedContexts(cfg.Window)
	if id := cfg.Doors.Identity; len(id.Services) > 0 {
		p.identityServices = make(map[string]bool, len(id.Services))
		for _, s := range id.Services {
			p.identityServices[s] = true
		}
		p.moved = newMovedTraces(id.MaxTraces, cfg.Window+cfg.Grace)
		p.stays = newMovedTraces(id.MaxTraces, cfg.Window+cfg.Grace)
	}
	evicted := func(reason string) {
		tel.K8sObjectLinkIDMapEvictions.Add(context.Background(), 1, metric.WithAttributes(attribute.String(attrReason, reason)))
	}
	mem := idmap.NewMemoryStore(cfg.IDMap.Memory, clk.Now, evicted)
	if err := registerIDMapSize(tel, mem); err != nil {
		return nil, err
	}
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
	var confirmTick <-chan time.Time
	if p.redis != nil {
		// Marks wait for the next batch's round trip; a replica whose stream pauses confirms
		// them well within abandonAfter all the same (marks.go).
		t := p.clock.NewTicker(abandonAfter / 3)
		confirmTick = t.C()
		stopRelease := stopTick
		stopTick = func() { stopRelease(); t.Stop() }
	}
	go p.releaseLoop(tick, confirmTick, stopTick)
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
		// Audit records and duplicate marks' confirmations still waiting for a batch's round
		// trip go out now (one round trip at shutdown), so that another replica can still join
		// their request spans and knows those spans were passed on.
		if ops := append(p.joinPending.take(), p.confirms.take()...); len(ops) > 0 {
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
		p.tel.Shutdown() // the ID map's gauges
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
		if p.redis != nil {
			p.confirmMarks(res.marks)
		}
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
