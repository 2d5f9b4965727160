//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kubetrail/kubetrail/internal/model"
)

// cliWindow is the window of the collector this test starts: the processor's minimum, so that
// the deployment scenario (about 1.2 s on the testbed) crosses a window boundary.
const cliWindow = time.Second

// cliNode is the part of `kubetrail trace -o json` (docs/cli.md) this test reads.
type cliNode struct {
	Kind, Name, UID string
	Windows         []struct {
		TraceID         string `json:"trace_id"`
		SpanID          string `json:"span_id"`
		PreviousTraceID string `json:"previous_trace_id"`
	}
	Spans []struct {
		TraceID string `json:"trace_id"`
		SpanID  string `json:"span_id"`
	} `json:"spans"`
	Children []*cliNode
}

func (n *cliNode) ids(into map[string]bool) {
	for _, w := range n.Windows {
		into[w.TraceID+"/"+w.SpanID] = true
	}
	for _, s := range n.Spans {
		into[s.TraceID+"/"+s.SpanID] = true
	}
	for _, c := range n.Children {
		c.ids(into)
	}
}

// TestTraceCommandMergesARolloutAcrossWindows runs the deployment scenario through a collector
// whose window is 1 s, then reads it back from Jaeger with `bin/kubetrail trace deployment/demo`:
// one tree, holding every span of the Deployment's windows' traces. It runs after the other
// tests (AfterOthers) because its collector's spans are extra object trees in Jaeger for other
// tests' windows.
func TestTraceCommandMergesARolloutAcrossWindows(t *testing.T) {
	AfterOthers(t)
	env := Testbed(t)
	requireObjectLink(t, env)
	bin := kubetrailBinary(t, env)
	if bin == "" {
		return
	}
	cfg := env.CollectorConfig()
	cfg.Delete("receivers.k8s_event_spans") // the main collector watches Events already
	cfg.SetPipeline("receivers", "k8s_audit")
	cfg.Set("receivers.k8s_audit.window", cliWindow.String())
	cfg.Set("processors.k8s_object_link.window", cliWindow.String())
	// The scenario's Deployment carries a trace context: nested, its windows would share that
	// trace; this test is about windows in traces of their own, merged by the CLI.
	cfg.Set("processors.k8s_object_link.trace_context.nest", false)
	short := env.StartExtraCollector(t, "short-window", cfg)
	env.Router.SetRoute(ToAll(short.AuditURL))
	t.Cleanup(env.RestoreRoute)

	// The Deployment's own activity can fit inside one 1 s window even when the script takes
	// longer (CI saw it once), so the run starts 0.6 s into a window, and is rerun (it is
	// idempotent, and each run creates a new Deployment) until its activity crosses a boundary.
	var (
		run    *ScenarioRun
		spans  Spans
		uids   []string
		traces map[string]bool
	)
	for attempt := 1; attempt <= 3; attempt++ {
		time.Sleep(time.Until(model.WindowStart(time.Now(), cliWindow).Add(cliWindow + 600*time.Millisecond)))
		var err error
		if run, err = env.RunScenario("deployment"); err != nil {
			t.Fatal(err)
		}
		spans = env.Spans(t, run)
		uids = createdUIDs(spans, run.Window(), "Deployment", "default", "demo")
		if !Check(t, "the rerun created Deployment demo once", len(uids) == 1, "uids %v", uids) {
			return
		}
		// The short collector's windows of the Deployment, and every span of their traces.
		windows := spans.OfType(model.SpanTypeObject).WithAttr(model.AttrObjectUID, uids[0]).
			Where(func(s *Span) bool { return s.End.Sub(s.Start) == cliWindow })
		traces = map[string]bool{}
		for _, w := range windows {
			traces[w.TraceID] = true
		}
		if len(traces) >= 2 {
			break
		}
		t.Logf("attempt %d: the Deployment's activity fit in %d window(s) of %s; rerunning", attempt, len(traces), cliWindow)
	}
	if !Check(t, "the rollout crossed window boundaries", len(traces) >= 2, "%d windows of %s", len(traces), cliWindow) {
		return
	}
	// The tree holds every window (object span) of those traces, and every activity span of them
	// in [since, until]: the range the CLI is asked for bounds the activity it shows (docs/cli.md),
	// and the first window starts before since. What that window holds before since is not the
	// run's: the previous test's deletion of its demo, posted by the apiserver's webhook batch
	// after the route changed to this collector, which never saw that demo's UID, so the name
	// gave it the new demo's (CI saw it once: 3 spans, delete deployments and the GC's two delete
	// replicasets, 50 ms before since).
	since, until := run.Start.Add(-time.Second), run.End.Add(2*time.Second)
	inRange := func(s *Span) bool {
		return s.Attr(model.AttrSpanType) == model.SpanTypeObject || (!s.End.Before(since) && !s.Start.After(until))
	}
	want := spans.Where(func(s *Span) bool { return traces[s.TraceID] && inRange(s) })
	for _, s := range spans.Where(func(s *Span) bool { return traces[s.TraceID] && !inRange(s) }) {
		t.Logf("out of the CLI's range %s to %s, not expected in the tree: %s %s at %s",
			since.Format("15:04:05.000"), until.Format("15:04:05.000"), s.Name, s.Attr(model.AttrObjectName), s.Start.Format("15:04:05.000"))
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "trace", "deployment/demo", "-n", "default", "--cluster", ClusterName,
		"--source", "jaeger="+env.Jaeger.QueryURL, "--window", cliWindow.String(), "-o", "json",
		"--since", since.UTC().Format(time.RFC3339Nano), "--until", until.UTC().Format(time.RFC3339Nano))
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if !Check(t, "kubetrail trace deployment/demo reads the run back from Jaeger", err == nil, "%v: %s", err, errOut.String()) {
		return
	}
	var root cliNode
	if err := json.Unmarshal(out.Bytes(), &root); err != nil {
		t.Fatalf("-o json: %v", err)
	}
	got := map[string]bool{}
	root.ids(got)
	var missing []string
	for _, s := range want {
		if !got[s.TraceID+"/"+s.SpanID] {
			missing = append(missing, s.Name)
		}
	}
	Check(t, "one tree rooted at the run's Deployment", root.Kind == "Deployment" && root.Name == "demo" && root.UID == uids[0],
		"root %s %s %s", root.Kind, root.Name, root.UID)
	Check(t, "the tree holds every span of the Deployment's windows", len(missing) == 0 && len(want) > 50,
		"%d of %d spans of %d windows missing: %v", len(missing), len(want), len(traces), missing[:min(10, len(missing))])
	var tree bytes.Buffer
	tcmd := exec.CommandContext(ctx, bin, "trace", "deployment/demo", "-n", "default", "--cluster", ClusterName, "--uid", uids[0],
		"--source", "jaeger="+env.Jaeger.QueryURL, "--window", cliWindow.String(), "--since", since.UTC().Format(time.RFC3339Nano))
	tcmd.Stdout, tcmd.Stderr = &tree, &errOut
	Check(t, "the terminal tree by computed trace IDs (--uid) renders", tcmd.Run() == nil && bytes.Contains(tree.Bytes(), []byte("ReplicaSet default/demo-")), "%s", errOut.String())
	_ = os.WriteFile(filepath.Join(env.OutDir, "kubetrail-trace-demo.txt"), tree.Bytes(), 0o644)
}

// TestKubectlTrailReadsTheUIDFromTheCluster runs the deployment scenario up to its last step (the
// Deployment is kept) through the main collector, then reads it back as a kubectl plugin: the
// binary invoked as kubectl-trail, the testbed's kubeconfig in $KUBECONFIG, no -n (the context's
// namespace) and no --uid. -v 1 says where the UID came from: the cluster, and no tag search was
// made (the windows' trace IDs were computed). Once the Deployment is deleted, the same command
// says so in one line and finds the same tree by the backend's search.
func TestKubectlTrailReadsTheUIDFromTheCluster(t *testing.T) {
	AfterOthers(t)
	env := Testbed(t)
	requireObjectLink(t, env)
	bin := kubetrailBinary(t, env)
	if bin == "" {
		return
	}
	plugin := filepath.Join(t.TempDir(), "kubectl-trail") // kubectl runs a plugin by this name
	if err := os.Symlink(bin, plugin); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = env.RunKubectl("delete", "deployment", "demo", "--ignore-not-found", "--wait=true", "--timeout=60s")
	})
	run, err := env.RunScenario("deployment", "SCENARIO_KEEP=1")
	if err != nil {
		t.Fatal(err)
	}
	uids := createdUIDs(env.Spans(t, run), run.Window(), "Deployment", "default", "demo")
	if !Check(t, "the run created Deployment demo once", len(uids) == 1, "uids %v", uids) {
		return
	}
	since := run.Start.Add(-time.Second).UTC().Format(time.RFC3339Nano)
	trail := func() (stdout, stderr string, err error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var out, errOut bytes.Buffer
		cmd := exec.CommandContext(ctx, plugin, "deploy/demo", "--source", "jaeger="+env.Jaeger.QueryURL, "--since", since, "-v", "1")
		cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig, "KUBETRAIL_CLUSTER="+ClusterName)
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err = cmd.Run()
		return out.String(), errOut.String(), err
	}
	tree := func(out string) bool {
		return strings.HasPrefix(out, "Deployment default/demo in cluster "+ClusterName) &&
			strings.Contains(out, "\n  ReplicaSet default/demo-") && strings.Contains(out, "\n    Pod default/demo-")
	}

	out, errOut, err := trail()
	_ = os.WriteFile(filepath.Join(env.OutDir, "kubectl-trail-demo.txt"), []byte(out+"\n--- stderr\n"+errOut), 0o644)
	if !Check(t, "kubectl trail deploy/demo prints the run's tree, with no -n and no --uid", err == nil && tree(out), "%v: %s\n%s", err, errOut, out) {
		return
	}
	Check(t, "the UID came from the cluster and the trace IDs were computed, not searched",
		strings.Contains(errOut, "uid "+uids[0]+" from the cluster (context ") && strings.Contains(errOut, "; no tag search; uid "+uids[0]),
		"stderr:\n%s", errOut)

	checkChangesAndShow(t, env, bin, since)
	checkRefusedScale(t, env, trail)

	if out, err := env.RunKubectl("delete", "deployment", "demo", "--wait=true", "--timeout=60s"); err != nil {
		t.Fatalf("kubectl delete deployment demo: %v: %s", err, out)
	}
	out, errOut, err = trail()
	Check(t, "once deleted, one line says so and the backend's search finds the same tree",
		err == nil && tree(out) && strings.Contains(errOut, "kubectl trail: Deployment default/demo is not in the cluster (context ") &&
			strings.Contains(errOut, "; tag search made; uid "+uids[0]),
		"%v: %s\n%s", err, errOut, cliHead(out))
}

// checkChangesAndShow reads the deployment scenario's run back from Jaeger as a change feed and
// as manifests: `kubetrail changes --field spec.replicas` lists the two scales, newest first,
// with their old and new values; `kubetrail show --at` just before the image change prints the
// Deployment scaled to 4, still on the old image, and just after the second scale at 2 replicas
// on the new one.
func checkChangesAndShow(t *testing.T, env *Env, bin, since string) {
	t.Helper()
	kt := func(args ...string) (string, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var out, errOut bytes.Buffer
		cmd := exec.CommandContext(ctx, bin, append(args, "--source", "jaeger="+env.Jaeger.QueryURL, "--cluster", ClusterName)...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig)
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		return out.String(), errOut.String(), err
	}
	out, errOut, err := kt("changes", "deployments", "-n", "default", "--since", since, "--field", "spec", "-o", "json")
	_ = os.WriteFile(filepath.Join(env.OutDir, "kubetrail-changes-demo.json"), []byte(out+"\n--- stderr\n"+errOut), 0o644)
	var feed struct {
		Writes []struct {
			Time    time.Time
			Name    string
			User    string
			Verb    string
			Changes []struct{ Path, Old, New string }
		}
	}
	if !Check(t, "kubetrail changes reads the feed from Jaeger", err == nil && json.Unmarshal([]byte(out), &feed) == nil, "%v: %s", err, errOut) {
		return
	}
	var got []string
	var times []time.Time
	for _, w := range feed.Writes {
		if w.Name != "demo" || w.User != "kubernetes-admin" {
			continue
		}
		times = append(times, w.Time)
		for _, c := range w.Changes {
			got = append(got, c.Path+" "+c.Old+"→"+c.New)
		}
	}
	want := []string{"spec.replicas 4→2", `spec.template.spec.containers[name=nginx].image "registry.k8s.io/nginx:1.27"→"registry.k8s.io/nginx:1.28"`, "spec.replicas 2→4"}
	if !Check(t, "the feed lists the scenario's scales and image change, newest first, with old and new values",
		strings.Join(got, "; ") == strings.Join(want, "; ") && len(times) == 3, "got %q", got) {
		return
	}
	image, lastScale := times[1], times[0]
	show := func(at time.Time) (replicas float64, img string, err error) {
		out, errOut, err := kt("show", "deploy/demo", "-n", "default", "--at", at.UTC().Format(time.RFC3339Nano), "--since", since, "-o", "json")
		if err != nil {
			return 0, "", fmt.Errorf("%v: %s", err, errOut)
		}
		var obj struct {
			Spec struct {
				Replicas float64
				Template struct {
					Spec struct{ Containers []struct{ Image string } }
				}
			}
		}
		if err := json.Unmarshal([]byte(out), &obj); err != nil || len(obj.Spec.Template.Spec.Containers) != 1 {
			return 0, "", fmt.Errorf("not a Deployment: %v: %s", err, out)
		}
		return obj.Spec.Replicas, obj.Spec.Template.Spec.Containers[0].Image, nil
	}
	r, img, err := show(image.Add(-time.Millisecond))
	Check(t, "kubetrail show --at just before the image change: 4 replicas of nginx:1.27", err == nil && r == 4 && img == "registry.k8s.io/nginx:1.27", "%v %v %v", r, img, err)
	r, img, err = show(lastScale.Add(time.Second))
	Check(t, "kubetrail show --at after the last scale: 2 replicas of nginx:1.28", err == nil && r == 2 && img == "registry.k8s.io/nginx:1.28", "%v %v %v", r, img, err)

	out, errOut, err = kt("show", "deploy/demo", "-n", "default", "--since", since, "--diff",
		image.Add(-time.Millisecond).UTC().Format(time.RFC3339Nano), lastScale.Add(time.Second).UTC().Format(time.RFC3339Nano))
	Check(t, "kubetrail show --diff from the image change to the last scale lists both writes, with their changes",
		err == nil && strings.Contains(out, `spec.template.spec.containers[name=nginx].image: "registry.k8s.io/nginx:1.27" → "registry.k8s.io/nginx:1.28"`) &&
			strings.Contains(out, "spec.replicas: 4 → 2"), "%v: %s\n%s", err, errOut, out)

	checkViewer(t, env, bin, since)
}

// checkViewer serves the run from Jaeger with `kubetrail serve` and loads it in headless
// Chromium (make unit installs it): the search page's feed of the Deployment's spec changes,
// then the first row's link, the Deployment at the last scale, with its diff and the manifest it
// left (2 replicas).
func checkViewer(t *testing.T, env *Env, bin, since string) {
	t.Helper()
	browser, err := exec.LookPath("chromium")
	if !Check(t, "chromium is installed (make unit installs it)", err == nil, "%v", err) {
		return
	}
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var serveErr bytes.Buffer
	serve := exec.CommandContext(ctx, bin, "serve", "--source", "jaeger="+env.Jaeger.QueryURL, "--cluster", ClusterName, "--listen", fmt.Sprintf("127.0.0.1:%d", port))
	serve.Stderr = &serveErr
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = serve.Wait() }()
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	for i := 0; i < 100; i++ {
		if resp, err := http.Get(base + "/static/viewer.css"); err == nil {
			resp.Body.Close()
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	profile := t.TempDir()
	dom := func(url string) string {
		cctx, ccancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer ccancel()
		out, err := exec.CommandContext(cctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
			"--disable-background-networking", "--user-data-dir="+profile, "--virtual-time-budget=10000", "--dump-dom", url).Output()
		if err != nil {
			t.Logf("chromium %s: %v", url, err)
		}
		return string(out)
	}
	search := dom(base + "/?namespace=default&object=deployments&field=spec&since=" + url.QueryEscape(since))
	_ = os.WriteFile(filepath.Join(env.OutDir, "kubetrail-serve-search.html"), []byte(search+"\n<!-- serve stderr:\n"+serveErr.String()+"-->"), 0o644)
	m := regexp.MustCompile(`href="(/object\?[^"]+)"`).FindStringSubmatch(search)
	if !Check(t, "kubetrail serve's search page, from Jaeger in Chromium, lists the Deployment's spec changes linked to their object",
		strings.Contains(search, `data-rendered="true"`) && strings.Contains(search, "spec.replicas <b>4</b>→2") && m != nil, "%s", cliHead(search)) {
		return
	}
	obj := dom(base + strings.ReplaceAll(m[1], "&amp;", "&"))
	_ = os.WriteFile(filepath.Join(env.OutDir, "kubetrail-serve-object.html"), []byte(obj), 0o644)
	Check(t, "its first row's link: the Deployment at the last scale, its diff and the manifest it left, the tree and the state bands",
		strings.Contains(obj, `<td>spec.replicas</td><td class="old">4</td><td class="new">2</td>`) && strings.Contains(obj, "\n  replicas: 2\n") &&
			strings.Contains(obj, `data-object="ReplicaSet default/demo-`) && strings.Contains(obj, "<title>2/2 available</title>"), "%s", cliHead(obj))
}

func cliHead(s string) string {
	lines := strings.SplitN(s, "\n", 6)
	return strings.Join(lines[:min(5, len(lines))], "\n")
}

// kubetrailBinary is bin/kubetrail, checked to be built; "" (and a failed check) when it is not.
func kubetrailBinary(t *testing.T, env *Env) string {
	t.Helper()
	bin := filepath.Join(env.Root, "bin", "kubetrail")
	if _, err := os.Stat(bin); !Check(t, "bin/kubetrail is built", err == nil, "%v (make build)", err) {
		return ""
	}
	return bin
}

// refusedScalePolicy is a ValidatingAdmissionPolicy that refuses more than 10 replicas of the
// Deployment demo through its scale subresource, as a platform team would cap a namespace.
const refusedScalePolicy = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: max-replicas
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: [apps]
        apiVersions: [v1]
        operations: [UPDATE]
        resources: [deployments, deployments/scale]
  matchConditions:
    - name: demo-only
      expression: object.metadata.name == 'demo'
  validations:
    - expression: object.spec.replicas <= 10
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: max-replicas
spec:
  policyName: max-replicas
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels:
        kubernetes.io/metadata.name: default
`

// checkRefusedScale scales the kept Deployment demo (2 replicas) to 40 with plain kubectl under
// a ValidatingAdmissionPolicy that refuses it, and reads the refused write back with kubectl
// trail: the line says what it tried and what refused it (span model 1.3).
func checkRefusedScale(t *testing.T, env *Env, trail func() (string, string, error)) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "max-replicas.yaml")
	if err := os.WriteFile(file, []byte(refusedScalePolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := env.RunKubectl("apply", "-f", file); err != nil {
		t.Fatalf("kubectl apply the policy: %v: %s", err, out)
	}
	defer func() { _, _ = env.RunKubectl("delete", "-f", file, "--ignore-not-found") }()
	// The apiserver enforces a new policy once its informer has it: a server-side dry run (which
	// kubetrail filters) tells when, without scaling anything.
	denied := func(out string) bool { return strings.Contains(out, "ValidatingAdmissionPolicy 'max-replicas'") }
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := env.RunKubectl("scale", "deployment", "demo", "-n", "default", "--replicas=40", "--dry-run=server")
		if err != nil && denied(out) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the policy is not enforced after 30s: %v: %s", err, out)
		}
		time.Sleep(250 * time.Millisecond)
	}
	out, err := env.RunKubectl("scale", "deployment", "demo", "-n", "default", "--replicas=40")
	if !Check(t, "kubectl scale to 40 is refused by the ValidatingAdmissionPolicy", err != nil && denied(out), "%v: %s", err, out) {
		return
	}
	want := "tried spec.replicas 2→40, denied by ValidatingAdmissionPolicy max-replicas: failed expression: object.spec.replicas <= 10"
	var tree, errOut string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(time.Second) {
		tree, errOut, err = trail()
		if (err == nil && strings.Contains(tree, want)) || time.Now().After(deadline) {
			break
		}
	}
	_ = os.WriteFile(filepath.Join(env.OutDir, "kubectl-trail-demo-refused.txt"), []byte(tree+"\n--- stderr\n"+errOut), 0o644)
	// The refused scale's line (a controller's 409 at a held base tries something too).
	line := ""
	for _, l := range strings.Split(tree, "\n") {
		if strings.Contains(l, "tried ") && strings.Contains(l, "patch scale") {
			line = strings.TrimSpace(l)
		}
	}
	Check(t, "kubectl trail shows what the refused scale tried and what refused it",
		strings.Contains(line, want) && strings.Contains(line, "patch scale") && strings.Contains(line, "422"), "%v: line %q\n%s", err, line, cliHead(tree))
}
