package trail

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/kubetrail/kubetrail/internal/model"
)

// Target is the object asked for.
type Target struct {
	Kind      string // as the spans name it: "Deployment"
	Group     string
	Resource  string
	Namespace string
	Name      string
	Cluster   string
	UID       string // optional: known identity, the windows' trace IDs are computed from it
	// RootUID is optional: the UID of the object's root owner (the top of its chain of
	// controlling owners, as the cluster tells it). An owned object's window spans live in its
	// root's traces, so with a cluster these are computed too.
	RootUID string
}

func (t Target) String() string {
	if t.Namespace == "" {
		return t.Kind + " " + t.Name
	}
	return t.Kind + " " + t.Namespace + "/" + t.Name
}

// Query is what to find.
type Query struct {
	Target Target
	// Since and Until bound the activity shown; windows overlapping them are fetched.
	Since, Until time.Time
	// Window is the collector's window (the processor's `window`).
	Window time.Duration
}

// Errors a caller can tell apart; each message says what to try next.
var (
	ErrUnknownObject = errors.New("unknown object")
	ErrNoSpans       = errors.New("no spans in range")
)

// maxWindows bounds how many derived trace IDs one query computes and fetches.
const maxWindows = 2000

// Found is the result of Find: every span of every fetched trace, and how they were found.
type Found struct {
	Spans []*Span
	// UID is the object's UID (given or learnt); Others lists other UIDs the name had in range.
	UID    string
	Others []string
	// Traces lists the fetched trace IDs, with how each was found: derived, search or link.
	Traces []FetchedTrace
	// Searched tells whether the backend's tag search was made: the computed trace IDs did not
	// hold the object (or could not be computed: no UID, no cluster).
	Searched bool
}

// FetchedTrace is one trace read from the backend.
type FetchedTrace struct {
	TraceID string `json:"trace_id"`
	Via     string `json:"via"` // derived | search | previous_window | continuation | placed_in
	Spans   int    `json:"spans"`

	id        pcommon.TraceID
	continued bool // its continuations were looked for
}

type finder struct {
	src     Source
	q       Query
	fetched map[pcommon.TraceID]bool
	found   Found
}

// Find fetches the traces of q.Target's windows from src. With a UID and a cluster it computes
// the trace IDs of the windows in range (model.ObjectTraceID of the cluster's UID key: the trace
// a root object's window gets), of the object and of its root owner when known; the backend's
// tag search finds the object otherwise, and also finds objects whose trace is their root
// owner's. The root owner's windows are then computed too, and the previous_window links of
// the object spans are followed, so a range that spans window boundaries yields every window.
func Find(ctx context.Context, src Source, q Query) (*Found, error) {
	if q.Window <= 0 {
		q.Window = model.DefaultWindow
	}
	f := &finder{src: src, q: q, fetched: map[pcommon.TraceID]bool{}}
	t := q.Target
	windows, err := f.windows()
	if err != nil {
		return nil, err
	}
	// The derivation keys on the collector's cluster name: without it nothing can be computed.
	if t.UID != "" && t.Cluster != "" {
		keys := []model.Key{model.UIDKey(t.Cluster, t.UID)}
		if t.RootUID != "" && t.RootUID != t.UID {
			keys = append(keys, model.UIDKey(t.Cluster, t.RootUID))
		}
		for _, k := range keys {
			if err := f.fetchDerived(ctx, k, windows); err != nil {
				return nil, err
			}
		}
	}
	if len(f.matches(t.UID)) == 0 {
		f.found.Searched = true
		tags := map[string]string{model.AttrObjectName: t.Name}
		if t.Namespace != "" {
			tags[model.AttrNamespaceName] = t.Namespace
		}
		if t.UID != "" {
			tags = map[string]string{model.AttrObjectUID: t.UID}
		}
		start, end := q.Since, q.Until
		if !start.IsZero() {
			start = model.WindowStart(start, q.Window)
		}
		ids, err := src.Search(ctx, t.Kind, tags, start, end)
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			if err := f.fetch(ctx, id, "search"); err != nil {
				return nil, err
			}
		}
	}
	m := f.matches(t.UID)
	if len(m) == 0 {
		return nil, f.unknown()
	}
	f.found.UID = t.UID
	if f.found.UID == "" {
		f.found.UID, f.found.Others = pickUID(m, f.found.Spans)
		m = f.matches(f.found.UID)
	}
	// The root owners' windows: an owned object's spans live in its root's trace. The cluster
	// is the spans' own, so a query without --cluster still computes them once found.
	roots := map[model.Key]bool{}
	for _, s := range m {
		roots[model.UIDKey(s.Cluster, f.found.UID)] = true
		if r := f.rootOf(s); r != nil && r.Object.UID != "" {
			roots[model.UIDKey(r.Cluster, r.Object.UID)] = true
		}
	}
	keys := make([]string, 0, len(roots))
	for k := range roots {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := f.fetchDerived(ctx, model.Key(k), windows); err != nil {
			return nil, err
		}
	}
	// Window links, for assignments that were not derived (a replica that saw the object
	// first by name) or ranges the computation did not cover; then the continuations of every
	// trace read (a window's trace past the processor's max_spans_per_trace goes on in a derived
	// one).
	for {
		if err := f.fetchContinuations(ctx); err != nil {
			return nil, err
		}
		var next []pcommon.TraceID
		for _, s := range f.matches(f.found.UID) {
			if !q.Since.IsZero() && !s.Start.After(q.Since) {
				continue
			}
			for _, l := range s.Links {
				if l.Type == model.LinkTypePreviousWindow && !f.fetched[l.TraceID] {
					next = append(next, l.TraceID)
				}
			}
		}
		if len(next) == 0 {
			break
		}
		for _, id := range next {
			if err := f.fetch(ctx, id, model.LinkTypePreviousWindow); err != nil {
				return nil, err
			}
		}
	}
	return &f.found, nil
}

func (f *finder) windows() ([]time.Time, error) {
	if f.q.Since.IsZero() {
		return nil, nil // an unbounded range: search and links only
	}
	until := f.q.Until
	if until.IsZero() {
		until = time.Now()
	}
	var ws []time.Time
	for w := model.WindowStart(f.q.Since, f.q.Window); !w.After(until); w = w.Add(f.q.Window) {
		ws = append(ws, w)
		if len(ws) > maxWindows {
			return nil, fmt.Errorf("--since %s to --until %s is more than %d windows of %s: narrow the range or set --window to the collector's window",
				f.q.Since.Format(time.RFC3339), until.Format(time.RFC3339), maxWindows, f.q.Window)
		}
	}
	return ws, nil
}

func (f *finder) fetchDerived(ctx context.Context, key model.Key, windows []time.Time) error {
	for _, w := range windows {
		if err := f.fetch(ctx, model.ObjectTraceID(key, w), "derived"); err != nil {
			return err
		}
	}
	return nil
}

// fetchContinuations reads, for every trace read that holds spans, the trace that continues it,
// and on from there, until one holds none.
func (f *finder) fetchContinuations(ctx context.Context) error {
	for _, t := range f.found.Traces {
		if t.Spans < minContinued || t.continued {
			continue
		}
		id := t.id
		for range maxContinuations {
			next := model.ContinuationTraceID(id)
			if f.fetched[next] {
				break
			}
			n := len(f.found.Traces)
			if err := f.fetch(ctx, next, model.LinkTypeContinuation); err != nil {
				return err
			}
			if len(f.found.Traces) == n {
				break // no continuation
			}
			id = next
		}
	}
	for i := range f.found.Traces {
		f.found.Traces[i].continued = true
	}
	return nil
}

// maxContinuations bounds the continuations followed from one trace (the processor makes at
// most 64); minContinued is the processor's smallest max_spans_per_trace: a trace of fewer spans
// has no continuation.
const (
	maxContinuations = 64
	minContinued     = 100
)

func (f *finder) fetch(ctx context.Context, id pcommon.TraceID, via string) error {
	if f.fetched[id] {
		return nil
	}
	f.fetched[id] = true
	spans, err := f.src.Trace(ctx, id)
	if err != nil {
		return err
	}
	if len(spans) == 0 {
		return nil
	}
	f.found.Spans = append(f.found.Spans, spans...)
	f.found.Traces = append(f.found.Traces, FetchedTrace{TraceID: id.String(), Via: via, Spans: len(spans), id: id})
	// An object span that points to the trace its window was placed in (a trace context the
	// object carried, such as a CI step's): the window's spans are there.
	for _, s := range spans {
		if placed, ok := s.PlacedIn(); ok {
			if err := f.fetch(ctx, placed, viaPlacedIn); err != nil {
				return err
			}
		}
	}
	return nil
}

// viaPlacedIn is how a trace was found that a pointer span named (model.AttrTracePlacedIn).
const viaPlacedIn = "placed_in"

// matches returns the target's object spans among those fetched, in window order.
func (f *finder) matches(uid string) []*Span {
	t := f.q.Target
	var out []*Span
	for _, s := range f.found.Spans {
		if s.IsObject() && matchesTarget(s, t) && (uid == "" || s.Object.UID == uid) {
			out = append(out, s)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

func matchesTarget(s *Span, t Target) bool {
	o := s.Object
	if t.Cluster != "" && s.Cluster != t.Cluster {
		return false
	}
	if t.UID != "" && o.UID == t.UID {
		return true
	}
	return o.Name == t.Name && o.Namespace == t.Namespace &&
		(strings.EqualFold(o.Kind, t.Kind) || (t.Resource != "" && o.Resource == t.Resource))
}

// rootOf walks s's parents within its trace to the topmost object span.
func (f *finder) rootOf(s *Span) *Span {
	byID := map[pcommon.SpanID]*Span{}
	for _, x := range f.found.Spans {
		if x.TraceID == s.TraceID {
			byID[x.SpanID] = x
		}
	}
	return walkUp(byID, s)
}

// walkUp ends at an object span whose parent is not an object span: a window placed in a trace
// context (a CI step's span) is a root there.
func walkUp(byID map[pcommon.SpanID]*Span, s *Span) *Span {
	top := s
	for i := 0; i < 64 && !s.ParentID.IsEmpty(); i++ {
		p, ok := byID[s.ParentID]
		if !ok || (s.IsObject() && !p.IsObject()) {
			break
		}
		s = p
		if s.IsObject() {
			top = s
		}
	}
	return top
}

// pickUID chooses the object the name meant: the one whose activity is the latest (a recreated
// object is a new one); the others are returned so the caller can say how to ask for them. An
// object span starts at its window's start, so two objects of one window, or of collectors with
// different windows, are told apart by their activity (the audit and Event spans of all), not by
// their object spans; an object with no activity read counts from its window's start.
func pickUID(m, all []*Span) (string, []string) {
	last := map[string]time.Time{}
	for _, s := range m {
		if t, ok := last[s.Object.UID]; s.Object.UID != "" && (!ok || s.Start.After(t)) {
			last[s.Object.UID] = s.Start
		}
	}
	for _, s := range all {
		if t, ok := last[s.Object.UID]; ok && !s.IsObject() && s.Start.After(t) {
			last[s.Object.UID] = s.Start
		}
	}
	var uids []string
	for u := range last {
		uids = append(uids, u)
	}
	sort.Slice(uids, func(i, j int) bool {
		if !last[uids[i]].Equal(last[uids[j]]) {
			return last[uids[i]].After(last[uids[j]])
		}
		return uids[i] < uids[j]
	})
	if len(uids) == 0 {
		return "", nil
	}
	return uids[0], uids[1:]
}

func (f *finder) unknown() error {
	t := f.q.Target
	rng := "any time"
	if !f.q.Since.IsZero() {
		until := f.q.Until
		if until.IsZero() {
			until = time.Now().UTC()
		}
		rng = f.q.Since.UTC().Format(time.RFC3339) + " to " + until.UTC().Format(time.RFC3339)
	}
	if u, ok := f.src.(Unreader); ok {
		if un := u.Unread(); un.Spans > 0 && len(f.matches("")) == 0 {
			return fmt.Errorf("%w: %s: %s holds %d spans this kubetrail cannot read and none it can: %w", ErrUnknownObject, t, f.src, un.Spans, un.Err)
		}
	}
	if len(f.found.Spans) == 0 {
		hint := "check the kind, namespace and name, or widen the range with --since (e.g. --since 24h)"
		if t.Cluster != "" {
			hint += "; --cluster must be the collector's `cluster` setting"
		}
		return fmt.Errorf("%w: %s has no spans in %s (%s, %s): %s", ErrUnknownObject, t, f.src, rng, clusterNote(t), hint)
	}
	return fmt.Errorf("%w: %s: traces were found but none holds its object span in %s (%s, %s): check --cluster (the collector's `cluster`) and --uid, or widen --since", ErrUnknownObject, t, f.src, rng, clusterNote(t))
}

func clusterNote(t Target) string {
	if t.Cluster == "" {
		return "any cluster"
	}
	return "cluster " + t.Cluster
}

func sortIDs(ids []pcommon.TraceID) {
	sort.Slice(ids, func(i, j int) bool { return bytes.Compare(ids[i][:], ids[j][:]) < 0 })
}
