package k8sobjectlinkprocessor

import (
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/kubetrail/kubetrail/internal/model"
)

// withContext is an audit span as k8s_audit writes it for a body carrying the trace-context
// annotation value tp.
func withContext(a activity, tp string) activity {
	tc, reason := model.ParseTraceparent(tp)
	if reason != "" {
		panic(reason)
	}
	a.with = func(s ptrace.Span) {
		l := s.Links().AppendEmpty()
		l.SetTraceID(tc.TraceID)
		l.SetSpanID(tc.SpanID)
		l.Attributes().PutStr(model.AttrLinkType, model.LinkTypeTraceContext)
	}
	return a
}

func traceContextLinks(s ptrace.Span) []string {
	var out []string
	for _, l := range s.Links().All() {
		if v, _ := l.Attributes().Get(model.AttrLinkType); v.Str() == model.LinkTypeTraceContext {
			out = append(out, l.TraceID().String()+"-"+l.SpanID().String())
		}
	}
	return out
}

// linkOnlyConfig keeps trace contexts to links: the tests of links, apart from nesting.
func linkOnlyConfig() *Config {
	cfg := memoryConfig()
	cfg.TraceContext.Nest = false
	return cfg
}

func TestObjectSpansRepeatTheTraceContextsOfTheirWrites(t *testing.T) {
	const (
		first  = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		second = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	)
	t.Run("the window's object span links once to a context every write carries", func(t *testing.T) {
		h := newHarness(t, linkOnlyConfig(), newFakeClock(t0))
		h.consume(withContext(audit(deploy, "create", t0.Add(time.Second)), first),
			withContext(audit(deploy, "status", t0.Add(2*time.Second)), first))
		got := traceContextLinks(h.one("Deployment default/demo"))
		if len(got) != 1 || got[0] != "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7" {
			t.Fatalf("links = %v", got)
		}
	})
	t.Run("a changed context gives the object span a second link", func(t *testing.T) {
		h := newHarness(t, linkOnlyConfig(), newFakeClock(t0))
		h.consume(withContext(audit(deploy, "create", t0.Add(time.Second)), first),
			withContext(audit(deploy, "update", t0.Add(2*time.Second)), second),
			withContext(audit(deploy, "status", t0.Add(3*time.Second)), second))
		if got := traceContextLinks(h.one("Deployment default/demo")); len(got) != 2 || got[0] == got[1] {
			t.Fatalf("links = %v", got)
		}
	})
	t.Run("the object span links to at most 8 contexts; each write keeps its own", func(t *testing.T) {
		h := newHarness(t, linkOnlyConfig(), newFakeClock(t0))
		var acts []activity
		for i := range 10 {
			acts = append(acts, withContext(audit(deploy, fmt.Sprintf("update-%d", i), t0.Add(time.Duration(i+1)*time.Second)), fmt.Sprintf("00-%032x-%016x-01", i+1, i+1)))
		}
		h.consume(acts...)
		if got := traceContextLinks(h.one("Deployment default/demo")); len(got) != 8 || got[0] != fmt.Sprintf("%032x-%016x", 1, 1) {
			t.Fatalf("%d links %v, want the first 8", len(got), got)
		}
		if got := traceContextLinks(h.activitySpan("audit update-9")); len(got) != 1 {
			t.Fatalf("the tenth write's own links = %v", got)
		}
	})
	t.Run("children get no link: they nest under the linked root", func(t *testing.T) {
		h := newHarness(t, linkOnlyConfig(), newFakeClock(t0))
		h.consume(withContext(audit(deploy, "create", t0.Add(time.Second)), first), audit(rsA, "rs", t0.Add(2*time.Second)))
		if got := traceContextLinks(h.one("ReplicaSet default/demo-a")); len(got) != 0 {
			t.Fatalf("links = %v", got)
		}
		if got := traceContextLinks(h.one("Deployment default/demo")); len(got) != 1 {
			t.Fatalf("links = %v", got)
		}
	})
	t.Run("activity spans keep their own links as they are", func(t *testing.T) {
		h := newHarness(t, linkOnlyConfig(), newFakeClock(t0))
		h.consume(withContext(audit(deploy, "create", t0.Add(time.Second)), first))
		if got := traceContextLinks(h.activitySpan("audit create")); len(got) != 1 {
			t.Fatalf("links = %v", got)
		}
	})
}

func TestPodObjectSpansNameTheirNode(t *testing.T) {
	onNode := func(a activity, node string) activity {
		a.with = func(s ptrace.Span) { s.Attributes().PutStr(model.AttrNodeName, node) }
		return a
	}
	t.Run("the binding in the pod's first batch names the node", func(t *testing.T) {
		h := newHarness(t, memoryConfig(), newFakeClock(t0))
		h.consume(audit(podA1, "create", t0.Add(time.Second)), onNode(audit(podA1, "binding", t0.Add(2*time.Second)), "node-1"))
		if v, ok := h.one("Pod default/demo-a-1").Attributes().Get(model.AttrNodeName); !ok || v.Str() != "node-1" {
			t.Fatalf("k8s.node.name = %v (%v)", v.AsString(), ok)
		}
	})
	t.Run("an unscheduled pod names no node, and other kinds never do", func(t *testing.T) {
		h := newHarness(t, memoryConfig(), newFakeClock(t0))
		h.consume(audit(podA1, "create", t0.Add(time.Second)), onNode(audit(rsA, "rs", t0.Add(time.Second)), "node-1"))
		for _, name := range []string{"Pod default/demo-a-1", "ReplicaSet default/demo-a"} {
			if _, ok := h.one(name).Attributes().Get(model.AttrNodeName); ok {
				t.Fatalf("%s names a node", name)
			}
		}
	})
}
