package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/pkg/objecttrace"
)

// fakeAPIServer plays the part of an apiserver that apply uses: discovery, server-side apply
// (PATCH application/apply-patch+yaml) and GET. status sets an object's status on each GET, from
// how many times it was read.
type fakeAPIServer struct {
	srv     *httptest.Server
	mu      sync.Mutex
	objects map[string]map[string]any // URL path → object
	reads   map[string]int
	patches []patchRequest
	gets    []http.Header
	status  func(obj map[string]any, reads int)
}

// patchRequest is one apply the fake server received.
type patchRequest struct {
	path, contentType, traceparent, tracestate string
	fieldManager, force                        string
	body                                       map[string]any
}

var fakeDiscovery = map[string]string{
	"/api":  `{"kind":"APIVersions","versions":["v1"],"serverAddressByClientCIDRs":[{"clientCIDR":"0.0.0.0/0","serverAddress":"127.0.0.1"}]}`,
	"/apis": `{"kind":"APIGroupList","apiVersion":"v1","groups":[` + group("apps") + `,` + group("batch") + `]}`,
	"/api/v1": resources("v1", `{"name":"pods","singularName":"pod","namespaced":true,"kind":"Pod","verbs":["get","patch"],"shortNames":["po"]},
		{"name":"configmaps","singularName":"configmap","namespaced":true,"kind":"ConfigMap","verbs":["get","patch"],"shortNames":["cm"]},
		{"name":"namespaces","singularName":"namespace","namespaced":false,"kind":"Namespace","verbs":["get","patch"],"shortNames":["ns"]}`),
	"/apis/apps/v1": resources("apps/v1", `{"name":"deployments","singularName":"deployment","namespaced":true,"kind":"Deployment","verbs":["get","patch"],"shortNames":["deploy"]},
		{"name":"statefulsets","singularName":"statefulset","namespaced":true,"kind":"StatefulSet","verbs":["get","patch"],"shortNames":["sts"]}`),
	"/apis/batch/v1": resources("batch/v1", `{"name":"jobs","singularName":"job","namespaced":true,"kind":"Job","verbs":["get","patch"]}`),
}

func group(name string) string {
	return fmt.Sprintf(`{"name":%q,"versions":[{"groupVersion":"%s/v1","version":"v1"}],"preferredVersion":{"groupVersion":"%s/v1","version":"v1"}}`, name, name, name)
}

func resources(gv, list string) string {
	return fmt.Sprintf(`{"kind":"APIResourceList","apiVersion":"v1","groupVersion":%q,"resources":[%s]}`, gv, list)
}

func newFakeAPIServer(t *testing.T) *fakeAPIServer {
	t.Helper()
	f := &fakeAPIServer{objects: map[string]map[string]any{}, reads: map[string]int{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPIServer) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if d, ok := fakeDiscovery[r.URL.Path]; ok && r.Method == http.MethodGet {
		_, _ = io.WriteString(w, d)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch r.Method {
	case http.MethodPatch:
		var body map[string]any
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.patches = append(f.patches, patchRequest{
			path: r.URL.Path, contentType: r.Header.Get("Content-Type"),
			traceparent: r.Header.Get("traceparent"), tracestate: r.Header.Get("tracestate"),
			fieldManager: r.URL.Query().Get("fieldManager"), force: r.URL.Query().Get("force"), body: body,
		})
		obj := body
		md, _ := obj["metadata"].(map[string]any)
		md["uid"] = "uid-" + md["name"].(string)
		md["generation"] = 1
		f.objects[r.URL.Path] = obj
		_ = json.NewEncoder(w).Encode(obj)
	case http.MethodGet:
		f.gets = append(f.gets, r.Header.Clone())
		obj, ok := f.objects[r.URL.Path]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
			return
		}
		f.reads[r.URL.Path]++
		if f.status != nil {
			f.status(obj, f.reads[r.URL.Path])
		}
		_ = json.NewEncoder(w).Encode(obj)
	default:
		http.Error(w, "not served", http.StatusMethodNotAllowed)
	}
}

// kubeconfig writes a kubeconfig whose context (namespace shop) is the fake server.
func (f *fakeAPIServer) kubeconfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: %q}}]
users: [{name: ci, user: {}}]
contexts: [{name: fake, context: {cluster: fake, user: ci, namespace: shop}}]
current-context: fake
`, f.srv.URL)
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// otlpSink is an OTLP receiver (OTLP/HTTP protobuf, or gRPC) keeping the spans exported to it.
type otlpSink struct {
	mu    sync.Mutex
	spans []sinkSpan
}

type sinkSpan struct {
	ptrace.Span
	service string
}

func (s *otlpSink) keep(td ptrace.Traces) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rs := range td.ResourceSpans().All() {
		svc, _ := rs.Resource().Attributes().Get("service.name")
		for _, ss := range rs.ScopeSpans().All() {
			for _, sp := range ss.Spans().All() {
				c := ptrace.NewSpan()
				sp.CopyTo(c)
				s.spans = append(s.spans, sinkSpan{Span: c, service: svc.AsString()})
			}
		}
	}
}

func (s *otlpSink) named(t *testing.T, prefix string) []sinkSpan {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []sinkSpan
	for _, sp := range s.spans {
		if strings.HasPrefix(sp.Name(), prefix) {
			out = append(out, sp)
		}
	}
	return out
}

func (s *otlpSink) one(t *testing.T, name string) sinkSpan {
	t.Helper()
	got := s.named(t, name)
	if len(got) != 1 {
		t.Fatalf("%d spans named %q exported, want 1 (of %d)", len(got), name, len(s.spans))
	}
	return got[0]
}

// withOTLPHTTP points the exporter at an OTLP/HTTP receiver in the test.
func withOTLPHTTP(t *testing.T) *otlpSink {
	t.Helper()
	sink := &otlpSink{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		req := ptraceotlp.NewExportRequest()
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || req.UnmarshalProto(b) != nil {
			http.Error(w, "want OTLP/HTTP protobuf on /v1/traces", http.StatusBadRequest)
			return
		}
		sink.keep(req.Traces())
		resp, _ := ptraceotlp.NewExportResponse().MarshalProto()
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(resp)
	}))
	t.Cleanup(srv.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "")
	t.Setenv("TRACEPARENT", "")
	t.Setenv("TRACESTATE", "")
	t.Setenv("KUBETRAIL_SOURCE", "")
	return sink
}

type grpcSink struct {
	ptraceotlp.UnimplementedGRPCServer
	*otlpSink
}

func (g *grpcSink) Export(_ context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	g.keep(req.Traces())
	return ptraceotlp.NewExportResponse(), nil
}

// fastWaits makes --wait poll and the report re-read quickly.
func fastWaits(t *testing.T) {
	t.Helper()
	p, e, q := pollInterval, settleEvery, settleQuiet
	pollInterval, settleEvery, settleQuiet = 50*time.Millisecond, 10*time.Millisecond, 50*time.Millisecond
	t.Cleanup(func() { pollInterval, settleEvery, settleQuiet = p, e, q })
}

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const webDeployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: nginx}]}
`

// rollingOut makes a Deployment's replicas ready one per read.
func rollingOut(obj map[string]any, reads int) {
	spec, _ := obj["spec"].(map[string]any)
	want, ok := spec["replicas"].(float64)
	if !ok {
		return
	}
	ready := min(float64(reads), want)
	obj["status"] = map[string]any{"observedGeneration": 1, "replicas": want, "updatedReplicas": want, "readyReplicas": ready, "availableReplicas": ready}
}

var traceparentOf = regexp.MustCompile(`^00-([0-9a-f]{32})-([0-9a-f]{16})-01$`)

// apply runs a CI step's `kubectl trail apply` against the fake apiserver, under the step's
// TRACEPARENT: the root span is its child, each object is applied in a client span whose context
// the PATCH carries, the annotation is the root's context, and --wait follows the rollout in a
// span without sending the context on its reads.
func TestApplyTracesEachApplyUnderTheCISteps(t *testing.T) {
	fastWaits(t)
	sink := withOTLPHTTP(t)
	api := newFakeAPIServer(t)
	api.status = rollingOut
	const stepTrace, stepSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	t.Setenv("TRACEPARENT", "00-"+stepTrace+"-"+stepSpan+"-01")
	t.Setenv("TRACESTATE", "ci=step-3")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "ci.pipeline=deploy")
	dir := writeFiles(t, map[string]string{
		"a-web.yaml": "---\n# the web tier\n" + webDeployment,
		"b-cfg.json": `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cfg","namespace":"shop","annotations":{"team":"web"}},"data":{"k":"v"}}`,
		"notes.txt":  "not a manifest",
		"sub/x.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: not-read}\n",
	})
	code, out, errOut := invoke(t, "/usr/local/bin/kubectl-trail", "apply", "-f", dir, "--kubeconfig", api.kubeconfig(t), "--wait")
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || lines[0] != "deployment.apps/web serverside-applied" || lines[1] != "configmap/cfg serverside-applied" ||
		!strings.HasPrefix(lines[2], "deployment.apps/web ready after ") {
		t.Fatalf("stdout:\n%s", out)
	}
	if !strings.HasPrefix(errOut, "kubectl trail: trace "+stepTrace+"\n") {
		t.Fatalf("stderr does not begin with the trace ID:\n%s", errOut)
	}
	// No source: the line to run later.
	if !regexp.MustCompile(`kubectl trail: deployment.apps/web's story: kubectl trail deployment.apps/web -n shop --since \S+Z --source jaeger=URL; trace ` + stepTrace + "\n").MatchString(errOut) {
		t.Fatalf("stderr lacks the hint:\n%s", errOut)
	}

	root := sink.one(t, rootSpanName)
	if root.TraceID().String() != stepTrace || root.ParentSpanID().String() != stepSpan || root.service != serviceName {
		t.Fatalf("root span: trace %s parent %s service %q, want the step's trace %s, parent %s, service %s",
			root.TraceID(), root.ParentSpanID(), root.service, stepTrace, stepSpan, serviceName)
	}
	if root.TraceState().AsRaw() != "ci=step-3" {
		t.Errorf("root span's trace state %q, want the step's", root.TraceState().AsRaw())
	}
	if len(api.patches) != 2 {
		t.Fatalf("%d applies, want 2 (the subdirectory and notes.txt are not read)", len(api.patches))
	}
	for i, name := range []string{"apply deployments.apps", "apply configmaps"} {
		span, p := sink.one(t, name), api.patches[i]
		if span.Kind() != ptrace.SpanKindClient || span.ParentSpanID() != root.SpanID() || span.TraceID() != root.TraceID() {
			t.Errorf("%s: kind %s, parent %s: want a client span under the root", name, span.Kind(), span.ParentSpanID())
		}
		m := traceparentOf.FindStringSubmatch(p.traceparent)
		if m == nil || m[1] != stepTrace || m[2] != span.SpanID().String() {
			t.Errorf("%s: the request's traceparent %q, want the trace %s and the client span %s", p.path, p.traceparent, stepTrace, span.SpanID())
		}
		if p.tracestate != "ci=step-3" {
			t.Errorf("%s: tracestate %q", p.path, p.tracestate)
		}
		if p.contentType != "application/apply-patch+yaml" || p.fieldManager != defaultFieldManager || p.force != "false" {
			t.Errorf("%s: %s, field manager %q, force %q: want server-side apply by %s", p.path, p.contentType, p.fieldManager, p.force, defaultFieldManager)
		}
		ann, _, _ := nestedString(p.body, "metadata", "annotations", objecttrace.AnnotationTraceparent)
		if want := "00-" + stepTrace + "-" + root.SpanID().String() + "-01"; ann != want {
			t.Errorf("%s: annotation %q, want the root span's context %s", p.path, ann, want)
		}
		if uid, _ := span.Attributes().Get(model.AttrObjectUID); uid.AsString() == "" {
			t.Errorf("%s: no uid on the span", name)
		}
	}
	if team, _, _ := nestedString(api.patches[1].body, "metadata", "annotations", "team"); team != "web" {
		t.Errorf("the object's own annotations were lost: %v", api.patches[1].body["metadata"])
	}
	// The Deployment named no namespace: the context's. The ConfigMap named its own.
	if api.patches[0].path != "/apis/apps/v1/namespaces/shop/deployments/web" || api.patches[1].path != "/api/v1/namespaces/shop/configmaps/cfg" {
		t.Errorf("paths %s, %s", api.patches[0].path, api.patches[1].path)
	}
	wait := sink.one(t, "wait deployment.apps/web")
	if wait.ParentSpanID() != root.SpanID() || wait.Status().Code() == ptrace.StatusCodeError {
		t.Errorf("wait span: parent %s, status %s", wait.ParentSpanID(), wait.Status().Code())
	}
	if api.reads["/apis/apps/v1/namespaces/shop/deployments/web"] < 3 {
		t.Errorf("--wait read the Deployment %d times: it is ready at the third", api.reads["/apis/apps/v1/namespaces/shop/deployments/web"])
	}
	for _, h := range api.gets {
		if h.Get("traceparent") != "" {
			t.Fatalf("a read of --wait carried traceparent %s", h.Get("traceparent"))
		}
	}
	if len(sink.named(t, "wait configmap")) != 0 {
		t.Error("a ConfigMap has nothing to wait for, yet got a wait span")
	}
}

func nestedString(m map[string]any, path ...string) (string, bool, error) {
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return "", false, nil
		}
		v = mm[p]
	}
	s, ok := v.(string)
	return s, ok, nil
}

// Without TRACEPARENT the trace is new; with an unsampled one, the root is its child and still
// sampled (the user asked for the trace). Over gRPC when the environment says so.
func TestApplyStartsANewTraceOrSamplesAnUnsampledParentOverGRPC(t *testing.T) {
	fastWaits(t)
	withOTLPHTTP(t) // the variables reset; the endpoint is the gRPC one below
	sink := &otlpSink{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	ptraceotlp.RegisterGRPCServer(gs, &grpcSink{otlpSink: sink})
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+lis.Addr().String())
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf") // the traces' own variable wins
	api := newFakeAPIServer(t)
	file := filepath.Join(writeFiles(t, map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\n"}), "cm.yaml")

	code, _, errOut := invoke(t, "kubetrail", "apply", "-f", file, "--kubeconfig", api.kubeconfig(t))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	root := sink.one(t, rootSpanName)
	if !root.ParentSpanID().IsEmpty() || !strings.Contains(errOut, "kubetrail: trace "+root.TraceID().String()+"\n") {
		t.Fatalf("without TRACEPARENT: parent %s; stderr %s", root.ParentSpanID(), errOut)
	}
	if !strings.Contains(errOut, "kubetrail: configmap/cfg's story: kubetrail trace configmap/cfg -n shop") {
		t.Errorf("as kubetrail the hint is kubetrail trace's:\n%s", errOut)
	}

	const unsampled = "0af7651916cd43dd8448eb211c80319c"
	t.Setenv("TRACEPARENT", "00-"+unsampled+"-b7ad6b7169203331-00")
	if code, _, errOut := invoke(t, "kubetrail", "apply", "-f", file, "--kubeconfig", api.kubeconfig(t)); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var child sinkSpan
	for _, s := range sink.named(t, rootSpanName) {
		if s.TraceID().String() == unsampled {
			child = s
		}
	}
	if child.ParentSpanID().String() != "b7ad6b7169203331" {
		t.Fatalf("under an unsampled TRACEPARENT the root was not exported as its child")
	}
	if ann, _, _ := nestedString(api.patches[1].body, "metadata", "annotations", objecttrace.AnnotationTraceparent); ann != "00-"+unsampled+"-"+child.SpanID().String()+"-01" {
		t.Errorf("annotation %q: want the root's context, sampled", ann)
	}

	t.Setenv("TRACEPARENT", "garbage")
	code, _, errOut = invoke(t, "kubetrail", "apply", "-f", file, "--kubeconfig", api.kubeconfig(t))
	if code != 0 || !strings.Contains(errOut, "kubetrail: warning: TRACEPARENT is not a W3C traceparent") {
		t.Fatalf("a malformed TRACEPARENT: exit %d: %s", code, errOut)
	}
}

// --wait ends at --timeout with exit status 1, naming what the one that waited longest lacked,
// and the other objects not ready; their wait spans end in error.
func TestApplyWaitTimesOutNamingTheLongestWait(t *testing.T) {
	fastWaits(t)
	sink := withOTLPHTTP(t)
	api := newFakeAPIServer(t)
	api.status = func(obj map[string]any, _ int) {
		md := obj["metadata"].(map[string]any)
		ready := map[string]float64{"api": 2, "db": 0}[md["name"].(string)]
		obj["status"] = map[string]any{"observedGeneration": 1, "replicas": 3, "updatedReplicas": 3, "readyReplicas": ready, "availableReplicas": ready}
	}
	manifests := strings.ReplaceAll(webDeployment, "name: web", "name: api") + "---\n" + strings.ReplaceAll(webDeployment, "name: web", "name: db")
	file := filepath.Join(writeFiles(t, map[string]string{"m.yaml": manifests}), "m.yaml")
	code, out, errOut := invoke(t, "kubetrail", "apply", "-f", file, "--kubeconfig", api.kubeconfig(t), "--wait", "--timeout", "300ms")
	want := "kubetrail: timed out after 300ms: deployment.apps/api 2/3 ready (waited longest); also not ready: deployment.apps/db 0/3 ready\n"
	if code != 1 || !strings.HasSuffix(errOut, want) {
		t.Fatalf("exit %d, stderr:\n%s\nwant it to end with %q", code, errOut, want)
	}
	if strings.Contains(out, "ready after") {
		t.Errorf("stdout says something got ready:\n%s", out)
	}
	for _, name := range []string{"wait deployment.apps/api", "wait deployment.apps/db"} {
		if s := sink.one(t, name); s.Status().Code() != ptrace.StatusCodeError || !strings.Contains(s.Status().Message(), "ready") {
			t.Errorf("%s: status %s %q, want an error saying what it lacked", name, s.Status().Code(), s.Status().Message())
		}
	}
	if root := sink.one(t, rootSpanName); root.Status().Code() != ptrace.StatusCodeError {
		t.Errorf("root span status %s, want error", root.Status().Code())
	}
}

// A Job that fails, or a Pod, ends the wait at once with exit status 1 and why.
func TestApplyWaitFailsWhenAJobOrPodFails(t *testing.T) {
	fastWaits(t)
	withOTLPHTTP(t)
	for _, tc := range []struct {
		manifest string
		status   map[string]any
		want     string
	}{
		{"apiVersion: batch/v1\nkind: Job\nmetadata: {name: migrate}\nspec: {template: {spec: {restartPolicy: Never, containers: [{name: m, image: m}]}}}\n",
			map[string]any{"failed": 1, "conditions": []any{map[string]any{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}}},
			"job.batch/migrate failed after .*: condition Failed True \\(BackoffLimitExceeded: Job has reached the specified backoff limit\\)"},
		{"apiVersion: v1\nkind: Pod\nmetadata: {name: once}\nspec: {containers: [{name: c, image: c}]}\n",
			map[string]any{"phase": "Failed", "reason": "Evicted"},
			"pod/once failed after .*: phase Failed \\(Evicted\\)"},
	} {
		api := newFakeAPIServer(t)
		api.status = func(obj map[string]any, reads int) {
			if reads >= 2 {
				obj["status"] = tc.status
			}
		}
		file := filepath.Join(writeFiles(t, map[string]string{"m.yaml": tc.manifest}), "m.yaml")
		code, _, errOut := invoke(t, "kubetrail", "apply", "-f", file, "--kubeconfig", api.kubeconfig(t), "--wait")
		if code != 1 || !regexp.MustCompile("kubetrail: "+tc.want+"\n$").MatchString(errOut) {
			t.Errorf("exit %d, stderr:\n%s\nwant %s", code, errOut, tc.want)
		}
	}
}

// -f - reads stdin: YAML documents and Lists, every item applied in order.
func TestApplyReadsStdinDocumentsAndLists(t *testing.T) {
	withOTLPHTTP(t)
	api := newFakeAPIServer(t)
	prev := stdin
	t.Cleanup(func() { stdin = prev })
	stdin = strings.NewReader(`apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: ConfigMap, metadata: {name: one}}
- {apiVersion: v1, kind: ConfigMap, metadata: {name: two, namespace: shop}}
---
---
apiVersion: v1
kind: Namespace
metadata: {name: shop}
`)
	code, out, errOut := invoke(t, "kubetrail", "apply", "-f", "-", "--kubeconfig", api.kubeconfig(t), "-n", "shop")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if out != "configmap/one serverside-applied\nconfigmap/two serverside-applied\nnamespace/shop serverside-applied\n" {
		t.Fatalf("stdout:\n%s", out)
	}
	var paths []string
	for _, p := range api.patches {
		paths = append(paths, p.path)
	}
	want := []string{"/api/v1/namespaces/shop/configmaps/one", "/api/v1/namespaces/shop/configmaps/two", "/api/v1/namespaces/shop"}
	if !slices.Equal(paths, want) {
		t.Fatalf("applied %v, want %v", paths, want)
	}
}

// Mistakes: no -f, arguments, a kind the cluster does not serve, a namespace that contradicts -n
// (nothing is applied), an unreadable file; an OTLP endpoint that refuses the spans is a warning.
func TestApplyRefusesMistakesBeforeApplyingAnything(t *testing.T) {
	withOTLPHTTP(t)
	api := newFakeAPIServer(t)
	kc := api.kubeconfig(t)
	dir := writeFiles(t, map[string]string{
		"ok.yaml":       "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\n",
		"gizmo.yaml":    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\n---\napiVersion: example.com/v1\nkind: Gizmo\nmetadata: {name: g}\n",
		"other-ns.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, namespace: prod}\n",
		"noname.yaml":   "apiVersion: v1\nkind: ConfigMap\nmetadata: {generateName: cfg-}\n",
		"bad.yaml":      "apiVersion: v1\nkind: [\n",
		"empty/.keep":   "",
	})
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"apply"}, 2, "kubetrail: -f is required"},
		{[]string{"apply", "-f", dir + "/ok.yaml", "deploy/web"}, 2, "takes its objects from files, with -f: got arguments deploy/web"},
		{[]string{"apply", "-f", dir + "/ok.yaml", "--timeout", "0s"}, 2, "--timeout 0s: want a positive duration"},
		{[]string{"apply", "-f", dir + "/ok.yaml", "-wait"}, 2, "a long flag takes two dashes"},
		{[]string{"apply", "-f", dir + "/gizmo.yaml"}, 1, "gizmo.yaml, document 2: the cluster (context fake) serves no kind Gizmo in example.com/v1"},
		{[]string{"apply", "-f", dir + "/other-ns.yaml", "-n", "shop"}, 1, `the object's namespace "prod" does not match -n "shop"`},
		{[]string{"apply", "-f", dir + "/noname.yaml"}, 1, `noname.yaml, document 1: ConfigMap has generateName "cfg-" and no name`},
		{[]string{"apply", "-f", dir + "/bad.yaml"}, 1, "bad.yaml, document 1: not YAML or JSON"},
		{[]string{"apply", "-f", dir + "/missing.yaml"}, 1, "-f: stat " + dir + "/missing.yaml: no such file or directory"},
		{[]string{"apply", "-f", dir + "/empty"}, 1, "the directory holds no .yaml, .yml or .json file"},
	} {
		code, _, errOut := invoke(t, "kubetrail", append(tc.args, "--kubeconfig", kc)...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d (want %d): %s\nwant %q", tc.args, code, tc.code, errOut, tc.want)
		}
	}
	if len(api.patches) != 0 {
		t.Fatalf("%d objects applied by command lines that are mistakes", len(api.patches))
	}

	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no", http.StatusBadRequest)
	}))
	defer refusing.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", refusing.URL)
	code, out, errOut := invoke(t, "kubetrail", "apply", "-f", dir+"/ok.yaml", "--kubeconfig", kc)
	if code != 0 || out != "configmap/cfg serverside-applied\n" || !strings.Contains(errOut, "kubetrail: warning: the trace's spans were not all exported (") {
		t.Fatalf("an OTLP endpoint refusing the spans: exit %d: %s%s", code, out, errOut)
	}
}

// With a source, after --wait, apply prints the applied object's tree and summary as trace
// prints them, read from the backend.
func TestApplyWaitThenPrintsTheTreeFromTheSource(t *testing.T) {
	fastWaits(t)
	withOTLPHTTP(t)
	api := newFakeAPIServer(t)
	api.status = rollingOut
	start := time.Now()
	traces := fakeRollout("testbed", "uid-web", start)
	src := "file=" + writeJSONL(t, traces)
	file := filepath.Join(writeFiles(t, map[string]string{"web.yaml": webDeployment}), "web.yaml")
	code, out, errOut := invoke(t, "kubectl-trail", "apply", "-f", file, "--kubeconfig", api.kubeconfig(t), "--wait", "--cluster", "testbed", "--source", src)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"deployment.apps/web serverside-applied\ndeployment.apps/web ready after ",
		"\nDeployment shop/web in cluster testbed: 3 spans, 1 trace, window ",
		"\nWhy is it slow: ",
		"\nDeployment shop/web  [first seen ",
		"  · " + start.Add(time.Second).UTC().Format("15:04:05.000") + "  ci  patch  200",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(errOut, "story") || strings.Contains(errOut, "warning") {
		t.Errorf("stderr:\n%s", errOut)
	}

	// A backend without the object's spans: a warning naming the command to run later, exit 0.
	empty := "file=" + writeJSONL(t, fakeRollout("elsewhere", "uid-other", start))
	code, _, errOut = invoke(t, "kubectl-trail", "apply", "-f", file, "--kubeconfig", api.kubeconfig(t), "--wait", "--cluster", "testbed", "--source", empty, "--settle", "100ms")
	if code != 0 || !strings.Contains(errOut, "kubectl trail: warning: deployment.apps/web: unknown object") || !strings.Contains(errOut, "; later: kubectl trail deployment.apps/web -n shop --cluster testbed --since ") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}

// fakeRollout is what the collector would have exported of the Deployment shop/web: its object
// span in its derived trace, and two writes after start.
func fakeRollout(cluster, uid string, start time.Time) ptrace.Traces {
	b := model.NewTracesBuilder("test", "")
	web := model.Object{Cluster: cluster, Group: "apps", Version: "v1", Resource: "deployments", Kind: "Deployment",
		Namespace: "shop", Name: "web", UID: uid}
	w := model.WindowStart(start, model.DefaultWindow)
	key := web.Key()
	tid, sid := model.ObjectTraceID(key, w), model.ObjectSpanID(key, w)
	obj := b.AppendSpan(web)
	obj.SetTraceID(tid)
	obj.SetSpanID(sid)
	obj.SetName("Deployment shop/web")
	obj.SetStartTimestamp(pcommon.NewTimestampFromTime(w))
	obj.SetEndTimestamp(pcommon.NewTimestampFromTime(w.Add(model.DefaultWindow)))
	obj.Attributes().PutStr(model.AttrSpanType, model.SpanTypeObject)
	for i, user := range []string{"ci", "system:serviceaccount:kube-system:deployment-controller"} {
		s := b.AppendSpan(web)
		s.SetTraceID(tid)
		s.SetSpanID(pcommon.SpanID{byte(i + 1)})
		s.SetParentSpanID(sid)
		s.SetName("patch deployments")
		at := start.Add(time.Duration(i+1) * time.Second)
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(at))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(at.Add(5 * time.Millisecond)))
		s.Attributes().PutStr(model.AttrSpanType, model.SpanTypeAudit)
		s.Attributes().PutStr(model.AttrAuditVerb, "patch")
		s.Attributes().PutStr(model.AttrUserName, user)
		s.Attributes().PutInt(model.AttrHTTPStatusCode, 200)
	}
	return b.Traces()
}
