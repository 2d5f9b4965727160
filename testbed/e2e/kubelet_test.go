//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kubetrail/kubetrail/internal/model"
)

// A kubelet's spans of a pod sync (testdata/kubelet: what a kubelet of the testbed's version
// exports, from its source; the README says why no real kubelet runs here) reach the main
// collector's otlp receiver, an untrusted door, in two exports: the CRI calls, then the sync. In
// Jaeger, the Pod's trace holds syncPod under the Pod's object span and the CRI calls under
// syncPod (k8s_object_link, doors.identity).
func TestKubeletSyncSpansJoinThePodsTrace(t *testing.T) {
	env := otlpTestbed(t)
	if env == nil {
		return
	}
	run := env.Runs["deployment"]
	if !Check(t, "the deployment scenario ran", run != nil, "no run of the deployment scenario") {
		return
	}
	// A Pod of the run's Deployment demo (in its trace): the run's window may hold the next
	// scenario's objects too.
	ss := env.Spans(t, run)
	uids := createdUIDs(ss, run.Window(), "Deployment", "default", "demo")
	if !Check(t, "the run created Deployment demo once", len(uids) == 1, "uids %v", uids) {
		return
	}
	demo := ss.OfType(model.SpanTypeAudit).WithAttr(model.AttrAuditVerb, "create").WithAttr(model.AttrObjectUID, uids[0])
	creates := ss.OfType(model.SpanTypeAudit).WithAttr(model.AttrAuditVerb, "create").
		WithAttr(model.AttrHTTPStatusCode, "201").WithAttr(model.AttrObjectKind, "Pod").
		Where(func(s *Span) bool { return len(demo) == 1 && s.TraceID == demo[0].TraceID })
	if !Check(t, "the run created Pods of demo", len(creates) > 0, "no Pod create in demo's trace") {
		return
	}
	create := creates[0]
	pod := struct{ uid, name, namespace, node string }{create.Attr(model.AttrObjectUID), create.Attr(model.AttrObjectName),
		create.Attr(model.AttrNamespaceName), "kwok-node-0"}
	var tid pcommon.TraceID
	_, _ = rand.Read(tid[:])

	for i, file := range []string{"syncpod-cri.json", "syncpod.json"} {
		exportOTLP(t, env, kubeletExport(t, file, tid, create.Start, pod.uid, pod.name, pod.namespace, pod.node))
		if i == 0 {
			time.Sleep(time.Second) // the sync comes in a later export, as the kubelet sends it
		}
	}

	want := []string{"runtime.v1.RuntimeService/RunPodSandbox", "runtime.v1.RuntimeService/PodSandboxStatus",
		"runtime.v1.ImageService/ImageStatus", "runtime.v1.ImageService/PullImage",
		"runtime.v1.RuntimeService/CreateContainer", "runtime.v1.RuntimeService/StartContainer"}
	spans, err := waitTrace(t, env, create.TraceID, 60*time.Second, func(ss Spans) error {
		syncs := ss.Named("syncPod")
		if len(syncs) != 1 {
			return fmt.Errorf("%d syncPod spans in the Pod's trace", len(syncs))
		}
		sync := syncs[0]
		if sync.ParentSpanID != create.ParentSpanID {
			return fmt.Errorf("syncPod's parent is %s, the Pod's object span is %s", sync.ParentSpanID, create.ParentSpanID)
		}
		var missing []string
		for _, name := range want {
			if c := ss.Named(name); len(c) != 1 || c[0].ParentSpanID != sync.SpanID {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("not under syncPod: %s", strings.Join(missing, ", "))
		}
		return nil
	})
	_ = os.WriteFile(filepath.Join(env.OutDir, "kubelet-sync-trace.txt"), []byte(fmt.Sprint(spans.Names())), 0o644)
	Check(t, "the kubelet's syncPod is under the Pod's object span in its trace, the six CRI calls under syncPod",
		err == nil, "Pod %s/%s (uid %s), trace %s: %v", pod.namespace, pod.name, pod.uid, create.TraceID, err)
	// kubetrail trace shows the sync as the Pod's activity, naming the CRI call that took longest.
	if bin := kubetrailBinary(t, env); bin != "" {
		{
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			out, cerr := exec.CommandContext(ctx, bin, "trace", "deployment/demo", "-n", "default", "--cluster", ClusterName,
				"--uid", uids[0], "--source", "jaeger="+env.Jaeger.QueryURL, "--since", run.Start.Add(-time.Second).UTC().Format(time.RFC3339Nano)).CombinedOutput()
			cancel()
			_ = os.WriteFile(filepath.Join(env.OutDir, "kubetrail-trace-demo-kubelet.txt"), out, 0o644)
			Check(t, "kubetrail trace shows the sync under the Pod with its longest CRI call",
				cerr == nil && strings.Contains(string(out), "kubelet/"+pod.node+"  syncPod  2.4s  longest: PullImage 1.77s"), "%v: %s", cerr, cliHead(string(out)))
		}
	}
	orig := hex.EncodeToString(tid[:])
	left, _, _ := env.Jaeger.Trace(context.Background(), orig)
	Check(t, "nothing of the sync is left in the trace the kubelet gave it", len(left) == 0, "%d spans in %s: %v", len(left), orig, left.Names())
}

// kubeletExport reads one export of testdata/kubelet with the Pod, the node, trace tid and the
// times (offsets there) moved to start.
func kubeletExport(t *testing.T, file string, tid pcommon.TraceID, start time.Time, uid, name, namespace, node string) ptrace.Traces {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "kubelet", file))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.NewReplacer("POD_UID", uid, "POD_NAMESPACE", namespace, "POD_NAME", name, "NODE_NAME", node).Replace(string(raw))
	td, err := (&ptrace.JSONUnmarshaler{}).UnmarshalTraces([]byte(text))
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	base := pcommon.NewTimestampFromTime(start)
	for _, rs := range td.ResourceSpans().All() {
		for _, ss := range rs.ScopeSpans().All() {
			for _, s := range ss.Spans().All() {
				s.SetTraceID(tid)
				s.SetStartTimestamp(base + s.StartTimestamp())
				s.SetEndTimestamp(base + s.EndTimestamp())
				for _, e := range s.Events().All() {
					e.SetTimestamp(base + e.Timestamp())
				}
			}
		}
	}
	return td
}

// exportOTLP sends td to the main collector's otlp receiver, an untrusted door.
func exportOTLP(t *testing.T, env *Env, td ptrace.Traces) {
	t.Helper()
	conn, err := grpc.NewClient(env.TracingAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := ptraceotlp.NewGRPCClient(conn).Export(ctx, ptraceotlp.NewExportRequestFromTraces(td)); err != nil {
		t.Fatalf("OTLP export: %v", err)
	}
}

// A span of another component that links to the trace context the deployment scenario's
// Deployment carried (KEP-5915's consumers start their own trace and link) reaches the main
// collector's otlp receiver; in Jaeger, the Deployment's window trace holds a linked span under
// the Deployment's object span, linking to it, and the span itself stays in its own trace.
func TestASpanLinkingToTheDeploymentsContextIsFoundFromIt(t *testing.T) {
	env := otlpTestbed(t)
	if env == nil {
		return
	}
	run := env.Runs["deployment"]
	if !Check(t, "the deployment scenario ran with a trace context", run != nil && run.Traceparent != "", "no run, or no traceparent") {
		return
	}
	creates := env.Spans(t, run).OfType(model.SpanTypeAudit).WithAttr(model.AttrAuditVerb, "create").
		WithAttr(model.AttrHTTPStatusCode, "201").ForObject("Deployment", "default", "demo")
	if !Check(t, "the run created the Deployment", len(creates) == 1, "%d creates", len(creates)) {
		return
	}
	create := creates[0]
	tc, reason := model.ParseTraceparent(run.Traceparent)
	if reason != "" {
		t.Fatalf("traceparent %q: %s", run.Traceparent, reason)
	}
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr(model.AttrServiceName, "rollout-checker")
	s := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	var tid pcommon.TraceID
	var sid pcommon.SpanID
	_, _ = rand.Read(tid[:])
	_, _ = rand.Read(sid[:])
	s.SetTraceID(tid)
	s.SetSpanID(sid)
	s.SetName("CheckRollout")
	s.SetStartTimestamp(pcommon.NewTimestampFromTime(create.Start.Add(time.Second)))
	s.SetEndTimestamp(pcommon.NewTimestampFromTime(create.Start.Add(1200 * time.Millisecond)))
	l := s.Links().AppendEmpty()
	l.SetTraceID(tc.TraceID)
	l.SetSpanID(tc.SpanID)
	exportOTLP(t, env, td)

	_, err := waitTrace(t, env, create.TraceID, 60*time.Second, func(ss Spans) error {
		linked := ss.Named("CheckRollout").OfType(model.SpanTypeLinked)
		if len(linked) != 1 {
			return fmt.Errorf("%d linked spans named CheckRollout in the Deployment's trace", len(linked))
		}
		ls := linked[0]
		switch {
		case ls.ParentSpanID != create.ParentSpanID:
			return fmt.Errorf("the linked span's parent is %s, the Deployment's object span %s", ls.ParentSpanID, create.ParentSpanID)
		case len(ls.Links) != 1 || ls.Links[0].TraceID != hex.EncodeToString(tid[:]) || ls.Links[0].SpanID != hex.EncodeToString(sid[:]):
			return fmt.Errorf("the linked span's links: %+v", ls.Links)
		case ls.Service != "rollout-checker":
			return fmt.Errorf("the linked span's service %q", ls.Service)
		}
		return nil
	})
	Check(t, "a span linking to the Deployment's trace context has a linked span under the Deployment's object span",
		err == nil, "trace %s: %v", create.TraceID, err)
	own, _, _ := env.Jaeger.Trace(context.Background(), hex.EncodeToString(tid[:]))
	Check(t, "the linking span stays in its own trace", len(own.Named("CheckRollout")) == 1, "%d spans in its trace", len(own))
}
