package trail

import (
	"encoding/json"
	"io"
	"time"

	"github.com/kubetrail/kubetrail/internal/model"
)

// JSONNode is the merged tree as `-o json` writes it (documented in docs/cli.md).
type JSONNode struct {
	// SpanModel is the span model the tree was read in (model.SpanModelVersion); on the root
	// only. The JSON's own fields change with the span model's major version.
	SpanModel string `json:"span_model,omitempty"`
	// Generations are the root's rollouts in range (Generations); on the root only.
	Generations []Generation `json:"generations,omitempty"`
	Kind        string       `json:"kind"`
	Name        string       `json:"name"`
	Namespace   string       `json:"namespace,omitempty"`
	UID         string       `json:"uid,omitempty"`
	Cluster     string       `json:"cluster"`
	Windows     []JSONWindow `json:"windows"`
	Spans       []JSONSpan   `json:"spans"`
	Children    []*JSONNode  `json:"children"`
	// OwnedNotShown counts the objects this one owns that are left out because they sit
	// deeper than model.MaxOwnerDepth below the root (Node.Cut).
	OwnedNotShown int `json:"owned_not_shown,omitempty"`
}

// JSONWindow is one object span: the object in one window.
type JSONWindow struct {
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	TraceID string    `json:"trace_id"`
	SpanID  string    `json:"span_id"`
	// PreviousTraceID is the trace of the window before, from the previous_window link.
	PreviousTraceID string `json:"previous_trace_id,omitempty"`
}

// JSONSpan is one activity span.
type JSONSpan struct {
	TraceID      string    `json:"trace_id"`
	SpanID       string    `json:"span_id"`
	ParentSpanID string    `json:"parent_span_id,omitempty"`
	Name         string    `json:"name"`
	Type         string    `json:"type"`
	Start        time.Time `json:"start"`
	End          time.Time `json:"end"`
	DurationMS   float64   `json:"duration_ms"`
	Actor        string    `json:"actor"`
	Verb         string    `json:"verb"`
	Result       string    `json:"result,omitempty"`
	Error        bool      `json:"error"`
	Conflict     bool      `json:"conflict,omitempty"`
	ErrorMessage string    `json:"error_message,omitempty"`
	Diff         []Change  `json:"diff,omitempty"`
	// Attempted is what a refused write tried (span model 1.3); RefusedBy names what refused
	// it, when its message says ("denied by ValidatingAdmissionPolicy max-replicas").
	Attempted []Change `json:"attempted,omitempty"`
	RefusedBy string   `json:"refused_by,omitempty"`
	// Parts are the spans under another component's span in its trace (the kubelet's CRI
	// calls under its syncPod), same shape.
	Parts      []JSONSpan     `json:"parts,omitempty"`
	Attributes map[string]any `json:"attributes"`
	Events     []JSONEvent    `json:"events,omitempty"`
	Links      []JSONLink     `json:"links,omitempty"`
}

// JSONEvent is one span event.
type JSONEvent struct {
	Name       string         `json:"name"`
	Time       time.Time      `json:"time"`
	Attributes map[string]any `json:"attributes,omitempty"`
}

// JSONLink is one span link.
type JSONLink struct {
	TraceID    string         `json:"trace_id"`
	SpanID     string         `json:"span_id"`
	Attributes map[string]any `json:"attributes,omitempty"`
}

// ToJSON converts the tree.
func ToJSON(n *Node) *JSONNode {
	j := &JSONNode{Kind: n.Object.Kind, Name: n.Object.Name, Namespace: n.Object.Namespace, UID: n.Object.UID, Cluster: n.Cluster,
		Windows: []JSONWindow{}, Spans: []JSONSpan{}, Children: []*JSONNode{}, OwnedNotShown: n.Cut}
	for _, w := range n.Windows {
		jw := JSONWindow{Start: w.Start, End: w.End, TraceID: w.TraceID.String(), SpanID: w.SpanID.String()}
		for _, l := range w.Links {
			if l.Type == model.LinkTypePreviousWindow {
				jw.PreviousTraceID = l.TraceID.String()
			}
		}
		j.Windows = append(j.Windows, jw)
	}
	for _, s := range n.Spans {
		j.Spans = append(j.Spans, jsonSpan(s))
	}
	for _, c := range n.Children {
		j.Children = append(j.Children, ToJSON(c))
	}
	return j
}

// WriteJSON writes the tree as indented JSON.
func WriteJSON(w io.Writer, n *Node, h Header) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	root := ToJSON(n)
	root.SpanModel = model.SpanModelVersion
	root.Generations = Generations(n)
	if h.Generation != nil {
		root.Generations = []Generation{*h.Generation}
	}
	return enc.Encode(root)
}

func jsonSpan(s *Span) JSONSpan {
	js := JSONSpan{TraceID: s.TraceID.String(), SpanID: s.SpanID.String(), Name: s.Name, Type: s.Type, Start: s.Start, End: s.End,
		DurationMS: float64(s.Duration().Microseconds()) / 1000, Actor: s.Actor(), Verb: s.Verb(), Result: s.Result(),
		Error: s.Failed(), Conflict: s.IsConflict(), Attributes: s.Attrs}
	if !s.ParentID.IsEmpty() {
		js.ParentSpanID = s.ParentID.String()
	}
	if js.Error {
		js.ErrorMessage = s.ErrorMessage()
		js.RefusedBy, _ = RefusedBy(s)
	}
	js.Diff, _ = s.Diff()
	js.Attempted, _ = s.Attempted()
	for _, e := range s.Events {
		js.Events = append(js.Events, JSONEvent{Name: e.Name, Time: e.Time, Attributes: e.Attrs})
	}
	for _, l := range s.Links {
		js.Links = append(js.Links, JSONLink{TraceID: l.TraceID.String(), SpanID: l.SpanID.String(), Attributes: l.Attrs})
	}
	for _, p := range s.Parts {
		js.Parts = append(js.Parts, jsonSpan(p))
	}
	return js
}
