//go:build e2e

package e2e

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/kubetrail/kubetrail/internal/model"
)

// Span is one exported span as Jaeger returned it, flattened for assertions. Attribute values
// keep their OTLP types (string, int64, float64, bool, []any, map[string]any).
type Span struct {
	TraceID, SpanID, ParentSpanID string // lowercase hex; ParentSpanID "" for a root
	Name                          string
	Start, End                    time.Time
	Service                       string         // resource service.name (the Kind)
	Resource                      map[string]any // resource attributes
	Schema                        string         // the resource's schema URL
	Attributes                    map[string]any
	Events                        []SpanEvent
	Links                         []SpanLink
	StatusCode                    string // "Unset", "Ok" or "Error"
	StatusMessage                 string
}

// SpanEvent is a span event (k8s.object.diff, k8s.object.snapshot, k8s.audit.error, …).
type SpanEvent struct {
	Name       string
	Time       time.Time
	Attributes map[string]any
}

// SpanLink is a link to another span.
type SpanLink struct {
	TraceID, SpanID string
	Attributes      map[string]any
}

// Attr returns attribute key of the span, or of its resource when the span has none, as a string
// ("" when absent; non-strings formatted with %v). The object's identity is on the resource.
func (s *Span) Attr(key string) string {
	v, ok := s.Attributes[key]
	if !ok {
		v, ok = s.Resource[key]
	}
	if !ok {
		return ""
	}
	if str, ok := v.(string); ok {
		return str
	}
	return fmt.Sprint(v)
}

// Type is the kubetrail.span.type attribute: object, audit or event.
func (s *Span) Type() string { return s.Attr(model.AttrSpanType) }

// Object names the span's object as "Kind namespace/name" (or "Kind name" when cluster-scoped).
func (s *Span) Object() string {
	kind := s.Attr(model.AttrObjectKind)
	if kind == "" {
		kind = s.Service
	}
	if ns := s.Attr(model.AttrNamespaceName); ns != "" {
		return kind + " " + ns + "/" + s.Attr(model.AttrObjectName)
	}
	return kind + " " + s.Attr(model.AttrObjectName)
}

// Event returns the span's first event named name, or nil.
func (s *Span) Event(name string) *SpanEvent {
	for i := range s.Events {
		if s.Events[i].Name == name {
			return &s.Events[i]
		}
	}
	return nil
}

// Attr returns the event's attribute key as a string ("" when absent).
func (e *SpanEvent) Attr(key string) string {
	v, ok := e.Attributes[key]
	if !ok {
		return ""
	}
	if str, ok := v.(string); ok {
		return str
	}
	return fmt.Sprint(v)
}

// String is a one-line description for failure messages.
func (s *Span) String() string {
	return fmt.Sprintf("%q [%s %s] trace=%s span=%s parent=%s %s", s.Name, s.Type(), s.Object(),
		s.TraceID, s.SpanID, s.ParentSpanID, s.Start.UTC().Format("15:04:05.000000"))
}

// SpansFromTraces flattens pdata traces into Spans.
func SpansFromTraces(td ptrace.Traces) Spans {
	var out Spans
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		res := rs.Resource().Attributes().AsRaw()
		svc, _ := res[model.AttrServiceName].(string)
		sss := rs.ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			spans := sss.At(j).Spans()
			for k := 0; k < spans.Len(); k++ {
				s := spanFrom(spans.At(k), svc, res)
				s.Schema = rs.SchemaUrl()
				out = append(out, s)
			}
		}
	}
	return out
}

func spanFrom(sp ptrace.Span, svc string, res map[string]any) *Span {
	s := &Span{
		TraceID: sp.TraceID().String(), SpanID: sp.SpanID().String(),
		Name: sp.Name(), Start: sp.StartTimestamp().AsTime(), End: sp.EndTimestamp().AsTime(),
		Service: svc, Resource: res, Attributes: sp.Attributes().AsRaw(),
		StatusCode: sp.Status().Code().String(), StatusMessage: sp.Status().Message(),
	}
	if !sp.ParentSpanID().IsEmpty() {
		s.ParentSpanID = sp.ParentSpanID().String()
	}
	for i := 0; i < sp.Events().Len(); i++ {
		e := sp.Events().At(i)
		s.Events = append(s.Events, SpanEvent{Name: e.Name(), Time: e.Timestamp().AsTime(), Attributes: e.Attributes().AsRaw()})
	}
	for i := 0; i < sp.Links().Len(); i++ {
		l := sp.Links().At(i)
		s.Links = append(s.Links, SpanLink{TraceID: l.TraceID().String(), SpanID: l.SpanID().String(), Attributes: l.Attributes().AsRaw()})
	}
	return s
}

// Spans is a list of spans with query helpers. Every filter returns a new list.
type Spans []*Span

// Where keeps the spans for which keep is true.
func (ss Spans) Where(keep func(*Span) bool) Spans {
	var out Spans
	for _, s := range ss {
		if keep(s) {
			out = append(out, s)
		}
	}
	return out
}

// Named keeps spans whose name is exactly name.
func (ss Spans) Named(name string) Spans {
	return ss.Where(func(s *Span) bool { return s.Name == name })
}

// NameHasPrefix keeps spans whose name starts with prefix.
func (ss Spans) NameHasPrefix(prefix string) Spans {
	return ss.Where(func(s *Span) bool { return strings.HasPrefix(s.Name, prefix) })
}

// WithAttr keeps spans whose attribute key, formatted as a string, equals value.
func (ss Spans) WithAttr(key, value string) Spans {
	return ss.Where(func(s *Span) bool {
		_, ok := s.Attributes[key]
		if !ok {
			_, ok = s.Resource[key]
		}
		return ok && s.Attr(key) == value
	})
}

// OfType keeps spans of one kubetrail.span.type (model.SpanTypeAudit, …).
func (ss Spans) OfType(t string) Spans { return ss.WithAttr(model.AttrSpanType, t) }

// ForObject keeps spans about the object kind namespace/name (namespace "" for cluster-scoped).
// An object recreated under the same name matches with both UIDs.
func (ss Spans) ForObject(kind, namespace, name string) Spans {
	return ss.Where(func(s *Span) bool {
		k := s.Attr(model.AttrObjectKind)
		if k == "" {
			k = s.Service
		}
		return k == kind && s.Attr(model.AttrNamespaceName) == namespace && s.Attr(model.AttrObjectName) == name
	})
}

// InNamespace keeps spans whose object is in namespace.
func (ss Spans) InNamespace(namespace string) Spans {
	return ss.WithAttr(model.AttrNamespaceName, namespace)
}

// Between keeps spans starting in [from, to].
func (ss Spans) Between(from, to time.Time) Spans {
	return ss.Where(func(s *Span) bool { return !s.Start.Before(from) && !s.Start.After(to) })
}

// WithEvent keeps spans that have a span event named name.
func (ss Spans) WithEvent(name string) Spans {
	return ss.Where(func(s *Span) bool { return s.Event(name) != nil })
}

// Values returns attribute key of every span, deduplicated, sorted.
func (ss Spans) Values(key string) []string {
	set := map[string]bool{}
	for _, s := range ss {
		_, ok := s.Attributes[key]
		if !ok {
			_, ok = s.Resource[key]
		}
		if ok {
			set[s.Attr(key)] = true
		}
	}
	out := make([]string, 0, len(set))
	for v := range set {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// Names returns the span names, in order, for failure messages.
func (ss Spans) Names() []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.Name
	}
	return out
}

// CountBy counts spans by a key function (e.g. by type, by service).
func (ss Spans) CountBy(key func(*Span) string) map[string]int {
	out := map[string]int{}
	for _, s := range ss {
		out[key(s)]++
	}
	return out
}

// DuplicateIDs returns the span IDs that occur more than once (within the same trace or not).
func (ss Spans) DuplicateIDs() []string {
	n := map[string]int{}
	for _, s := range ss {
		n[s.SpanID]++
	}
	var out []string
	for id, c := range n {
		if c > 1 {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// ByID indexes spans by span ID (the last one wins on duplicates).
func (ss Spans) ByID() map[string]*Span {
	m := make(map[string]*Span, len(ss))
	for _, s := range ss {
		m[s.SpanID] = s
	}
	return m
}

// Traces groups spans by trace ID.
func (ss Spans) Traces() map[string]Spans {
	m := map[string]Spans{}
	for _, s := range ss {
		m[s.TraceID] = append(m[s.TraceID], s)
	}
	return m
}

func (ss Spans) sortByStart() {
	sort.SliceStable(ss, func(i, j int) bool {
		if !ss[i].Start.Equal(ss[j].Start) {
			return ss[i].Start.Before(ss[j].Start)
		}
		return ss[i].SpanID < ss[j].SpanID
	})
}

// Node is a span in a Tree.
type Node struct {
	Span     *Span
	Parent   *Node
	Children []*Node
}

// Tree is spans linked by parent span ID within each trace.
type Tree struct {
	// Roots are the spans without a parent.
	Roots []*Node
	// Orphans are spans whose parent is not among the spans (for kubetrail without the processor:
	// every activity span, whose parent is the object span nobody emitted).
	Orphans []*Node
	nodes   map[string]*Node // trace/span → node
}

// Tree builds the parent/child tree of the spans. Children are ordered by start time.
func (ss Spans) Tree() *Tree {
	t := &Tree{nodes: map[string]*Node{}}
	sorted := append(Spans(nil), ss...)
	sorted.sortByStart()
	for _, s := range sorted {
		t.nodes[s.TraceID+"/"+s.SpanID] = &Node{Span: s}
	}
	for _, s := range sorted {
		n := t.nodes[s.TraceID+"/"+s.SpanID]
		if s.ParentSpanID == "" {
			t.Roots = append(t.Roots, n)
			continue
		}
		p, ok := t.nodes[s.TraceID+"/"+s.ParentSpanID]
		if !ok {
			t.Orphans = append(t.Orphans, n)
			continue
		}
		n.Parent = p
		p.Children = append(p.Children, n)
	}
	return t
}

// Node returns the node of a span, or nil.
func (t *Tree) Node(s *Span) *Node { return t.nodes[s.TraceID+"/"+s.SpanID] }

// Find returns the nodes whose span satisfies match, depth first from the roots and orphans.
func (t *Tree) Find(match func(*Span) bool) []*Node {
	var out []*Node
	var walk func(*Node)
	walk = func(n *Node) {
		if match(n.Span) {
			out = append(out, n)
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	for _, r := range append(append([]*Node(nil), t.Roots...), t.Orphans...) {
		walk(r)
	}
	return out
}

// ChildSpans returns the spans of n's children.
func (n *Node) ChildSpans() Spans {
	out := make(Spans, len(n.Children))
	for i, c := range n.Children {
		out[i] = c.Span
	}
	return out
}

// String renders the tree indented, one span per line, for failure messages and debugging.
func (t *Tree) String() string {
	var b strings.Builder
	var walk func(*Node, int)
	walk = func(n *Node, depth int) {
		fmt.Fprintf(&b, "%s%s  [%s %s]\n", strings.Repeat("  ", depth), n.Span.Name, n.Span.Type(), n.Span.Object())
		for _, c := range n.Children {
			walk(c, depth+1)
		}
	}
	for _, r := range t.Roots {
		walk(r, 0)
	}
	if len(t.Orphans) > 0 {
		b.WriteString("(orphans: parent not exported)\n")
		for _, o := range t.Orphans {
			walk(o, 1)
		}
	}
	return b.String()
}
