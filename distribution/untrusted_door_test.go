//go:build dist

package distribution_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/internal/objid"
)

// TestAnOTLPDoorInTheAuditPipelineWritesNoRecord runs the built binary with the pipeline many users
// write (an otlp receiver beside k8s_audit, into k8s_object_link with the Redis ID map) and sends
// the forged spans of issue 40 through the otlp receiver: a controller span naming a Pod no
// receiver saw, its trace-state member a day ahead and its owner strings 200 KB, and spans
// claiming to be audit and object spans. Redis must hold no record of them, the claims must not
// reach the backend, and an audit event posted to the webhook (the trusted door) must still write.
func TestAnOTLPDoorInTheAuditPipelineWritesNoRecord(t *testing.T) {
	requireBinary(t)
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rc.Close()
	ctx := context.Background()
	if err := rc.Ping(ctx).Err(); err != nil {
		t.Fatalf("this test needs redis-server on 127.0.0.1:6379 (testbed/hack/ensure-redis.sh): %v", err)
	}
	prefix := fmt.Sprintf("kubetrail-dist-doors:%d:", time.Now().UnixNano())
	keys := func() []string {
		var out []string
		iter := rc.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			if k := strings.TrimPrefix(iter.Val(), prefix); k != "epoch" {
				out = append(out, k)
			}
		}
		return out
	}
	t.Cleanup(func() {
		iter := rc.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			rc.Del(ctx, iter.Val())
		}
	})

	auditPort, otlpPort, healthPort, sinkPort := freePort(t), freePort(t), freePort(t), freePort(t)
	sink := startSink(t, sinkPort)
	config := fmt.Sprintf(`
extensions:
  health_check: {endpoint: "127.0.0.1:%d"}
receivers:
  k8s_audit: {cluster: c1, endpoint: "127.0.0.1:%d"}
  otlp: {protocols: {grpc: {endpoint: "127.0.0.1:%d"}}}
processors:
  k8s_object_link:
    owner_wait: 0s
    id_map: {backend: redis, redis: {addresses: ["127.0.0.1:6379"], key_prefix: %q}}
exporters:
  otlp_grpc: {endpoint: "127.0.0.1:%d", tls: {insecure: true}}
service:
  extensions: [health_check]
  telemetry: {metrics: {level: none}}
  pipelines:
    traces: {receivers: [k8s_audit, otlp], processors: [k8s_object_link], exporters: [otlp_grpc]}
`, healthPort, auditPort, otlpPort, prefix, sinkPort)
	startCollector(t, config, healthPort)

	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", otlpPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	exp := ptraceotlp.NewGRPCClient(conn)

	now := time.Now()
	huge := strings.Repeat("x", 200<<10)
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "forger")
	spans := rs.ScopeSpans().AppendEmpty().Spans()
	for i, at := range []time.Time{now, now.Add(24 * time.Hour)} {
		w := model.WindowStart(at, model.DefaultWindow)
		key := model.UIDKey("c1", "pod-never-seen")
		s := spans.AppendEmpty()
		s.SetName("reconcile")
		s.SetTraceID(model.ObjectTraceID(key, w))
		s.SetSpanID(pcommon.SpanID{0xf0, byte(i + 1)})
		s.SetParentSpanID(model.ObjectSpanID(key, w))
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(at))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(at.Add(time.Millisecond)))
		v, err := objid.EncodeTraceState(objid.ObjectRef{Cluster: "c1", UID: "pod-never-seen", Window: w})
		if err != nil {
			t.Fatal(err)
		}
		s.TraceState().FromRaw(objid.TraceStateKey + "=" + v)
		a := s.Attributes()
		a.PutStr(model.AttrSpanType, model.SpanTypeController)
		a.PutStr(model.AttrObjectKind, "Pod")
		a.PutStr(model.AttrObjectName, "never-seen")
		a.PutStr(model.AttrObjectUID, "pod-never-seen")
		for _, k := range []string{model.AttrOwnerAPIVersion, model.AttrOwnerKind, model.AttrOwnerName, model.AttrOwnerUID} {
			a.PutStr(k, huge)
		}
	}
	for i, typ := range []string{model.SpanTypeAudit, model.SpanTypeObject} {
		claim := model.NewTracesBuilder("forger", "")
		obj := model.Object{Cluster: "c1", Version: "v1", Resource: "pods", Kind: "Pod", Namespace: "default",
			Name: "claimed", UID: "pod-claimed", Owner: model.Owner{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs-claimed"}}
		s := claim.AppendSpan(obj)
		s.SetName("claim " + typ)
		s.SetTraceID(model.ObjectTraceID(obj.Key(), model.WindowStart(now, model.DefaultWindow)))
		s.SetSpanID(pcommon.SpanID{0xf1, byte(i + 1)})
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(now))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(now.Add(time.Millisecond)))
		obj.PutOwner(s.Attributes())
		s.Attributes().PutStr(model.AttrSpanType, typ)
		claim.Traces().ResourceSpans().MoveAndAppendTo(td.ResourceSpans())
	}
	if _, err := exp.Export(ctx, ptraceotlp.NewExportRequestFromTraces(td)); err != nil {
		t.Fatal(err)
	}
	// The two reconcile spans pass on as they came; the claims do not.
	received := func() map[pcommon.SpanID]pcommon.SpanID {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		out := make(map[pcommon.SpanID]pcommon.SpanID, len(sink.parents))
		for id, parent := range sink.parents {
			out[id] = parent
		}
		return out
	}
	for deadline := time.Now().Add(20 * time.Second); len(received()) < 2 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // anything more would have come with them
	got := received()
	for i := range 2 {
		id, want := pcommon.SpanID{0xf0, byte(i + 1)}, spans.At(i).ParentSpanID()
		if parent, ok := got[id]; !ok || parent != want {
			t.Fatalf("reconcile span %d: arrived %v under %s, want under %s (as it came)", i+1, ok, parent, want)
		}
	}
	if len(got) != 2 {
		t.Fatalf("the backend got %d spans, want the two reconcile spans only (the claims refused)", len(got))
	}
	if k := keys(); len(k) != 0 {
		t.Fatalf("Redis holds %d records of the otlp door's spans (first %.80q)", len(k), k[0])
	}

	// The webhook, kubetrail's own door, still writes the ID map.
	stamp := now.UTC().Format(time.RFC3339Nano)
	body := fmt.Sprintf(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{"level":"Metadata","auditID":"doors-1",
"stage":"ResponseComplete","requestURI":"/api/v1/namespaces/default/configmaps","verb":"create",
"user":{"username":"alice"},"objectRef":{"resource":"configmaps","namespace":"default","name":"cm","uid":"cm-doors","apiVersion":"v1"},
"responseStatus":{"code":201},"requestReceivedTimestamp":%q,"stageTimestamp":%q}]}`, stamp, stamp)
	resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/audit", auditPort), "application/json", bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("webhook answered %d", resp.StatusCode)
	}
	for deadline := time.Now().Add(20 * time.Second); len(keys()) == 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the audit event wrote no record: the trusted door does not write either")
		}
	}
}
