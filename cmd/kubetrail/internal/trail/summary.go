package trail

import (
	"sort"
	"time"
)

// Summary answers "why is it slow" from the spans: how long the object's story took from the
// first write a user made to the last thing any object of the tree did, the longest waits between
// one step and the next, and whose turn it was during those waits.
type Summary struct {
	From, To Activity
	Total    time.Duration
	// Waits are the longest idle gaps, longest first: nothing of the tree was in flight between
	// After's end and Before's start.
	Waits []Wait
	// WaitingOn sums the gaps by the actor that acted next: the component everyone was waiting on.
	WaitingOn []ActorWait
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

// ActorWait is the time spent waiting on one actor.
type ActorWait struct {
	Actor string        `json:"actor"`
	Total time.Duration `json:"-"`
	Count int           `json:"waits"`
}

// maxWaits is how many gaps the summary lists.
const maxWaits = 3

// Summarize computes the summary of n's subtree; ok is false when it has no activity.
func Summarize(n *Node) (Summary, bool) {
	acts := n.AllActivity()
	if len(acts) == 0 {
		return Summary{}, false
	}
	start := 0
	for i, a := range acts {
		if a.Span.IsUser() && a.Span.IsWrite() {
			start = i
			break
		}
	}
	acts = acts[start:]
	sum := Summary{From: acts[0], To: acts[0]}
	frontier := acts[0].Span.End
	busyFrom := acts[0].Span.Start
	var waits []Wait
	perActor := map[string]*ActorWait{}
	last := acts[0]
	for _, a := range acts[1:] {
		if a.Span.End.After(sum.To.Span.End) {
			sum.To = a
		}
		if gap := a.Span.Start.Sub(frontier); gap > 0 && a.Span.IsUser() {
			// A user's next command is think time, not the system being slow.
			sum.UserPause += gap
			sum.Busy += frontier.Sub(busyFrom)
			busyFrom = a.Span.Start
		} else if gap > 0 {
			waits = append(waits, Wait{After: last, Before: a, Gap: gap})
			aw := perActor[a.Span.Actor()]
			if aw == nil {
				aw = &ActorWait{Actor: a.Span.Actor()}
				perActor[aw.Actor] = aw
			}
			aw.Total += gap
			aw.Count++
			sum.Busy += frontier.Sub(busyFrom)
			busyFrom = a.Span.Start
		}
		if a.Span.End.After(frontier) {
			frontier = a.Span.End
			last = a
		}
	}
	sum.Busy += frontier.Sub(busyFrom)
	sum.Total = sum.To.Span.End.Sub(sum.From.Span.Start)
	sort.SliceStable(waits, func(i, j int) bool { return waits[i].Gap > waits[j].Gap })
	if len(waits) > maxWaits {
		waits = waits[:maxWaits]
	}
	sum.Waits = waits
	for _, aw := range perActor {
		sum.WaitingOn = append(sum.WaitingOn, *aw)
	}
	sort.Slice(sum.WaitingOn, func(i, j int) bool {
		if sum.WaitingOn[i].Total != sum.WaitingOn[j].Total {
			return sum.WaitingOn[i].Total > sum.WaitingOn[j].Total
		}
		return sum.WaitingOn[i].Actor < sum.WaitingOn[j].Actor
	})
	return sum, true
}
