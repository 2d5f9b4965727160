package tracetree

import (
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func span(ss ptrace.SpanSlice, trace byte, id, parent byte, name string, start int) {
	s := ss.AppendEmpty()
	s.SetTraceID(pcommon.TraceID{trace})
	s.SetSpanID(pcommon.SpanID{id})
	if parent != 0 {
		s.SetParentSpanID(pcommon.SpanID{parent})
	}
	s.SetName(name)
	s.SetStartTimestamp(pcommon.Timestamp(start))
	s.SetEndTimestamp(pcommon.Timestamp(start + 1))
}

func TestBuildNestsChildrenUnderParentsWithinATrace(t *testing.T) {
	td := ptrace.NewTraces()
	ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans()
	span(ss, 1, 3, 2, "Pod default/demo-1", 30)
	span(ss, 1, 1, 0, "Deployment default/demo", 10)
	span(ss, 1, 2, 1, "ReplicaSet default/demo-x", 20)
	span(ss, 1, 4, 9, "orphan", 5)                   // parent not seen: a root
	span(ss, 2, 5, 1, "other trace, same parent", 1) // parent ID exists only in trace 1: a root
	span(ss, 1, 2, 1, "duplicate", 21)

	f := Build(td)
	if f.Duplicates != 1 {
		t.Fatalf("duplicates = %d", f.Duplicates)
	}
	var names []string
	for _, r := range f.Roots {
		names = append(names, r.Span.Name())
	}
	if got := strings.Join(names, ","); got != "other trace, same parent,orphan,Deployment default/demo" {
		t.Fatalf("roots = %s", got)
	}
	pods := f.Find(ByName("Pod default/demo-1"))
	if len(pods) != 1 || pods[0].Parent.Span.Name() != "ReplicaSet default/demo-x" || pods[0].Parent.Parent.Span.Name() != "Deployment default/demo" {
		t.Fatal("pod must sit under its replica set under its deployment")
	}
	var b strings.Builder
	f.Print(&b, 0)
	if !strings.Contains(b.String(), "Deployment default/demo  [") || !strings.Contains(b.String(), "\n    Pod default/demo-1") {
		t.Fatalf("outline:\n%s", b.String())
	}
}

func TestReadOTLPJSONLines(t *testing.T) {
	td := ptrace.NewTraces()
	ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans()
	span(ss, 1, 1, 0, "a", 1)
	var m ptrace.JSONMarshaler
	b, err := m.MarshalTraces(td)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadOTLPJSONLines(strings.NewReader(string(b) + "\n\n" + string(b) + "\n"))
	if err != nil || len(got) != 2 || got[1].SpanCount() != 1 {
		t.Fatalf("got %d batches, err %v", len(got), err)
	}
	if _, err := ReadOTLPJSONLines(strings.NewReader("{not json\n")); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("a bad line must be reported with its number, got %v", err)
	}
}
