package trail

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/kubetrail/kubetrail/internal/model"
)

// Write is one write of one object, as `kubetrail changes` and `kubetrail show --diff` print it:
// who changed what, when, and with which answer.
type Write struct {
	// Time is when the apiserver received the write, End when it answered.
	Time        time.Time `json:"time"`
	End         time.Time `json:"end"`
	Cluster     string    `json:"cluster"`
	Kind        string    `json:"kind"`
	Namespace   string    `json:"namespace,omitempty"`
	Name        string    `json:"name"`
	UID         string    `json:"uid,omitempty"`
	User        string    `json:"user"`
	Verb        string    `json:"verb"`
	Subresource string    `json:"subresource,omitempty"`
	Code        int       `json:"code"`
	// Reason and Message are a refused write's (its audit error's).
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Changes are the changed paths the span's diff lists, ChangedPaths how many changed (more
	// when the receiver cut the list). NoDiff says why a successful write has none.
	Changes      []Change `json:"changes,omitempty"`
	ChangedPaths int      `json:"changed_paths"`
	NoDiff       string   `json:"no_diff,omitempty"`
	// Tried is what a refused write tried (span model 1.3), TriedPaths how many paths.
	Tried      []Change `json:"tried,omitempty"`
	TriedPaths int      `json:"tried_paths,omitempty"`
	NoOp       bool     `json:"noop,omitempty"`
	TraceID    string   `json:"trace_id"`
	SpanID     string   `json:"span_id"`

	span *Span
}

// WriteOf is the write an audit span of a write verb describes.
func WriteOf(s *Span) Write {
	code, _ := strconv.Atoi(s.Str(model.AttrHTTPStatusCode))
	w := Write{
		Time: s.Start, End: s.End, Cluster: s.Cluster, Kind: s.Object.Kind, Namespace: s.Object.Namespace, Name: s.Object.Name, UID: s.Object.UID,
		User: s.Str(model.AttrUserName), Verb: s.Str(model.AttrAuditVerb), Subresource: s.Str(model.AttrAuditSubresource), Code: code,
		NoOp: s.Str(attrAuditNoop) == "true", TraceID: s.TraceID.String(), SpanID: s.SpanID.String(), span: s,
	}
	if s.Failed() {
		for _, e := range s.Events {
			if e.Name == model.EventAuditError {
				w.Reason, _ = e.Attrs[attrErrReason].(string)
			}
		}
		w.Message = s.ErrorMessage()
	}
	w.Changes, w.ChangedPaths = s.Diff()
	w.Tried, w.TriedPaths = s.Attempted()
	if len(w.Changes) == 0 && !w.NoOp && !s.Failed() && (w.Verb == "update" || w.Verb == "patch") {
		// Why a change has no diff: the receiver's reason, else no body was audited.
		if w.NoDiff = s.Str(attrDiffSkipped); w.NoDiff == "" {
			w.NoDiff = "no_body"
		}
	}
	return w
}

// VerbText is the verb with its subresource: "patch scale".
func (w Write) VerbText() string {
	if w.Subresource == "" {
		return w.Verb
	}
	return w.Verb + " " + w.Subresource
}

// Answer is the HTTP status with a refusal's reason: "409 Conflict".
func (w Write) Answer() string {
	if w.Reason == "" {
		return strconv.Itoa(w.Code)
	}
	return strconv.Itoa(w.Code) + " " + w.Reason
}

// spanKey identifies a span across the traces a source returns (a span read twice counts once).
type spanKey struct {
	trace pcommon.TraceID
	span  pcommon.SpanID
}

func keyOf(s *Span) spanKey { return spanKey{s.TraceID, s.SpanID} }

// Object names the write's object: "Deployment default/web".
func (w Write) Object() string {
	if w.Namespace == "" {
		return w.Kind + " " + w.Name
	}
	return w.Kind + " " + w.Namespace + "/" + w.Name
}

// ChangeQuery is what `kubetrail changes` asks for. Empty fields match everything.
type ChangeQuery struct {
	Kind, Name string
	Namespace  string
	Cluster    string
	// User matches the full user name or the short one the output shows (a service account's
	// name, kubelet/NODE).
	User string
	// Verb is one write verb: create, update, patch, delete, deletecollection.
	Verb string
	// Field keeps writes whose diff changed that path, a path under it or a subtree holding it.
	Field  FieldPath
	Errors bool // refused writes only
	Since  time.Time
	Until  time.Time
	Window time.Duration
	// Limit bounds the result, newest first (0: no bound).
	Limit int
}

// WriteVerbs are the audit verbs of writes.
var WriteVerbs = []string{"create", "update", "patch", "delete", "deletecollection"}

// ChangeResult is what Changes found.
type ChangeResult struct {
	// Writes are the matching writes, newest first, at most the query's limit.
	Writes []Write
	// Matched is how many matched before the limit cut.
	Matched int
	// Kinds are the kinds (the backend's services) searched; Traces how many traces were read.
	Kinds  []string
	Traces int
	// SearchCut lists the kinds whose search answered the backend's bound of traces
	// (SearchLimit): older writes of them may be missing.
	SearchCut []string
	// Unread is how many traces the searches found past MaxTraces, left unread.
	Unread int
}

// SearchLimit is how many traces one search of the backend asks for.
const SearchLimit = 1000

// MaxTraces bounds the traces one change feed reads (every kind's search together): each is
// read whole and held until the feed is built.
const MaxTraces = 2000

// fetchers is how many traces are read from the backend at once.
const fetchers = 4

// Kinder is a Source that lists the kinds (services) it holds spans of.
type Kinder interface {
	Kinds(ctx context.Context) ([]string, error)
}

// Changes finds the writes q asks for in src: it searches each kind (q.Kind, or every kind the
// backend lists) with the filters the backend can apply as tags (cluster, namespace, name, a
// full user name, the verb), reads the traces found, and keeps the audit spans of writes that
// match every filter, newest first.
func Changes(ctx context.Context, src Source, q ChangeQuery) (*ChangeResult, error) {
	if q.Window <= 0 {
		q.Window = model.DefaultWindow
	}
	res := &ChangeResult{}
	if q.Kind != "" {
		res.Kinds = []string{q.Kind}
	} else {
		k, ok := src.(Kinder)
		if !ok {
			return nil, fmt.Errorf("%s cannot list the kinds it holds: name a TYPE", src)
		}
		kinds, err := k.Kinds(ctx)
		if err != nil {
			return nil, err
		}
		res.Kinds = kinds
	}
	tags := q.tags()
	start := q.Since
	if !start.IsZero() {
		start = model.WindowStart(start, q.Window) // the window's object span starts there
	}
	var ids []pcommon.TraceID
	seen := map[pcommon.TraceID]bool{}
	for _, kind := range res.Kinds {
		found, err := src.Search(ctx, kind, tags, start, q.Until)
		if err != nil {
			return nil, err
		}
		if len(found) >= SearchLimit {
			res.SearchCut = append(res.SearchCut, kind)
		}
		for _, id := range found {
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	if len(ids) > MaxTraces {
		res.Unread, ids = len(ids)-MaxTraces, ids[:MaxTraces]
	}
	spans, err := fetchTraces(ctx, src, ids)
	if err != nil {
		return nil, err
	}
	res.Traces = len(ids)
	dup := map[spanKey]bool{}
	for _, s := range spans {
		if !q.matches(s) || dup[keyOf(s)] {
			continue
		}
		dup[keyOf(s)] = true
		res.Writes = append(res.Writes, WriteOf(s))
	}
	sort.SliceStable(res.Writes, func(i, j int) bool {
		a, b := res.Writes[i], res.Writes[j]
		if !a.Time.Equal(b.Time) {
			return a.Time.After(b.Time)
		}
		return a.SpanID < b.SpanID
	})
	res.Matched = len(res.Writes)
	if q.Limit > 0 && len(res.Writes) > q.Limit {
		res.Writes = res.Writes[:q.Limit]
	}
	return res, nil
}

// tags are the filters a backend's tag search applies; the others are the CLI's.
func (q ChangeQuery) tags() map[string]string {
	t := map[string]string{}
	if q.Cluster != "" {
		t[model.AttrClusterName] = q.Cluster
	}
	if q.Namespace != "" {
		t[model.AttrNamespaceName] = q.Namespace
	}
	if q.Name != "" {
		t[model.AttrObjectName] = q.Name
	}
	if strings.Contains(q.User, ":") {
		t[model.AttrUserName] = q.User // a full name; a short one is matched here
	}
	if q.Verb != "" {
		t[model.AttrAuditVerb] = q.Verb
	}
	return t
}

// matches applies every filter to one span.
func (q ChangeQuery) matches(s *Span) bool {
	if !s.IsWrite() {
		return false
	}
	if (!q.Since.IsZero() && s.Start.Before(q.Since)) || (!q.Until.IsZero() && s.Start.After(q.Until)) {
		return false
	}
	if (q.Kind != "" && s.Object.Kind != q.Kind) || (q.Name != "" && s.Object.Name != q.Name) ||
		(q.Cluster != "" && s.Cluster != q.Cluster) || (q.Verb != "" && s.Str(model.AttrAuditVerb) != q.Verb) {
		return false
	}
	if q.Namespace != "" && s.Object.Namespace != q.Namespace {
		return false
	}
	if q.User != "" {
		u := s.Str(model.AttrUserName)
		if u != q.User && model.ShortUser(u) != q.User {
			return false
		}
	}
	if q.Errors && !s.Failed() {
		return false
	}
	if len(q.Field) > 0 {
		// A refused write matches by what it tried: "which writes were refused for spec.replicas?"
		changes, _ := s.Diff()
		tried, _ := s.Attempted()
		changes = append(changes, tried...)
		hit := false
		for _, c := range changes {
			if p, err := ParseFieldPath(c.Path); err == nil && p.Overlaps(q.Field) {
				hit = true
				break
			}
		}
		if !hit {
			return false
		}
	}
	return true
}

// fetchTraces reads the traces of ids, a few at a time, and returns their spans in the order of
// ids.
func fetchTraces(ctx context.Context, src Source, ids []pcommon.TraceID) ([]*Span, error) {
	out := make([][]*Span, len(ids))
	errs := make([]error, len(ids))
	next := make(chan int)
	var wg sync.WaitGroup
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for w := 0; w < min(fetchers, len(ids)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out[i], errs[i] = src.Trace(ctx, ids[i])
				if errs[i] != nil {
					cancel()
				}
			}
		}()
	}
feed:
	for i := range ids {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	var first error
	for _, err := range errs {
		// The first failure cancelled the other reads: report it, not their cancellation.
		if err != nil && (first == nil || errors.Is(first, context.Canceled)) {
			first = err
		}
	}
	if first != nil {
		return nil, first
	}
	var spans []*Span
	for i := range ids {
		spans = append(spans, out[i]...)
	}
	if err := parent.Err(); err != nil {
		return nil, err // interrupted: some traces were not read
	}
	return spans, nil
}
