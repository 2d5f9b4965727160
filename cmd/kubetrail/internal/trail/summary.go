package trail

import (
	"sort"
	"strings"
	"time"

	"github.com/kubetrail/kubetrail/internal/model"
)

// Summary answers "why is it slow" from the spans: how long the object's story took from the
// first write a user made until the tree was ready (or, when the spans do not tell readiness,
// until the last thing any object of the tree did), the longest waits between one step and the
// next, and whose turn it was during those waits.
type Summary struct {
	From, To Activity
	// Ready is true when To is the write that made the tree ready (Why says what it made ready);
	// false when readiness could not be told from the spans and To is the last activity.
	Ready bool
	Why   string
	Total time.Duration
	// Waits are the longest idle gaps, longest first: nothing of the tree was in flight between
	// After's end and Before's start.
	Waits []Wait
	// WaitingOn sums the gaps by the actor that acted next: the component everyone was waiting
	// on; ByRole sums them by its role (Actor holds the role: scheduler, controllers, …).
	WaitingOn, ByRole []ActorWait
	// Busy is the time requests of the tree were in flight.
	Busy time.Duration
	// UserPause is the idle time before the user's own later writes (not counted as waits).
	UserPause time.Duration
}

// Wait is one idle gap.
type Wait struct {
	After, Before Activity
	Gap           time.Duration
}

// ActorWait is the time spent waiting on one actor (or role).
type ActorWait struct {
	Actor string        `json:"actor"`
	Total time.Duration `json:"-"`
	Count int           `json:"waits"`
}

// Roles of the actors, for "waiting on".
const (
	RoleUser       = "user"
	RoleScheduler  = "scheduler"
	RoleController = "controllers"
	// RoleTracedController is a controller's own work, from its controller spans
	// (kubetrail.span.type controller, pkg/objecttrace); RoleController is the controllers as
	// the audit log shows them, by their writes.
	RoleTracedController = "traced controller"
	RoleNodeAgent        = "node agent"
	RoleOther            = "other"
)

// roles gives every activity span its actor's role: the scheduler; controllers (the controller
// manager and every service account: operators run as service accounts too); traced controllers
// (a controller's own spans of its work on the object); node agents (the
// kubelets, system:node:…, and any other client that writes Pod status, as kwok does for its
// fake nodes); users (any other client); other components of the control plane.
func roles(acts []Activity) map[*Span]string {
	nodeAgents := map[string]bool{}
	for _, a := range acts {
		s := a.Span
		if s.Type == model.SpanTypeAudit && s.IsWrite() && a.Node.Object.Kind == "Pod" && s.Str(model.AttrAuditSubresource) == "status" &&
			!strings.HasPrefix(s.Str(model.AttrUserName), "system:") {
			nodeAgents[s.Str(model.AttrUserName)] = true
		}
	}
	out := make(map[*Span]string, len(acts))
	for _, a := range acts {
		out[a.Span] = roleOf(a.Span, nodeAgents)
	}
	return out
}

func roleOf(s *Span, nodeAgents map[string]bool) string {
	if s.Type == model.SpanTypeController {
		return RoleTracedController
	}
	if s.IsComponent() || s.Type == model.SpanTypeLinked {
		// Another component's span in the object's trace (or one that links to its context):
		// the kubelet's syncs are the node's, the scheduler's attempts the scheduler's.
		svc, _ := s.Resource[model.AttrServiceName].(string)
		switch {
		case svc == "kubelet":
			return RoleNodeAgent
		case strings.Contains(svc, "scheduler"):
			return RoleScheduler
		}
		return RoleOther
	}
	if s.Type == model.SpanTypeEvent {
		c := s.Actor()
		switch {
		case strings.Contains(c, "scheduler"):
			return RoleScheduler
		case strings.HasPrefix(c, "kubelet"):
			return RoleNodeAgent
		case c == "?":
			return RoleOther
		}
		return RoleController
	}
	u := s.Str(model.AttrUserName)
	switch {
	case u == "system:kube-scheduler":
		return RoleScheduler
	case u == "system:kube-controller-manager" || strings.HasPrefix(u, "system:serviceaccount:"):
		return RoleController
	case strings.HasPrefix(u, "system:node:") || nodeAgents[u]:
		return RoleNodeAgent
	case s.IsUser():
		return RoleUser
	}
	return RoleOther
}

// maxWaits is how many gaps the summary lists.
const maxWaits = 3

// Summarize computes the summary of n's subtree; ok is false when it has no activity.
func Summarize(n *Node) (Summary, bool) {
	all := n.AllActivity()
	return summarize(n, all, all, activityRange{})
}

// SummarizeGenerations computes one summary per generation of the root (Generations), over the
// activity of the generation's time range; a generation without activity is left out.
func SummarizeGenerations(n *Node, gens []Generation) ([]Generation, []Summary) {
	var gs []Generation
	var sums []Summary
	all := n.AllActivity()
	for i, acts := range byGeneration(all, gens) {
		if sum, ok := summarize(n, acts, all, activityRange{gens[i].Start, gens[i].End}); ok {
			gs, sums = append(gs, gens[i]), append(sums, sum)
		}
	}
	return gs, sums
}

// summarize summarizes acts, the activity of rng; all is every activity of the tree, which
// readiness replays for the objects' states.
func summarize(n *Node, acts, all []Activity, rng activityRange) (Summary, bool) {
	if len(acts) == 0 {
		return Summary{}, false
	}
	role := roles(acts)
	ready, isReady := readiness(n, all, rng)
	start := 0
	for i, a := range acts {
		if role[a.Span] == RoleUser && a.Span.IsWrite() {
			start = i
			break
		}
	}
	acts = acts[start:]
	sum := Summary{From: acts[0], To: acts[0]}
	// The end: the moment the tree was ready, or the end of the last activity.
	var end time.Time
	if isReady && ready.At.Span.End.After(sum.From.Span.Start) {
		sum.To, sum.Ready, sum.Why = ready.At, true, ready.Why
		end = ready.At.Span.End
	} else {
		for _, a := range acts {
			if a.Span.End.After(sum.To.Span.End) {
				sum.To = a
			}
		}
		end = sum.To.Span.End
	}
	frontier := earlier(acts[0].Span.End, end)
	busyFrom := acts[0].Span.Start
	var waits []Wait
	perActor, perRole := map[string]*ActorWait{}, map[string]*ActorWait{}
	add := func(m map[string]*ActorWait, key string, gap time.Duration) {
		aw := m[key]
		if aw == nil {
			aw = &ActorWait{Actor: key}
			m[key] = aw
		}
		aw.Total += gap
		aw.Count++
	}
	last := acts[0]
	for _, a := range acts[1:] {
		if !a.Span.Start.Before(end) {
			break // after the tree was ready
		}
		if gap := a.Span.Start.Sub(frontier); gap > 0 && role[a.Span] == RoleUser {
			// A user's next command is think time, not the system being slow.
			sum.UserPause += gap
			sum.Busy += frontier.Sub(busyFrom)
			busyFrom = a.Span.Start
		} else if gap > 0 {
			waits = append(waits, Wait{After: last, Before: a, Gap: gap})
			add(perActor, a.Span.Actor(), gap)
			add(perRole, role[a.Span], gap)
			sum.Busy += frontier.Sub(busyFrom)
			busyFrom = a.Span.Start
		}
		if e := earlier(a.Span.End, end); e.After(frontier) {
			frontier = e
			last = a
		}
	}
	sum.Busy += frontier.Sub(busyFrom)
	sum.Total = end.Sub(sum.From.Span.Start)
	sort.SliceStable(waits, func(i, j int) bool { return waits[i].Gap > waits[j].Gap })
	if len(waits) > maxWaits {
		waits = waits[:maxWaits]
	}
	sum.Waits = waits
	sum.WaitingOn, sum.ByRole = sortedWaits(perActor), sortedWaits(perRole)
	return sum, true
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func sortedWaits(m map[string]*ActorWait) []ActorWait {
	var out []ActorWait
	for _, aw := range m {
		out = append(out, *aw)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Total != out[j].Total {
			return out[i].Total > out[j].Total
		}
		return out[i].Actor < out[j].Actor
	})
	return out
}
