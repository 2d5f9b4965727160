package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/kubetrail/kubetrail/internal/model"
)

// ownerChain is one trace in which each of n ConfigMaps' object span is the child of the one
// before, and the first and the last have one write each: a chain far deeper than the
// processor ever nests (model.MaxOwnerDepth), as a forged or broken backend could hold it.
func ownerChain(n int) ptrace.Traces {
	td := ptrace.NewTraces()
	start := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	traceID := pcommon.TraceID{1, 2, 3}
	var parent pcommon.SpanID
	for i := range n {
		rs := td.ResourceSpans().AppendEmpty()
		rs.SetSchemaUrl(model.SchemaURL)
		res := rs.Resource().Attributes()
		res.PutStr(model.AttrClusterName, "testbed")
		res.PutStr(model.AttrObjectKind, "ConfigMap")
		res.PutStr(model.AttrObjectResource, "configmaps")
		res.PutStr(model.AttrObjectAPIVersion, "v1")
		res.PutStr(model.AttrNamespaceName, "default")
		res.PutStr(model.AttrObjectName, fmt.Sprintf("c%d", i))
		res.PutStr(model.AttrObjectUID, fmt.Sprintf("uid-%d", i))
		spans := rs.ScopeSpans().AppendEmpty().Spans()
		id := pcommon.SpanID{byte(i >> 16), byte(i >> 8), byte(i), 1}
		obj := spans.AppendEmpty()
		obj.SetTraceID(traceID)
		obj.SetSpanID(id)
		obj.SetParentSpanID(parent)
		obj.SetName(fmt.Sprintf("ConfigMap default/c%d", i))
		obj.SetStartTimestamp(pcommon.NewTimestampFromTime(start))
		obj.SetEndTimestamp(pcommon.NewTimestampFromTime(start.Add(30 * time.Minute)))
		obj.Attributes().PutStr(model.AttrSpanType, model.SpanTypeObject)
		if i == 0 || i == n-1 {
			w := spans.AppendEmpty()
			w.SetTraceID(traceID)
			w.SetSpanID(pcommon.SpanID{byte(i >> 16), byte(i >> 8), byte(i), 2})
			w.SetParentSpanID(id)
			w.SetName("update configmaps")
			w.SetStartTimestamp(pcommon.NewTimestampFromTime(start.Add(time.Second)))
			w.SetEndTimestamp(pcommon.NewTimestampFromTime(start.Add(time.Second + time.Millisecond)))
			w.Attributes().PutStr(model.AttrSpanType, model.SpanTypeAudit)
			w.Attributes().PutStr(model.AttrAuditVerb, "update")
			w.Attributes().PutStr(model.AttrUserName, "kubernetes-admin")
			w.Attributes().PutInt(model.AttrHTTPStatusCode, 200)
		}
		parent = id
	}
	return td
}

// An owner chain 8,000 deep is cut where the processor would have cut it: -o json nests
// model.MaxOwnerDepth levels below the root and says how many owned objects it left out, and the
// tree says so in words.
func TestAnOwnerChainDeeperThanTheProcessorNestsIsCutAndSaysSo(t *testing.T) {
	src := "file=" + writeJSONL(t, ownerChain(8000))
	args := []string{"trace", "configmap/c0", "-n", "default", "--cluster", "testbed", "--source", src}
	code, out, errOut := kubetrail(t, append(args, "-o", "json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	n := decodeTree(t, out)
	depth := 0
	for ; len(n.Children) > 0; depth++ {
		if len(n.Children) != 1 || n.OwnedNotShown != 0 {
			t.Fatalf("level %d: %d children, %d not shown: want one child", depth, len(n.Children), n.OwnedNotShown)
		}
		n = n.Children[0]
	}
	if depth != model.MaxOwnerDepth || n.Name != fmt.Sprintf("c%d", model.MaxOwnerDepth) || n.OwnedNotShown != 1 {
		t.Fatalf("the tree ends at depth %d with %s, %d owned not shown: want depth %d, c%d, 1 not shown",
			depth, n.Name, n.OwnedNotShown, model.MaxOwnerDepth, model.MaxOwnerDepth)
	}
	code, out, errOut = kubetrail(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "1 owned object not shown: deeper than 16 levels of owners") || strings.Count(out, "\n") > 40 {
		t.Fatalf("the tree does not say where it was cut, or is longer than the bound:\n%s", head(out, 60))
	}
}
