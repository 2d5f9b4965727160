//go:build dist

// Package distribution_test runs the real otelcol-kubetrail binary built by ocb (`make build`) on
// the shipped configurations: the configs must validate, and a recorded audit capture POSTed to
// its webhook must come out of the file exporter as one object tree, once.
// Run with `make dist-test` (part of `make test`).
package distribution_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"sigs.k8s.io/yaml"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/internal/tracetree"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	root   = filepath.Join("..")
	binary = filepath.Join(root, "bin", "otelcol-kubetrail")
)

func requireBinary(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(binary); err != nil {
		t.Fatalf("%s is missing: run `make build` first (%v)", binary, err)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func validate(t *testing.T, config string, env ...string) {
	t.Helper()
	cmd := exec.Command(binary, "validate", "--config", config)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("validate %s: %v\n%s", config, err, out)
	}
}

// launched is a running bin/otelcol-kubetrail.
type launched struct {
	cmd    *exec.Cmd
	logs   *bytes.Buffer
	exited chan error
}

// launch starts the collector on a config file.
func launch(t *testing.T, configPath string, env ...string) *launched {
	t.Helper()
	cmd := exec.Command(binary, "--config", configPath)
	cmd.Env = append(os.Environ(), env...)
	l := &launched{cmd: cmd, logs: &bytes.Buffer{}, exited: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = l.logs, l.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { l.exited <- cmd.Wait() }()
	return l
}

// stop sends SIGTERM and waits up to 30 s for the collector to exit (everything it accepted is
// exported by then), then kills it; it reports whether the collector stopped by itself.
func (l *launched) stop() bool {
	_ = l.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-l.exited:
		l.exited <- err
		return true
	case <-time.After(30 * time.Second):
		_ = l.cmd.Process.Kill()
		l.exited <- <-l.exited
		return false
	}
}

// exitedEarly reports whether the collector has exited, and how.
func (l *launched) exitedEarly() (bool, error) {
	select {
	case err := <-l.exited:
		l.exited <- err
		return true, err
	default:
		return false, nil
	}
}

func TestShippedConfigsValidate(t *testing.T) {
	requireBinary(t)
	validate(t, filepath.Join(root, "distribution", "config.yaml"))

	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(clusterConfig(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	validate(t, path, "POD_IP=127.0.0.1", "KUBETRAIL_CLUSTER=test", "OTLP_ENDPOINT=127.0.0.1:4317")
}

// clusterConfig returns the in-cluster collector config that the Kubernetes manifests embed in a
// ConfigMap.
func clusterConfig(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "distribution", "kubernetes", "kubetrail.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		var obj struct {
			Kind string            `json:"kind"`
			Data map[string]string `json:"data"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("manifest document does not parse: %v", err)
		}
		if obj.Kind == "ConfigMap" && obj.Data["config.yaml"] != "" {
			return obj.Data["config.yaml"]
		}
	}
	t.Fatal("no ConfigMap with the collector config in distribution/kubernetes/kubetrail.yaml")
	return ""
}

// TestMisspelledKeyFailsValidation: a typo in the k8s_audit receiver's keys (its confighttp
// settings are squashed into its own) fails `validate` naming the key, instead of being ignored.
func TestMisspelledKeyFailsValidation(t *testing.T) {
	requireBinary(t)
	config := func(key string) string {
		path := filepath.Join(t.TempDir(), "config.yaml")
		body := fmt.Sprintf(`receivers:
  k8s_audit:
    %s: 127.0.0.1:9880
    cluster: test
exporters:
  debug:
service:
  pipelines:
    traces:
      receivers: [k8s_audit]
      exporters: [debug]
`, key)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	validate(t, config("endpoint"))
	out, err := exec.Command(binary, "validate", "--config", config("endpiont")).CombinedOutput()
	if err == nil {
		t.Fatalf("validate accepted a config with `endpiont:`\n%s", out)
	}
	if !strings.Contains(string(out), `unknown key "endpiont" (did you mean "endpoint"?)`) {
		t.Fatalf("validate failed without naming the key:\n%s", out)
	}
}

// auditLogLines are audit log lines (creates of ConfigMaps) with the audit IDs prefix-0 ….
func auditLogLines(prefix string, n int) (string, []string) {
	var b strings.Builder
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
		fmt.Fprintf(&b, `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":%q,"stage":"ResponseComplete",`+
			`"requestURI":"/api/v1/namespaces/default/configmaps","verb":"create","user":{"username":"alice"},"sourceIPs":["127.0.0.1"],`+
			`"objectRef":{"resource":"configmaps","namespace":"default","name":"cm-%s","apiVersion":"v1"},"responseStatus":{"code":201},`+
			`"requestReceivedTimestamp":"2026-11-25T01:00:00.000000Z","stageTimestamp":"2026-11-25T01:00:00.001000Z"}`+"\n", ids[i], ids[i])
	}
	return b.String(), ids
}

// exportedAuditIDs counts the audit IDs of the spans in an OTLP JSON lines file.
func exportedAuditIDs(t *testing.T, path string) map[string]int {
	t.Helper()
	got := map[string]int{}
	if forest := readForest(t, path); forest != nil {
		for _, n := range forest.Find(tracetree.ByAttr(model.AttrSpanType, model.SpanTypeAudit)) {
			got[n.Attr(model.AttrAuditID)]++
		}
	}
	return got
}

// TestAuditLogRotatedWhileStopped: the collector tails an audit log with a file_storage
// checkpoint, stops, the log is rotated the way the apiserver does it (audit.log renamed to
// audit-<timestamp>.log, a new audit.log) after more lines were written to it, and the
// collector starts again: every line is exported exactly once.
func TestAuditLogRotatedWhileStopped(t *testing.T) {
	requireBinary(t)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "audit.log")
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	appendLog := func(path, text string) {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(text); err != nil {
			t.Fatal(err)
		}
	}
	// run starts the collector on the log, waits until it exported want spans and stops it
	// (SIGTERM: everything accepted is exported by then), returning what it exported.
	run := func(name string, want int) map[string]int {
		out := filepath.Join(dir, name+".jsonl")
		config := filepath.Join(dir, name+".yaml")
		body := fmt.Sprintf(`extensions:
  file_storage:
    directory: %s
receivers:
  k8s_audit:
    endpoint: ""
    cluster: disttest
    files: [%s]
    storage: file_storage
    start_at: beginning
    poll_interval: 50ms
exporters:
  file:
    path: %s
    format: json
service:
  extensions: [file_storage]
  telemetry:
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [k8s_audit]
      exporters: [file]
`, state, logPath, out)
		if err := os.WriteFile(config, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		c := launch(t, config)
		stop := func() {
			if !c.stop() {
				t.Fatalf("%s: the collector did not stop on SIGTERM\n%s", name, c.logs.String())
			}
		}
		for deadline := time.Now().Add(90 * time.Second); len(exportedAuditIDs(t, out)) < want; {
			if time.Now().After(deadline) {
				stop()
				t.Fatalf("%s: exported %d audit spans, want %d\n%s", name, len(exportedAuditIDs(t, out)), want, c.logs.String())
			}
			time.Sleep(200 * time.Millisecond)
		}
		stop()
		if t.Failed() {
			t.Logf("%s log:\n%s", name, c.logs.String())
		}
		return exportedAuditIDs(t, out)
	}

	text, first := auditLogLines("read", 600)
	appendLog(logPath, text)
	got := run("first", len(first))

	// Stopped: the old file gets more lines, is rotated away, and a new file is written.
	text, unread := auditLogLines("unread", 400)
	appendLog(logPath, text)
	if err := os.Rename(logPath, filepath.Join(dir, "audit-2026-11-25T01-02-03.000.log")); err != nil {
		t.Fatal(err)
	}
	text, next := auditLogLines("next", 300)
	appendLog(logPath, text)
	for id, n := range run("second", len(unread)+len(next)) {
		got[id] += n
	}

	want := append(append(first, unread...), next...)
	for _, id := range want {
		if got[id] != 1 {
			t.Errorf("audit event %s exported %d times, want once", id, got[id])
		}
	}
	if len(got) != len(want) {
		t.Errorf("exported %d distinct audit events, want %d", len(got), len(want))
	}
}

// auditEvent is the part of an audit.k8s.io/v1 Event this test reads from the fixtures.
type auditEvent struct {
	AuditID   string `json:"auditID"`
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	ObjectRef *struct {
		Resource string `json:"resource"`
		APIGroup string `json:"apiGroup"`
	} `json:"objectRef"`
}

// checkOneSpanPerWrite waits up to a minute for the file exporter's output out to hold an audit
// span of every audit ID in want, then checks that each is there exactly once, under an object
// span, in cluster; it returns the exported forest.
func checkOneSpanPerWrite(t *testing.T, out string, want map[string]bool, cluster string) *tracetree.Forest {
	t.Helper()
	var forest *tracetree.Forest
	for deadline := time.Now().Add(60 * time.Second); ; {
		forest = readForest(t, out)
		if forest != nil && countType(forest, model.SpanTypeAudit) >= len(want) {
			time.Sleep(1500 * time.Millisecond) // stragglers: spans held for owner_wait
			forest = readForest(t, out)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("exported audit spans: %d, want %d", countType(forest, model.SpanTypeAudit), len(want))
		}
		time.Sleep(250 * time.Millisecond)
	}
	if forest.Duplicates != 0 {
		t.Errorf("%d spans were exported twice", forest.Duplicates)
	}
	got := map[string]int{}
	for _, n := range forest.Find(tracetree.ByAttr(model.AttrSpanType, model.SpanTypeAudit)) {
		got[n.Attr(model.AttrAuditID)]++
		if n.Parent == nil || n.Parent.Attr(model.AttrSpanType) != model.SpanTypeObject {
			t.Errorf("audit span %q is not under an object span", n.Span.Name())
		}
		if v, _ := n.Resource.Attributes().Get(model.AttrClusterName); v.Str() != cluster {
			t.Errorf("cluster = %q, want %q", v.Str(), cluster)
		}
	}
	for id := range want {
		if got[id] != 1 {
			t.Errorf("audit event %s exported %d times, want once", id, got[id])
		}
	}
	if len(got) != len(want) {
		t.Errorf("exported %d distinct audit events, want %d", len(got), len(want))
	}
	return forest
}

// expectedAuditIDs are the events the default k8s_audit config turns into spans: completed
// writes, leases and Events excluded (docs/design.md, Spans; the receiver's documented defaults).
func expectedAuditIDs(t *testing.T, bodies [][]byte) map[string]bool {
	t.Helper()
	want := map[string]bool{}
	writes := map[string]bool{"create": true, "update": true, "patch": true, "delete": true, "deletecollection": true}
	for _, b := range bodies {
		var list struct {
			Items []auditEvent `json:"items"`
		}
		if err := json.Unmarshal(b, &list); err != nil {
			t.Fatal(err)
		}
		for _, ev := range list.Items {
			if (ev.Stage != "ResponseComplete" && ev.Stage != "Panic") || !writes[ev.Verb] || ev.ObjectRef == nil {
				continue
			}
			if ev.ObjectRef.Resource == "events" || (ev.ObjectRef.APIGroup == "coordination.k8s.io" && ev.ObjectRef.Resource == "leases") {
				continue
			}
			want[ev.AuditID] = true
		}
	}
	return want
}

// recordedBodies reads the audit webhook bodies recorded for a testbed scenario, in order.
func recordedBodies(t *testing.T, scenario string) [][]byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "testbed", "fixtures", scenario, "audit-webhook", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no recorded %s capture: %v", scenario, err)
	}
	var bodies [][]byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, b)
	}
	return bodies
}

func TestRecordedCaptureThroughTheRealBinary(t *testing.T) {
	requireBinary(t)
	bodies := recordedBodies(t, "deployment")

	out := filepath.Join(t.TempDir(), "traces.jsonl")
	auditPort, healthPort := freePort(t), freePort(t)
	startCollectorFile(t, filepath.Join(root, "distribution", "config.yaml"), healthPort,
		fmt.Sprintf("KUBETRAIL_AUDIT_ENDPOINT=127.0.0.1:%d", auditPort),
		fmt.Sprintf("KUBETRAIL_HEALTH_ENDPOINT=127.0.0.1:%d", healthPort),
		fmt.Sprintf("KUBETRAIL_METRICS_PORT=%d", freePort(t)),
		"KUBETRAIL_CLUSTER=ignored-when-the-path-names-one",
		"KUBETRAIL_OUT="+out)
	client := &http.Client{Timeout: 10 * time.Second}

	post := func(body []byte) int {
		resp, err := client.Post(fmt.Sprintf("http://127.0.0.1:%d/audit/disttest", auditPort), "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for i, b := range bodies {
		if code := post(b); code != http.StatusOK {
			t.Fatalf("POST of batch %d answered %d", i+1, code)
		}
	}
	// The apiserver redelivers a batch when it misses the answer: the same events must not
	// produce a second copy of any span.
	if code := post(bodies[0]); code != http.StatusOK {
		t.Fatalf("redelivered batch answered %d", code)
	}
	if code := post([]byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[`)); code != http.StatusBadRequest {
		t.Fatalf("a truncated body answered %d, want 400", code)
	}

	forest := checkOneSpanPerWrite(t, out, expectedAuditIDs(t, bodies), "disttest")

	deployments := forest.Find(tracetree.ByName("Deployment default/demo"))
	if len(deployments) != 1 || deployments[0].Parent != nil {
		t.Fatalf("want exactly one root Deployment default/demo, got %d", len(deployments))
	}
	var replicaSets int
	for _, c := range deployments[0].Children {
		if c.Attr(model.AttrSpanType) != model.SpanTypeObject {
			continue
		}
		if !strings.HasPrefix(c.Label(), "ReplicaSet default/demo-") {
			t.Errorf("unexpected object under the Deployment: %s", c.Label())
			continue
		}
		replicaSets++
	}
	if replicaSets != 2 {
		t.Errorf("ReplicaSets under the Deployment: %d, want 2 (before and after the image change)", replicaSets)
	}
	for _, pod := range forest.Find(func(n *tracetree.Node) bool { return strings.HasPrefix(n.Label(), "Pod default/demo-") }) {
		if pod.Parent == nil || !strings.HasPrefix(pod.Parent.Label(), "ReplicaSet default/demo-") {
			t.Errorf("%s is not under a ReplicaSet", pod.Label())
		}
	}
}

func readForest(t *testing.T, path string) *tracetree.Forest {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	batches, err := tracetree.ReadOTLPJSONLines(f)
	if err != nil {
		// The exporter may be mid-line; the next poll reads it whole.
		return nil
	}
	return tracetree.Build(batches...)
}

func countType(f *tracetree.Forest, typ string) int {
	if f == nil {
		return 0
	}
	return len(f.Find(tracetree.ByAttr(model.AttrSpanType, typ)))
}
