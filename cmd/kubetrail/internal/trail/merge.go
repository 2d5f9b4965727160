package trail

import (
	"fmt"
	"sort"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/kubetrail/kubetrail/internal/model"
)

// Node is one object in the merged tree: its object spans of every window, the activity (audit
// and event spans) of all of them in time order, and the objects it owns.
type Node struct {
	Object   model.Object
	Cluster  string
	Windows  []*Span // object spans, one per window, in window order
	Spans    []*Span // activity, in time order
	Children []*Node
	Depth    int
	// Cut is how many objects this node owns that the tree leaves out because they sit deeper
	// than model.MaxOwnerDepth below the root: the processor never nests deeper, so such a
	// chain in a backend is forged or broken, and following it would cost the reader's memory
	// (and a JSON nesting no decoder reads back).
	Cut int
}

// Filter narrows what the tree shows.
type Filter struct {
	Since, Until time.Time
	// Depth is how many levels of owned objects to keep; negative keeps all.
	Depth int
	// Only is "", "errors", "writes" or "events".
	Only string
}

// ValidOnly lists the values of --only.
var ValidOnly = []string{"errors", "writes", "events"}

func (f Filter) keep(s *Span) bool {
	if !overlaps(s, f.Since, f.Until) {
		return false
	}
	switch f.Only {
	case "errors":
		return s.Failed()
	case "writes":
		return s.IsWrite()
	case "events":
		return s.Type == model.SpanTypeEvent
	}
	return true
}

type identity string

func identityOf(s *Span) identity {
	if s.Object.UID != "" {
		return identity(s.Cluster + "/uid/" + s.Object.UID)
	}
	return identity(s.Cluster + "/name/" + s.Object.Kind + "/" + s.Object.Namespace + "/" + s.Object.Name)
}

// Merge arranges the spans into one tree rooted at the object with the given UID (or, without
// one, the first object span matching t): every window's object span of an object joins one
// node, owned objects sit under their owner, activity sits under the object it concerns.
func Merge(spans []*Span, t Target, uid string, f Filter) (*Node, error) {
	type ref struct {
		tr pcommon.TraceID
		sp pcommon.SpanID
	}
	byRef := make(map[ref]*Span, len(spans))
	var uniq []*Span
	for _, s := range spans {
		r := ref{s.TraceID, s.SpanID}
		if _, dup := byRef[r]; dup {
			continue // a trace fetched twice, or a span exported twice
		}
		byRef[r] = s
		uniq = append(uniq, s)
	}
	// placedWindows are the object spans a pointer can stand for: by trace, object and window.
	type placedKey struct {
		tr    pcommon.TraceID
		id    identity
		start int64
	}
	placedWindows := map[placedKey]bool{}
	for _, s := range uniq {
		if _, pointer := s.PlacedIn(); s.IsObject() && !pointer {
			placedWindows[placedKey{s.TraceID, identityOf(s), s.Start.UnixNano()}] = true
		}
	}
	nodes := map[identity]*Node{}
	childIDs := map[identity]map[identity]bool{}
	node := func(s *Span) *Node {
		id := identityOf(s)
		n := nodes[id]
		if n == nil {
			n = &Node{Object: s.Object, Cluster: s.Cluster}
			nodes[id] = n
		}
		return n
	}
	// objectOf is the nearest object span at or above s in its trace.
	objectOf := func(s *Span) *Span {
		for i := 0; i < 256 && s != nil; i++ {
			if s.IsObject() {
				return s
			}
			s = byRef[ref{s.TraceID, s.ParentID}]
		}
		return nil
	}
	var root identity
	for _, s := range uniq {
		if !s.IsObject() {
			continue
		}
		n := node(s)
		if placed, ok := s.PlacedIn(); ok && placedWindows[placedKey{placed, identityOf(s), s.Start.UnixNano()}] {
			// A pointer, in the object's derived trace, to its window placed in a trace
			// context: the window is the object's span of the same window there, read too.
			continue
		}
		if s.Str(model.AttrTraceContinues) == "" {
			// An object's span in a continuation trace is the same window again: what is
			// under it joins the object's node, the window is counted once.
			n.Windows = append(n.Windows, s)
		}
		if root == "" && matchesTarget(s, t) && (uid == "" || s.Object.UID == uid) {
			root = identityOf(s)
		}
		// The owner is the parent object span. An object span under another kind of span (the
		// span of the CI step whose trace context the object carried) is a root.
		if p := byRef[ref{s.TraceID, s.ParentID}]; p != nil && p.IsObject() {
			pid := identityOf(p)
			if childIDs[pid] == nil {
				childIDs[pid] = map[identity]bool{}
			}
			childIDs[pid][identityOf(s)] = true
		}
	}
	if root == "" {
		return nil, fmt.Errorf("%w: %s: no object span in the traces read", ErrUnknownObject, t)
	}
	for _, s := range uniq {
		s.Parts = nil // built afresh: a span may be merged again
	}
	for _, s := range uniq {
		if s.IsObject() || !f.keep(s) {
			continue
		}
		if s.IsComponent() {
			// Under another component's span (the kubelet's CRI calls under its syncPod): a part
			// of the topmost one, which is the activity.
			top := s
			for i := 0; i < 256; i++ {
				p := byRef[ref{top.TraceID, top.ParentID}]
				if p == nil || !p.IsComponent() {
					break
				}
				top = p
			}
			if top != s {
				top.Parts = append(top.Parts, s)
				continue
			}
		}
		o := objectOf(byRef[ref{s.TraceID, s.ParentID}])
		var n *Node
		if o != nil {
			n = nodes[identityOf(o)]
		} else if s.Object.UID != "" {
			// A span whose parent was not exported (or was cut by the backend): its own
			// identity still says which object it concerns.
			n = nodes[identityOf(s)]
		}
		if n != nil {
			n.Spans = append(n.Spans, s)
		}
	}
	var build func(id identity, depth int, seen map[identity]bool) *Node
	build = func(id identity, depth int, seen map[identity]bool) *Node {
		n := nodes[id]
		seen[id] = true
		n.Depth = depth
		sortSpans(n.Windows)
		sortSpans(n.Spans)
		for _, s := range n.Spans {
			sortSpans(s.Parts)
		}
		if f.Depth >= 0 && depth >= f.Depth {
			return n
		}
		var kids []identity
		for c := range childIDs[id] {
			if !seen[c] {
				kids = append(kids, c)
			}
		}
		if depth >= model.MaxOwnerDepth {
			n.Cut = len(kids)
			return n
		}
		for _, c := range kids {
			child := build(c, depth+1, seen)
			if f.Only != "" && child.count() == 0 {
				continue // --only: keep the paths that lead to something shown
			}
			n.Children = append(n.Children, child)
		}
		sort.SliceStable(n.Children, func(i, j int) bool {
			a, b := n.Children[i].First(), n.Children[j].First()
			if !a.Equal(b) {
				return a.Before(b)
			}
			return n.Children[i].Object.DisplayName() < n.Children[j].Object.DisplayName()
		})
		return n
	}
	r := build(root, 0, map[identity]bool{})
	if r.count() == 0 {
		return r, ErrNoSpans
	}
	return r, nil
}

func sortSpans(s []*Span) {
	sort.SliceStable(s, func(i, j int) bool {
		if !s[i].Start.Equal(s[j].Start) {
			return s[i].Start.Before(s[j].Start)
		}
		if s[i].Name != s[j].Name {
			return s[i].Name < s[j].Name
		}
		return s[i].SpanID.String() < s[j].SpanID.String()
	})
}

// CutBelow is how many owned objects the tree leaves out below the owner-chain bound, in all
// (Node.Cut).
func (n *Node) CutBelow() int {
	c := 0
	n.Walk(func(x *Node) { c += x.Cut })
	return c
}

// count is the number of activity spans in the subtree.
func (n *Node) count() int {
	c := len(n.Spans)
	for _, k := range n.Children {
		c += k.count()
	}
	return c
}

// Walk calls fn for n and every node below it, depth first, in display order.
func (n *Node) Walk(fn func(*Node)) {
	fn(n)
	for _, c := range n.Children {
		c.Walk(fn)
	}
}

// First is the start of the node's first activity, or of its first window.
func (n *Node) First() time.Time {
	if len(n.Spans) > 0 {
		return n.Spans[0].Start
	}
	if len(n.Windows) > 0 {
		return n.Windows[0].Start
	}
	return time.Time{}
}

// Lifetime is what the activity says about the object's life: created and deleted are zero when
// no successful create or delete is among the spans; first and last bound all activity.
func (n *Node) Lifetime() (created, deleted, first, last time.Time) {
	for _, s := range n.Spans {
		if first.IsZero() || s.Start.Before(first) {
			first = s.Start
		}
		if s.End.After(last) {
			last = s.End
		}
		if s.Failed() || s.Type != model.SpanTypeAudit || s.Str(model.AttrAuditSubresource) != "" {
			continue
		}
		switch s.Str(model.AttrAuditVerb) {
		case "create":
			if created.IsZero() {
				created = s.Start
			}
		case "delete":
			deleted = s.End
		}
	}
	return created, deleted, first, last
}

// AllActivity is every activity span of the subtree with its node, in time order.
func (n *Node) AllActivity() []Activity {
	var out []Activity
	n.Walk(func(x *Node) {
		for _, s := range x.Spans {
			out = append(out, Activity{Span: s, Node: x})
		}
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].Span.Start.Before(out[j].Span.Start) })
	return out
}

// Extent is the time axis of n's activity: from the first activity's start to the last one's
// end, and its length (at least 1 ms, so that positions can divide by it); ok is false when
// there is no activity.
func (n *Node) Extent() (start, end time.Time, length time.Duration, ok bool) {
	acts := n.AllActivity()
	if len(acts) == 0 {
		return start, end, 0, false
	}
	start, end = acts[0].Span.Start, acts[0].Span.End // sorted by start
	for _, a := range acts {
		if a.Span.End.After(end) {
			end = a.Span.End
		}
	}
	return start, end, max(end.Sub(start), time.Millisecond), true
}

// Activity is one activity span and the object it concerns.
type Activity struct {
	Span *Span
	Node *Node
}
