// Package tracetree arranges spans into their parent/child trees, per trace, so tools and tests
// can ask "which spans sit under Deployment default/demo" instead of walking IDs by hand. It reads
// ptrace.Traces, so the same code serves the collector's file exporter output, Jaeger's OTLP JSON
// API and in-memory test sinks.
package tracetree

import (
	"bufio"
	"bytes"
	"fmt"
	"github.com/kubetrail/kubetrail/internal/model"
	"io"
	"sort"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// Node is one span with its resource and children.
type Node struct {
	Span     ptrace.Span
	Resource pcommon.Resource
	Parent   *Node
	Children []*Node
}

// Forest is every span of a set of traces arranged as trees.
type Forest struct {
	// Roots are spans with no parent, or whose parent is not among the spans seen.
	Roots []*Node
	// Nodes holds every span by trace and span ID. A span ID seen twice in one trace keeps the
	// first node; Duplicates counts the rest.
	Nodes      map[Ref]*Node
	Duplicates int
}

// Ref names a span within its trace.
type Ref struct {
	Trace pcommon.TraceID
	Span  pcommon.SpanID
}

// Build arranges the spans of all batches into one forest.
func Build(batches ...ptrace.Traces) *Forest {
	f := &Forest{Nodes: map[Ref]*Node{}}
	var order []*Node
	for _, td := range batches {
		for i := 0; i < td.ResourceSpans().Len(); i++ {
			rs := td.ResourceSpans().At(i)
			for j := 0; j < rs.ScopeSpans().Len(); j++ {
				spans := rs.ScopeSpans().At(j).Spans()
				for k := 0; k < spans.Len(); k++ {
					s := spans.At(k)
					ref := Ref{s.TraceID(), s.SpanID()}
					if _, dup := f.Nodes[ref]; dup {
						f.Duplicates++
						continue
					}
					n := &Node{Span: s, Resource: rs.Resource()}
					f.Nodes[ref] = n
					order = append(order, n)
				}
			}
		}
	}
	for _, n := range order {
		parent, ok := f.Nodes[Ref{n.Span.TraceID(), n.Span.ParentSpanID()}]
		if n.Span.ParentSpanID().IsEmpty() || !ok || parent == n {
			f.Roots = append(f.Roots, n)
			continue
		}
		n.Parent = parent
		parent.Children = append(parent.Children, n)
	}
	sortNodes(f.Roots)
	for _, n := range order {
		sortNodes(n.Children)
	}
	return f
}

// sortNodes orders siblings by start time, then name, so output is stable.
func sortNodes(nodes []*Node) {
	sort.SliceStable(nodes, func(i, j int) bool {
		a, b := nodes[i].Span, nodes[j].Span
		if a.StartTimestamp() != b.StartTimestamp() {
			return a.StartTimestamp() < b.StartTimestamp()
		}
		return a.Name() < b.Name()
	})
}

// Find returns every span, in tree order, for which match is true.
func (f *Forest) Find(match func(*Node) bool) []*Node {
	var out []*Node
	var walk func(*Node)
	walk = func(n *Node) {
		if match(n) {
			out = append(out, n)
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	for _, r := range f.Roots {
		walk(r)
	}
	return out
}

// ByName matches spans by exact label (Label).
func ByName(name string) func(*Node) bool {
	return func(n *Node) bool { return n.Label() == name }
}

// Label is how a span is shown: an object span by its object ("Deployment default/demo", from
// its Resource; its span name is the kind), any other by its name.
func (n *Node) Label() string {
	if n.Attr(model.AttrSpanType) == model.SpanTypeObject {
		if o, ok := model.ObjectFromAttributes(n.Resource.Attributes(), n.Span.Attributes()); ok {
			return o.DisplayName()
		}
	}
	return n.Span.Name()
}

// ByAttr matches spans whose string attribute key equals value.
func ByAttr(key, value string) func(*Node) bool {
	return func(n *Node) bool {
		v, ok := n.Span.Attributes().Get(key)
		return ok && v.AsString() == value
	}
}

// Attr is a span's attribute, or its resource's, as a string, "" when absent.
func (n *Node) Attr(key string) string {
	if v, ok := n.Span.Attributes().Get(key); ok {
		return v.AsString()
	}
	if v, ok := n.Resource.Attributes().Get(key); ok {
		return v.AsString()
	}
	return ""
}

// Print writes the forest as an indented outline, at most maxChildren children per node
// (0 = all), one line per span: name (an object span's object), span type, duration, and who
// made an audit span's request.
func (f *Forest) Print(w io.Writer, maxChildren int) {
	var walk func(n *Node, depth int)
	walk = func(n *Node, depth int) {
		s := n.Span
		dur := s.EndTimestamp().AsTime().Sub(s.StartTimestamp().AsTime())
		typ := n.Attr("kubetrail.span.type")
		status := ""
		if s.Status().Code() == ptrace.StatusCodeError {
			status = " ERROR"
		}
		who := ""
		if typ == model.SpanTypeAudit {
			who = " by " + model.ShortUser(n.Attr(model.AttrUserName)) // the name says what, not who
		}
		fmt.Fprintf(w, "%s%s  [%s %s%s%s]\n", strings.Repeat("  ", depth), n.Label(), typ, dur, who, status)
		for i, c := range n.Children {
			if maxChildren > 0 && i == maxChildren {
				fmt.Fprintf(w, "%s… %d more\n", strings.Repeat("  ", depth+1), len(n.Children)-i)
				break
			}
			walk(c, depth+1)
		}
	}
	for _, r := range f.Roots {
		walk(r, 0)
	}
}

// ReadOTLPJSONLines reads a file of OTLP JSON trace batches, one per line, as the collector's file
// exporter writes them.
func ReadOTLPJSONLines(r io.Reader) ([]ptrace.Traces, error) {
	var out []ptrace.Traces
	var u ptrace.JSONUnmarshaler
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 256<<20)
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		td, err := u.UnmarshalTraces(b)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		out = append(out, td)
	}
	return out, sc.Err()
}
