package k8sobjectlinkprocessor

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/idmap"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/metadata"
)

// maxDepth bounds an ownership chain (model.MaxOwnerDepth, which the CLI shares): the top of a
// deeper chain becomes a root.
const maxDepth = model.MaxOwnerDepth

// maxRounds bounds the store round trips of one batch: one local round, then one remote
// round per ownership level that is new in the window.
const maxRounds = 2*maxDepth + 4

type nodeState uint8

const (
	stName   nodeState = iota // UID-less: resolve the name to a UID first
	stQuery                   // does the assignment exist?
	stOwner                   // it does not: find the owner (or decide root)
	stCreate                  // owner settled: write our candidate, first writer wins
	stFinal                   // assignment known
	stHeld                    // owner unknown, span held for owner_wait
	stAlias                   // merged into another node after name resolution
)

type nodeID struct {
	key    model.Key
	window int64
}

// node is one object in one window within one batch.
type node struct {
	id       nodeID
	obj      model.Object
	window   time.Time
	state    nodeState
	inflight bool

	asg     idmap.Assignment
	won     bool
	prev    idmap.Assignment
	hasPrev bool

	owner      *node
	root       bool // decided: no owner
	relQueried bool
	lookupDone bool
	localDone  bool

	// contexts are the trace contexts the batch's activity spans of this object link to
	// (trace_context links, each once); nodeName is a Pod's node as they name it.
	contexts []model.TraceContext
	nodeName string

	// ctx is the trace context the batch's last audit span of the object carried (nil: none; most
	// objects carry none, so it costs them a pointer).
	ctx *nodeContext

	// cont is the continuation trace this batch's activity spans of the node go to, when the
	// trace of its span is at max_spans_per_trace (contChecked: decided).
	cont        pcommon.TraceID
	contChecked bool

	direct     bool // activity spans of this batch belong to it
	gone       bool // its last audit span in the batch carried out deleted it (auditOutcome)
	force      bool // a span of it has waited owner_wait already: no more holding
	dependents int
	alias      *node
	deadline   time.Time
}

func (n *node) resolve() *node {
	for n.alias != nil {
		n = n.alias
	}
	return n
}

// item is one activity span of the batch.
type item struct {
	span        ptrace.Span
	pos         int // ordinal of the span within the batch, for removal
	node        *node
	dedup       bool // subject to duplicate detection
	dup         bool
	takenOver   bool // its mark was found pending past abandonAfter (marks.go): passed on again
	deadline    time.Time
	uidFromName bool
	mark        string // the duplicate mark this span set, if it was the first
	auditID     string // audit spans, with the apiserver join on
	// follow: the span carries the kubetrail trace-state member (a controller's work on the
	// object, or a span descending from it); only its trace changes (trace_context.go).
	// controller: it is the controller span itself; tsWindow: the member's window (Unix ns).
	follow, controller bool
	tsWindow           int64
}

// resolverCounts are added to the telemetry once per batch, not once per object: instruments
// with attributes cost allocations the hot path should not pay per span.
type resolverCounts struct {
	created, reused, relationHit, relationMiss int64
	grafts                                     int64 // trace contexts refused as grafts
}

func (r *resolver) report() {
	add := func(c metric.Int64Counter, n int64, attrs ...attribute.KeyValue) {
		if n > 0 {
			c.Add(r.ctx, n, metric.WithAttributes(attrs...))
		}
	}
	tel := r.deps.tel
	add(tel.K8sObjectLinkAssignments, r.count.created, attribute.String(attrResult, resultCreated))
	add(tel.K8sObjectLinkAssignments, r.count.reused, attribute.String(attrResult, resultReused))
	add(tel.K8sObjectLinkOwnerLookups, r.count.relationHit, attribute.String(attrSource, sourceRelation), attribute.String(attrResult, resultHit))
	add(tel.K8sObjectLinkOwnerLookups, r.count.relationMiss, attribute.String(attrSource, sourceRelation), attribute.String(attrResult, resultMiss))
	add(tel.K8sObjectLinkTraceContextGrafts, r.count.grafts)
}

// resolver settles the assignments of one batch: every object of the batch and all its
// ancestors, in as few store round trips as the ownership levels new in the window require.
type resolver struct {
	deps  resolverDeps
	ctx   context.Context
	now   time.Time
	nodes map[nodeID]*node
	order []*node
	names map[string]string // name key → UID learned from this batch's spans
	// gone are the name keys whose last audit span carried out in this batch is a delete
	// (auditOutcome).
	gone map[string]struct{}

	ops     []idmap.Op
	cbs     []func(*idmap.Op)
	count   resolverCounts
	writes  []idmap.Op // relation and name index writes, sent with the next round
	lookups []*node

	// conts are the continuation spans the batch needs (tracebudget.go), by span ID; spanCounts are
	// the spans the batch put in each trace.
	conts      map[pcommon.SpanID]*continuation
	spanCounts map[pcommon.TraceID]int64
}

// continuation is an object's span in a continuation trace: the parent of its spans, and of the
// objects it owns, that overflow the trace its own span is in.
type continuation struct {
	node  *node
	trace pcommon.TraceID
	span  pcommon.SpanID
	emit  bool // this replica set its mark first: it emits the span
}

// continueIn records that n's spans (or its owned objects') go on in trace t, and returns n's span
// there.
func (r *resolver) continueIn(n *node, t pcommon.TraceID) pcommon.SpanID {
	id := model.ContinuationSpanID(n.asg.SpanID, t)
	if r.conts == nil {
		r.conts = map[pcommon.SpanID]*continuation{}
	}
	if _, ok := r.conts[id]; !ok {
		r.conts[id] = &continuation{node: n, trace: t, span: id}
	}
	return id
}

// countSpans adds n spans put in trace t.
func (r *resolver) countSpans(t pcommon.TraceID, n int64) {
	if r.deps.budget == nil || t.IsEmpty() {
		return
	}
	if r.spanCounts == nil {
		r.spanCounts = map[pcommon.TraceID]int64{}
	}
	r.spanCounts[t] += n
}

// resolverDeps is what a resolver takes from the processor: the ID map, the owner look-up, the
// kind mapper, telemetry and the configuration values it reads. It is a value, filled per batch
// (the store, mapper and look-up are set at Start), so the resolver never reaches back into the
// processor.
type resolverDeps struct {
	store  idmap.Store
	mapper model.Mapper
	lookup *ownerLookup // nil without owner_lookup
	logger *zap.Logger
	tel    *metadata.TelemetryBuilder
	// forbidden is told of a look-up the apiserver refused for lack of RBAC.
	forbidden forbiddenReporter
	// budget says which traces are at max_spans_per_trace (nil: no bound).
	budget *traceBudget

	window, grace, relationTTL, ownerWait time.Duration
	relationTTLAfterDelete                time.Duration
	// markGrafts: trace_context.nest is on, so created assignments mark their derived trace and
	// object span for the graft check.
	markGrafts bool
}

// forbiddenReporter is told when the apiserver forbids an owner look-up of a resource, and
// whether owner_lookup.resources lists that resource, and of every look-up that failed otherwise.
type forbiddenReporter interface {
	lookupForbidden(gr schema.GroupResource, listed bool, err error)
	lookupFailed(err error)
}

// resolverDeps gives a batch's resolver what it needs from p.
func (p *objectLinkProcessor) resolverDeps() resolverDeps {
	return resolverDeps{
		store:       p.store,
		mapper:      p.mapper,
		lookup:      p.lookup,
		logger:      p.logger,
		tel:         p.tel,
		forbidden:   p,
		budget:      p.budget,
		window:      p.cfg.Window,
		grace:       p.cfg.Grace,
		relationTTL: p.cfg.RelationTTL,
		ownerWait:   p.cfg.OwnerWait,

		relationTTLAfterDelete: p.cfg.RelationTTLAfterDelete,
		markGrafts:             p.cfg.TraceContext.Nest,
	}
}

func newResolver(ctx context.Context, deps resolverDeps, now time.Time) *resolver {
	m := resolverMaps.Get().(*batchMaps)
	return &resolver{deps: deps, ctx: ctx, now: now, nodes: m.nodes, names: m.names, gone: m.gone, order: m.order}
}

// batchMaps are a resolver's indexes, kept from batch to batch so that a batch does not grow
// them anew: a map cleared keeps its buckets.
type batchMaps struct {
	nodes map[nodeID]*node
	names map[string]string
	gone  map[string]struct{}
	order []*node
}

var resolverMaps = sync.Pool{New: func() any {
	return &batchMaps{nodes: make(map[nodeID]*node), names: make(map[string]string), gone: make(map[string]struct{})}
}}

// maxPooledNodes is the most nodes a batch's indexes may have held and still go back to
// resolverMaps: a batch of unusually many objects leaves its large maps to the collector.
const maxPooledNodes = 4096

// release gives the resolver's indexes back for the next batch, cleared; the nodes themselves
// stay with whoever holds them (the emitted object spans, held spans). The resolver is not used
// afterwards.
func (r *resolver) release() {
	if len(r.order) > maxPooledNodes || len(r.names) > maxPooledNodes {
		return
	}
	clear(r.nodes)
	clear(r.names)
	clear(r.gone)
	clear(r.order)
	resolverMaps.Put(&batchMaps{nodes: r.nodes, names: r.names, gone: r.gone, order: r.order[:0]})
	r.nodes, r.names, r.gone, r.order = nil, nil, nil, nil
}

// node returns the batch's node of obj in window w, creating it.
func (r *resolver) node(obj model.Object, w time.Time) *node {
	if obj.UID == "" {
		var buf [128]byte
		if uid, ok := r.names[string(obj.AppendNameKey(buf[:0]))]; ok {
			obj.UID = uid
		}
	}
	id := nodeID{key: obj.Key(), window: w.UnixNano()}
	if n, ok := r.nodes[id]; ok {
		n = n.resolve()
		mergeIdentity(&n.obj, obj)
		return n
	}
	n := &node{id: id, obj: obj, window: w, state: stQuery}
	if obj.UID == "" {
		n.state = stName
	}
	r.nodes[id] = n
	r.order = append(r.order, n)
	return n
}

// mergeIdentity fills what one sighting of an object lacks from another.
func mergeIdentity(dst *model.Object, src model.Object) {
	if dst.Owner.IsZero() && !src.Owner.IsZero() {
		dst.Owner = src.Owner
	}
	dst.NoOwner = dst.NoOwner || src.NoOwner
	fill := func(d *string, s string) {
		if *d == "" {
			*d = s
		}
	}
	fill(&dst.Version, src.Version)
	fill(&dst.Resource, src.Resource)
	fill(&dst.Kind, src.Kind)
	fill(&dst.Name, src.Name)
	fill(&dst.Namespace, src.Namespace)
}

// linkOwner attaches n to the node of its owner in the same window, refusing self-references,
// cycles and chains deeper than maxDepth: those make n a root instead of a hang.
func (r *resolver) linkOwner(n *node) {
	if n.owner != nil || n.root {
		return
	}
	oobj, ok := n.obj.OwnerObject(r.deps.mapper)
	if !ok {
		return
	}
	if oobj.Key() == n.id.key {
		r.deps.logger.Debug("Object names itself as owner; treating it as a root", zap.String("object", string(n.id.key)))
		n.root = true
		return
	}
	o := r.node(oobj, n.window)
	depth := 0
	for a := o; a != nil; a = a.owner {
		if a == n || depth >= maxDepth {
			r.deps.logger.Debug("Ownership cycle or over-deep chain; treating the object as a root", zap.String("object", string(n.id.key)))
			n.root = true
			return
		}
		depth++
	}
	n.owner = o
	o.dependents++
	if n.force {
		// A span that has waited long enough makes its whole chain settle now.
		for a := o; a != nil && !a.force; a = a.owner {
			a.force = true
		}
	}
	if o.state == stHeld && n.force {
		// A forced dependent cannot wait: its owner settles now, as a root if still unknown.
		o.state = stOwner
	}
}

func (r *resolver) queue(op idmap.Op, cb func(*idmap.Op)) {
	r.ops = append(r.ops, op)
	r.cbs = append(r.cbs, cb)
}

func (r *resolver) asgExpiry(w time.Time) time.Time {
	// An assignment must outlive the following window, which links back to it, plus grace for
	// late spans. A window read long after the fact (a backlog) gets as long from now: a record
	// born expired would let every later span of that window emit the object span again.
	// A window ahead of now lives no longer than the window after now's would: a record's life
	// is bounded relative to now, whatever window a span names (a span of year 2200 must not
	// leave a record for 175 years).
	e := later(w.Add(2*r.deps.window+r.deps.grace), r.now.Add(r.deps.window+r.deps.grace))
	if limit := r.now.Add(3*r.deps.window + r.deps.grace); e.After(limit) {
		e = limit
	}
	return e
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// localRound settles from process memory what it can, without any network: assignments and,
// for objects whose owner the spans do not name, relation records, repeated while relations
// reveal new ancestors.
func (r *resolver) localRound() {
	done := 0
	for done < len(r.order) {
		var ops []idmap.Op
		var targets []*node
		var rel []bool
		for _, n := range r.order[done:] {
			if n.state != stQuery || n.localDone {
				continue
			}
			n.localDone = true
			ops = append(ops, idmap.Op{Kind: idmap.OpGet, Key: idmap.AssignmentKey(n.id.key, n.window), ExpireAt: r.asgExpiry(n.window)})
			targets, rel = append(targets, n), append(rel, false)
			if n.obj.Owner.IsZero() && n.id.key.HasUIDKey() {
				ops = append(ops, idmap.Op{Kind: idmap.OpGet, Key: idmap.RelationKey(n.id.key)})
				targets, rel = append(targets, n), append(rel, true)
			}
		}
		done = len(r.order)
		if len(ops) == 0 {
			return
		}
		authoritative := r.deps.store.Local(ops)
		for i, n := range targets {
			switch {
			case rel[i]:
				if owner, ok := idmap.DecodeOwner(ops[i].Value); ops[i].Found && ok {
					n.obj.Owner = owner
					r.count.relationHit++
				} else if authoritative {
					n.relQueried = true
					r.count.relationMiss++
				}
			case ops[i].Found:
				r.settle(n, ops[i].Value, false)
			case authoritative:
				n.state = stOwner
			}
		}
		// Owners learned here are linked now, so their assignments are asked in the next pass.
		for _, n := range targets {
			if n.state != stFinal && !n.obj.Owner.IsZero() {
				r.linkOwner(n)
			}
		}
	}
}

// settle records n's assignment as read or written.
func (r *resolver) settle(n *node, value string, won bool) {
	a, ok := idmap.DecodeAssignment(value)
	if !ok {
		// A malformed record under our prefix: derive the root assignment rather than fail.
		a = idmap.Assignment{TraceID: model.ObjectTraceID(n.id.key, n.window), SpanID: model.ObjectSpanID(n.id.key, n.window)}
	}
	n.asg, n.won, n.state = a, won, stFinal
	if won {
		r.count.created++
	} else {
		r.count.reused++
	}
}

// plan queues the operations n needs next and reports whether it changed state.
func (r *resolver) plan(n *node) bool {
	if n.inflight {
		return false
	}
	switch n.state {
	case stName:
		n.inflight = true
		r.queue(idmap.Op{Kind: idmap.OpGet, Key: idmap.NameKey(n.obj.NameKey())}, func(op *idmap.Op) {
			n.inflight = false
			n.state = stQuery
			if op.Found && op.Value != "" {
				r.rekey(n, op.Value)
			} else if uid, ok := r.names[n.obj.NameKey()]; ok {
				// A name new to the index, whose UID only a later span of this batch names
				// (r.node saw only the spans before it). The index, when it knows the name,
				// comes first: a UID later in the batch may be a recreate after this span.
				r.rekey(n, uid)
			}
		})
		return true
	case stQuery:
		if r.ownerReady(n) {
			r.create(n)
			return true
		}
		n.inflight = true
		// The expiry lets a cache in front keep what it reads: an assignment never changes.
		r.queue(idmap.Op{Kind: idmap.OpGet, Key: idmap.AssignmentKey(n.id.key, n.window), ExpireAt: r.asgExpiry(n.window)}, func(op *idmap.Op) {
			n.inflight = false
			if op.Found {
				r.settle(n, op.Value, false)
			} else if n.state == stQuery {
				n.state = stOwner
			}
		})
		if n.obj.Owner.IsZero() && n.id.key.HasUIDKey() && !n.relQueried {
			r.queueRelation(n)
		}
		return true
	case stOwner:
		if r.ownerReady(n) {
			r.create(n)
			return true
		}
		if n.owner != nil {
			if n.owner.resolve().state == stHeld {
				// The owner waits for its own owner, so the chain below it waits too: settling
				// now would fix this window's trace before the chain's top is known.
				n.state = stHeld
				return true
			}
			return false // waiting for the owner's own assignment
		}
		if !n.obj.Owner.IsZero() {
			r.linkOwner(n)
			return true
		}
		if n.obj.NoOwner {
			// Its own body named no owner: a root for certain, with nothing to wait for (never
			// held; see holdPolicy).
			n.root = true
			r.create(n)
			return true
		}
		if !n.relQueried && n.id.key.HasUIDKey() {
			r.queueRelation(n)
			return true
		}
		// Only the configured cluster's apiserver is asked, and only about its own objects.
		if r.deps.lookup != nil && !n.lookupDone && r.deps.lookup.serves(n.obj) {
			n.lookupDone = true
			r.lookups = append(r.lookups, n)
			return true
		}
		if mayHold(n, r.deps.ownerWait) {
			n.state = stHeld
			return true
		}
		n.root = true
		r.create(n)
		return true
	case stCreate:
		return false
	}
	return false
}

// ownerReady reports whether n's candidate assignment can be computed now.
func (r *resolver) ownerReady(n *node) bool {
	if n.root {
		return true
	}
	if n.owner == nil && !n.obj.Owner.IsZero() {
		r.linkOwner(n)
		if n.root {
			return true
		}
	}
	return n.owner != nil && n.owner.resolve().state == stFinal
}

func (r *resolver) queueRelation(n *node) {
	n.relQueried = true
	n.inflight = true
	r.queue(idmap.Op{Kind: idmap.OpGet, Key: idmap.RelationKey(n.id.key)}, func(op *idmap.Op) {
		n.inflight = false
		if owner, ok := idmap.DecodeOwner(op.Value); op.Found && ok {
			r.count.relationHit++
			if n.obj.Owner.IsZero() {
				n.obj.Owner = owner
			}
		} else {
			r.count.relationMiss++
		}
	})
}

// create writes n's candidate assignment; whoever wrote first, replica or batch, wins.
func (r *resolver) create(n *node) {
	var cand idmap.Assignment
	cand.SpanID = model.ObjectSpanID(n.id.key, n.window)
	if n.root || n.owner == nil {
		cand.TraceID = model.ObjectTraceID(n.id.key, n.window)
		if c := n.ctx; c != nil && c.fresh {
			if c.graft {
				// The context names an object's trace or span: nesting would graft this window
				// into another object's tree (docs/security.md, Doors). It keeps its own trace.
				r.count.grafts++
			} else {
				// A root created by a write that carries a fresh trace context joins that trace.
				cand.TraceID, cand.Parent = c.tc.TraceID, c.tc.SpanID
			}
		}
	} else {
		o := n.owner.resolve()
		cand.TraceID, cand.Parent = o.asg.TraceID, o.asg.SpanID
		if d := r.deps.budget.dest(o.asg.TraceID); d != o.asg.TraceID {
			// The owner's trace is full: the new object joins the continuation, under the
			// owner's span there.
			cand.TraceID, cand.Parent = d, r.continueIn(o, d)
		}
	}
	n.state = stCreate
	n.inflight = true
	if r.deps.markGrafts {
		// The object span is kubetrail's, and so is a root's derived trace (an owned object's
		// holds none of its spans): a trace context that names either nests nothing
		// (idmap.GraftTraceKey). Written by every candidate (same values whoever
		// wins), with the assignment's round trip and life.
		exp := r.asgExpiry(n.window)
		if n.root || n.owner == nil {
			r.writes = append(r.writes, idmap.Op{Kind: idmap.OpSet, Key: idmap.GraftTraceKey(model.ObjectTraceID(n.id.key, n.window)), ExpireAt: exp})
		}
		r.writes = append(r.writes, idmap.Op{Kind: idmap.OpSet, Key: idmap.GraftSpanKey(cand.SpanID), ExpireAt: exp})
	}
	r.queue(idmap.Op{Kind: idmap.OpSetIfAbsent, Key: idmap.AssignmentKey(n.id.key, n.window), Value: cand.Encode(), ExpireAt: r.asgExpiry(n.window)},
		func(op *idmap.Op) {
			n.inflight = false
			r.settle(n, op.Value, !op.Found)
		})
	prevW := n.window.Add(-r.deps.window)
	r.queue(idmap.Op{Kind: idmap.OpGet, Key: idmap.AssignmentKey(n.id.key, prevW), ExpireAt: r.asgExpiry(prevW)}, func(op *idmap.Op) {
		if a, ok := idmap.DecodeAssignment(op.Value); op.Found && ok {
			n.prev, n.hasPrev = a, true
		}
	})
}

// rekey moves a UID-less node to its UID once the name index names it.
func (r *resolver) rekey(n *node, uid string) {
	obj := n.obj
	obj.UID = uid
	id := nodeID{key: obj.Key(), window: n.id.window}
	if other, ok := r.nodes[id]; ok && other.resolve() != n {
		other = other.resolve()
		mergeIdentity(&other.obj, obj)
		other.direct = other.direct || n.direct
		other.force = other.force || n.force
		n.alias, n.state = other, stAlias
		return
	}
	n.obj, n.id = obj, id
	r.nodes[id] = n
}

// run settles every node, one store call per round.
func (r *resolver) run() {
	r.localRound()
	for round := 0; round < maxRounds; round++ {
		progressed := false
		for i := 0; i < len(r.order); i++ { // plan may append owner nodes
			if r.plan(r.order[i]) {
				progressed = true
			}
		}
		if len(r.ops) == 0 && len(r.writes) == 0 && len(r.lookups) == 0 {
			if !progressed {
				break
			}
			continue
		}
		r.flush()
		r.runLookups()
	}
	if len(r.writes) > 0 {
		r.flush()
	}
}

// flush sends the queued operations (plus pending writes) as one store batch.
func (r *resolver) flush() {
	ops, cbs := r.ops, r.cbs
	ops = append(ops, r.writes...)
	r.writes = nil
	r.ops, r.cbs = nil, nil
	if len(ops) == 0 {
		return
	}
	if err := r.deps.store.Do(r.ctx, ops); err != nil {
		// Only a closed store fails; every op is then "absent" and the nodes settle as roots
		// from derived IDs, so the spans still flow.
		r.deps.logger.Debug("ID map batch failed", zap.Error(err))
		for i := range ops {
			ops[i].Found = false
		}
	}
	for i, cb := range cbs {
		cb(&ops[i])
	}
}

// maxConcurrentLookups bounds the apiserver GETs one batch has in flight.
const maxConcurrentLookups = 16

// runLookups asks the apiserver about the round's objects concurrently: one after the other, a
// batch of new objects would hold the pipeline for a GET per object (owner_lookup.timeout each
// while the apiserver is slow or unreachable).
func (r *resolver) runLookups() {
	if len(r.lookups) == 0 {
		return
	}
	type answer struct {
		res   lookupResult
		owner model.Owner
		err   error
	}
	answers := make([]answer, len(r.lookups))
	sem := make(chan struct{}, maxConcurrentLookups)
	var wg sync.WaitGroup
	for i, n := range r.lookups {
		obj := n.obj
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			a := &answers[i]
			a.res, a.owner, a.err = r.deps.lookup.lookup(r.ctx, obj)
		})
	}
	wg.Wait()
	for i, n := range r.lookups {
		res, owner, err := answers[i].res, answers[i].owner, answers[i].err
		result := resultMiss
		switch {
		case apierrors.IsForbidden(err):
			result = resultForbidden
			gr := schema.GroupResource{Group: n.obj.Group, Resource: n.obj.Resource}
			r.deps.forbidden.lookupForbidden(gr, r.deps.lookup.listed(gr), err)
		case err != nil:
			result = resultError
			r.deps.logger.Debug("Owner look-up failed", zap.String("object", string(n.id.key)), zap.Error(err))
			r.deps.forbidden.lookupFailed(err)
		case res == lookupOwner:
			result = resultHit
			n.obj.Owner = owner
			r.writeRelation(n)
		case res == lookupRoot:
			result = resultHit
			n.root = true
		}
		r.deps.tel.K8sObjectLinkOwnerLookups.Add(r.ctx, 1, metric.WithAttributes(
			attribute.String(attrSource, sourceAPIServer), attribute.String(attrResult, result)))
	}
	r.lookups = r.lookups[:0]
}

// writeRelation refreshes the object → owner record so other replicas, and Events that name
// only the object, find the owner.
func (r *resolver) writeRelation(n *node) {
	if !n.id.key.HasUIDKey() || n.obj.Owner.IsZero() {
		return
	}
	r.writes = append(r.writes, idmap.Op{Kind: idmap.OpSet, Key: idmap.RelationKey(n.id.key), Value: idmap.EncodeOwner(n.obj.Owner),
		ExpireAt: r.now.Add(r.relationTTL(n.gone))})
}

// relationTTL is the life a relation or name index record gets from a sighting: relation_ttl, or
// relation_ttl_after_delete when the sighting was the object's deletion.
func (r *resolver) relationTTL(gone bool) time.Duration {
	if gone {
		return r.deps.relationTTLAfterDelete
	}
	return r.deps.relationTTL
}

// sawName notes whether an audit span carried out on the object named by the name key k deleted
// it: the batch's last such span of a name decides its name index record's life.
func (r *resolver) sawName(k []byte, deleted bool) {
	if deleted {
		r.gone[string(k)] = struct{}{}
	} else if len(r.gone) > 0 {
		delete(r.gone, string(k))
	}
}

// auditOutcome says whether the apiserver carried out an audit span's request (a 2xx answer) and
// whether that request deleted the object: it is gone or going (a graceful delete, finalizers),
// and what the ID map keeps of it needs to outlive it only by relation_ttl_after_delete. A later
// write carried out on an object still there keeps it longer again.
func auditOutcome(attrs pcommon.Map) (carriedOut, deleted bool) {
	code, ok := attrs.Get(model.AttrHTTPStatusCode)
	if !ok || code.Int() < 200 || code.Int() >= 300 {
		return false, false
	}
	if v, ok := attrs.Get(model.AttrAuditVerb); !ok || v.Str() != "delete" {
		return true, false
	}
	_, sub := attrs.Get(model.AttrAuditSubresource)
	return true, !sub
}
