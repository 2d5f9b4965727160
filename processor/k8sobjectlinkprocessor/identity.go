package k8sobjectlinkprocessor

import (
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/kubetrail/kubetrail/internal/model"
)

// Spans of other components placed by the object they name (doors.identity). The kubelet traces
// each pod sync as a root span, syncPod, with k8s.pod.uid, and the CRI calls it makes as its
// children; nothing links them to the Pod. A guest (an untrusted door's span, doors.go) of a
// service in doors.identity.services that carries a semantic-convention UID (k8s.pod.uid, …, on
// the span or its Resource; model.SemconvUID) follows that object's existing assignment in the
// window its start falls in, as a guest naming the object through the trace-state member does:
//
//   - it moves into the object's window trace, and a root span (no parent) goes under the
//     object's span;
//   - the other spans of its trace (its descendants, which name no object: the CRI calls) follow
//     it: in the same batch, and in later batches through movedTraces (doors.identity.max_traces
//     traces, for a window and its grace). A descendant seen before its root waits, as a guest
//     waits for an assignment, up to doors.identity.wait in the guests' hold
//     (doors.max_waiting_spans), then passes as it came; one whose root is known to stay (it
//     names nothing, or an object that cannot be followed) passes at once;
//   - it never creates or changes an assignment: an object kubetrail never saw, a window far from
//     now (doors.follow_windows), a trace past max_spans_per_trace, or a span without a cluster
//     (no k8s.cluster.name and no doors.identity.cluster) leaves it as it came, counted.
//
// Moving a span to another trace is what lets a backend show it in the Pod's trace; a span of
// the same original trace that does not pass through this processor (another collector's) is
// left in the old trace.

// identityGuestOf returns the guest of an untrusted door's span placed by identity: one naming
// an object by the semantic conventions, or a descendant (a span with a parent that names
// none) of a service placed by identity. counted says whether a span that is no guest is one
// identity placement concerned (it passes, counted); a span of another service is not.
func (p *objectLinkProcessor) identityGuestOf(s ptrace.Span, pos int, resAttrs, attrs pcommon.Map, hold holdPolicy, now time.Time) (g guest, ok, counted bool) {
	svc, _ := resAttrs.Get(model.AttrServiceName)
	if p.identityServices == nil || !p.identityServices[svc.Str()] {
		return guest{}, false, false
	}
	uid, _, named := model.SemconvUID(resAttrs, attrs)
	if !named {
		if s.ParentSpanID().IsEmpty() {
			// A root naming nothing (the kubelet's image garbage collection): not about an
			// object, and neither are the spans of its trace, which need not wait for it.
			p.stays.put(s.TraceID(), pcommon.TraceID{}, now)
			return guest{}, false, false
		}
		g = guest{span: s, pos: pos, descendant: true, origTrace: s.TraceID()}
		g.deadline, g.force = p.identityHold(hold, pos)
		return g, true, true
	}
	cluster := p.cfg.Doors.Identity.Cluster
	for _, m := range [2]pcommon.Map{attrs, resAttrs} {
		if v, found := m.Get(model.AttrClusterName); found && v.Str() != "" {
			cluster = v.Str()
			break
		}
	}
	// The UID and the cluster become an ID-map key: bounded as the receivers bound them.
	if cluster == "" || len(uid) > model.MaxTokenBytes || model.ValidateClusterName(cluster) != nil {
		p.unplaced(s, now)
		return guest{}, false, true
	}
	w := model.WindowStart(s.StartTimestamp().AsTime(), p.cfg.Window)
	if !p.followable(w, now) {
		p.unplaced(s, now)
		return guest{}, false, true
	}
	g = guest{span: s, pos: pos, id: nodeID{key: model.UIDKey(cluster, uid), window: w.UnixNano()}, identity: true, origTrace: s.TraceID()}
	g.deadline, g.force = p.identityHold(hold, pos)
	return g, true, true
}

// unplaced records that a root's trace stays where it is, so that its other spans pass at once
// rather than wait for it.
func (p *objectLinkProcessor) unplaced(s ptrace.Span, now time.Time) {
	if s.ParentSpanID().IsEmpty() {
		p.stays.put(s.TraceID(), pcommon.TraceID{}, now)
	}
}

// identityHold is until when a span placed by identity may wait: doors.identity.wait from now
// for a fresh span, its deadline for a span waiting already.
func (p *objectLinkProcessor) identityHold(hold holdPolicy, pos int) (time.Time, bool) {
	deadline, force := hold.span(pos)
	if w := p.cfg.Doors.Identity.Wait; hold.deadlines == nil && !force && w > 0 {
		deadline = hold.now.Add(w)
	}
	return deadline, force
}

// movedTraces remembers the traces identity guests moved: original trace ID → the object's
// window trace (p.moved); and, apart, so that the kubelet's many other roots (its HTTP server's,
// image garbage collection) cannot push those out, the traces whose root stays where it is, as
// the zero trace ID (p.stays: it names no object, or one that cannot be followed). At most max
// entries each; the oldest goes first (a ring of keys), and an entry older than ttl is not
// followed.
type movedTraces struct {
	mu   sync.Mutex
	ttl  time.Duration
	m    map[pcommon.TraceID]movedTrace
	ring []pcommon.TraceID
	next int
}

type movedTrace struct {
	to pcommon.TraceID
	at time.Time
}

func newMovedTraces(maxTraces int, ttl time.Duration) *movedTraces {
	return &movedTraces{ttl: ttl, m: make(map[pcommon.TraceID]movedTrace), ring: make([]pcommon.TraceID, maxTraces)}
}

// put records that from moved to to; the first move of a trace stands (its root's).
func (t *movedTraces) put(from, to pcommon.TraceID, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.m[from]; ok && now.Sub(old.at) <= t.ttl {
		return
	}
	if _, ok := t.m[from]; !ok {
		if victim := t.ring[t.next]; !victim.IsEmpty() {
			delete(t.m, victim)
		}
		t.ring[t.next] = from
		t.next = (t.next + 1) % len(t.ring)
	}
	t.m[from] = movedTrace{to: to, at: now}
}

func (t *movedTraces) get(from pcommon.TraceID, now time.Time) (pcommon.TraceID, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.m[from]
	if !ok || now.Sub(e.at) > t.ttl {
		return pcommon.TraceID{}, false
	}
	return e.to, true
}

func (t *movedTraces) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}
