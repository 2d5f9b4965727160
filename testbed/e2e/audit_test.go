//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kubetrail/kubetrail/internal/model"
)

// Audit-level checks: they hold with or without the k8s_object_link processor, because they only
// look at the audit spans the k8s_audit receiver emits, as Jaeger returns them.

const (
	saPrefix     = "system:serviceaccount:kube-system:"
	deployCtrl   = saPrefix + "deployment-controller"
	replicaCtrl  = saPrefix + "replicaset-controller"
	jobCtrl      = saPrefix + "job-controller"
	schedBinding = "create pods/binding" // by system:kube-scheduler
)

// diffText is the diff span event of s as JSON text ("" without one): checks look for paths in
// it without depending on how the receiver lays the diff out in attributes.
func diffText(s *Span) string {
	e := s.Event(model.EventObjectDiff)
	if e == nil {
		return ""
	}
	b, _ := json.Marshal(e.Attributes)
	return string(b)
}

func requireAuditReceiver(t *testing.T, env *Env) {
	t.Helper()
	if !Check(t, "the collector has the k8s_audit receiver", env.Components.Has("receivers", "k8s_audit"),
		"bin/otelcol-kubetrail components lists receivers %v", env.Components["receivers"]) {
		t.FailNow()
	}
}

func TestDeploymentAuditSpans(t *testing.T) {
	env := Testbed(t)
	requireAuditReceiver(t, env)
	run := env.Run(t, "deployment")
	spans := env.Spans(t, run)
	audit := spans.OfType(model.SpanTypeAudit)
	demo := audit.Where(func(s *Span) bool {
		return s.Attr(model.AttrNamespaceName) == "default" &&
			(s.Attr(model.AttrObjectName) == "demo" || strings.HasPrefix(s.Attr(model.AttrObjectName), "demo-"))
	})

	Check(t, "audit spans for Deployment default/demo", len(demo.ForObject("Deployment", "default", "demo")) > 0,
		"no audit span about Deployment default/demo among %d spans", len(spans))

	byDeployCtrl := demo.WithAttr(model.AttrUserName, deployCtrl)
	Check(t, "deployment controller writes ReplicaSets", len(byDeployCtrl.WithAttr(model.AttrObjectKind, "ReplicaSet")) >= 2,
		"deployment-controller spans on ReplicaSets: %v", byDeployCtrl.WithAttr(model.AttrObjectKind, "ReplicaSet").Names())
	Check(t, "span names carry what was done, never who did it (span model 1.0)",
		len(byDeployCtrl.Where(func(s *Span) bool { return strings.Contains(s.Name, "controller") || !strings.Contains(s.Name, " ") })) == 0,
		"names: %v", byDeployCtrl.Names())

	byRSCtrl := demo.WithAttr(model.AttrUserName, replicaCtrl)
	podCreates := byRSCtrl.Named("create pods").WithAttr(model.AttrObjectKind, "Pod")
	Check(t, "replicaset controller creates the pods", len(podCreates) >= 4,
		"replicaset-controller create spans on Pods: %d (want >= 4: 2, then 4, then a new ReplicaSet's)", len(podCreates))
	Check(t, "replicaset controller deletes pods when scaling down", len(byRSCtrl.Named("delete pods")) >= 1,
		"replicaset-controller spans: %v", byRSCtrl.Names())

	withReplicasDiff := demo.Where(func(s *Span) bool { return strings.Contains(diffText(s), "spec.replicas") })
	Check(t, "a diff contains spec.replicas", len(withReplicasDiff) > 0,
		"no k8s.object.diff with spec.replicas among %d demo audit spans (%d with a diff)", len(demo), len(demo.WithEvent(model.EventObjectDiff)))
	Check(t, "the deployment controller's ReplicaSet scaling carries a spec.replicas diff",
		len(withReplicasDiff.WithAttr(model.AttrUserName, deployCtrl).WithAttr(model.AttrObjectKind, "ReplicaSet")) > 0,
		"spans with a spec.replicas diff: %v", withReplicasDiff.Names())

	var managed []string
	for _, s := range spans.WithEvent(model.EventObjectDiff) {
		if strings.Contains(diffText(s), "managedFields") {
			managed = append(managed, s.String())
		}
	}
	Check(t, "no managedFields in any diff", len(managed) == 0, "%d diffs mention managedFields: %v", len(managed), managed)

	bindings := demo.Named(schedBinding)
	Check(t, "scheduler bindings present", len(bindings) >= len(podCreates) && len(bindings) > 0,
		"%d %q spans for %d pod creates", len(bindings), schedBinding, len(podCreates))
	Check(t, "bindings are spans of their Pod", len(bindings.WithAttr(model.AttrObjectKind, "Pod")) == len(bindings),
		"binding spans not on a Pod: %v", bindings.Where(func(s *Span) bool { return s.Attr(model.AttrObjectKind) != "Pod" }))

	Check(t, "no duplicate span IDs", len(spans.DuplicateIDs()) == 0, "duplicated span IDs: %v", spans.DuplicateIDs())

	other := demo.Where(func(s *Span) bool { return s.Resource[model.AttrClusterName] != ClusterName })
	Check(t, "spans carry k8s.cluster.name "+ClusterName, len(other) == 0, "%d spans without it, e.g. %v", len(other), other[:min(1, len(other))])

	// Span model 1.0, read back from Jaeger: a Pod's identity is on its Resource (Jaeger's
	// process tags), under the semantic conventions' names too, and not on the span.
	pods := demo.Where(func(s *Span) bool { return s.Resource[model.AttrObjectKind] == "Pod" })
	badPods := pods.Where(func(s *Span) bool {
		_, onSpan := s.Attributes[model.AttrObjectName]
		return onSpan || s.Resource["k8s.pod.name"] != s.Resource[model.AttrObjectName] || s.Resource["k8s.pod.uid"] == nil
	})
	Check(t, "a Pod span's Resource in Jaeger carries k8s.pod.name and k8s.pod.uid, and the span no identity", len(pods) > 0 && len(badPods) == 0,
		"%d Pod spans, %d without, e.g. resource %v", len(pods), len(badPods), firstResource(badPods))
	schemas := map[string]int{}
	for _, s := range spans {
		schemas[s.Schema]++
	}
	Check(t, "Jaeger returns the span model's schema URL or none", len(schemas) > 0 && schemas[""]+schemas[model.SchemaURL] == len(spans), "schema URLs %v", schemas)
	t.Logf("schema URLs as Jaeger returns them: %v", schemas)
}

func firstResource(ss Spans) map[string]any {
	if len(ss) == 0 {
		return nil
	}
	return ss[0].Resource
}

func TestUnschedulableAuditSpans(t *testing.T) {
	env := Testbed(t)
	requireAuditReceiver(t, env)
	run := env.Run(t, "unschedulable")
	audit := env.Spans(t, run).OfType(model.SpanTypeAudit)
	pod := audit.ForObject("Pod", "default", "pending")
	Check(t, "the scheduler marks the pod unschedulable", len(pod.Named("patch pods/status").WithAttr(model.AttrUserName, "system:kube-scheduler")) >= 1,
		"spans of Pod default/pending: %v", pod.Names())
	bindings := pod.Named(schedBinding)
	Check(t, "the pod is bound once the node matches", len(bindings) == 1, "spans of Pod default/pending: %v", pod.Names())
	if len(bindings) == 1 {
		// The admin's first node patch adds the disk label; the scenario's clean-up removes it.
		// (The first patch may carry no diff: the receiver diffs against the last body it saw.)
		var labelled time.Time
		for _, s := range audit.ForObject("Node", "", "kwok-node-0").WithAttr(model.AttrUserName, "kubernetes-admin") {
			if labelled.IsZero() || s.Start.Before(labelled) {
				labelled = s.Start
			}
		}
		Check(t, "the binding follows the node label", !labelled.IsZero() && !bindings[0].Start.Before(labelled),
			"node labelled at %v, pod bound at %v", labelled, bindings[0].Start)
	}
}

func TestConflictAuditSpans(t *testing.T) {
	env := Testbed(t)
	requireAuditReceiver(t, env)
	run := env.Run(t, "conflict")
	audit := env.Spans(t, run).OfType(model.SpanTypeAudit).ForObject("Deployment", "default", "contended")
	conflicts := audit.WithAttr(model.AttrUserName, "bob").WithAttr(model.AttrHTTPStatusCode, "409")
	Check(t, "bob's two stale writes are 409 spans", len(conflicts) == 2, "bob's spans: %v", audit.WithAttr(model.AttrUserName, "bob").Names())
	for _, s := range conflicts {
		Check(t, "a 409 span has status Error", s.StatusCode == "Error", "%s has status %s %q", s, s.StatusCode, s.StatusMessage)
		Check(t, "a 409 span says Conflict in its status, not its name", strings.HasPrefix(s.StatusMessage, "Conflict") && s.Name == s.Attr(model.AttrAuditVerb)+" deployments", "%s: %q", s, s.StatusMessage)
	}
	ok := audit.WithAttr(model.AttrUserName, "alice").WithAttr(model.AttrHTTPStatusCode, "200")
	Check(t, "alice's write succeeded", len(ok) == 1, "alice's spans: %v", audit.WithAttr(model.AttrUserName, "alice").Names())
	for _, s := range ok {
		Check(t, "a successful write has no Error status", s.StatusCode != "Error", "%s", s)
	}
}

func TestRecreateAuditSpans(t *testing.T) {
	env := Testbed(t)
	requireAuditReceiver(t, env)
	run := env.Run(t, "recreate")
	audit := env.Spans(t, run).OfType(model.SpanTypeAudit)
	for _, kind := range []string{"Pod", "Service"} {
		obj := audit.ForObject(kind, "default", "phoenix")
		uids := obj.Values(model.AttrObjectUID)
		if !Check(t, kind+" phoenix is two objects with two UIDs", len(uids) == 2, "UIDs %v over %d spans: %v", uids, len(obj), obj.Names()) {
			continue
		}
		traces := map[string]string{}
		for _, s := range obj.Where(func(s *Span) bool { return s.Attr(model.AttrObjectUID) != "" }) {
			traces[s.TraceID] += s.Attr(model.AttrObjectUID) + " "
		}
		mixed := 0
		for _, u := range traces {
			if strings.Contains(u, uids[0]) && strings.Contains(u, uids[1]) {
				mixed++
			}
		}
		Check(t, kind+" phoenix's two incarnations never share a trace", mixed == 0, "traces with both UIDs: %d", mixed)
	}
}

func TestJobOwnershipAttributes(t *testing.T) {
	env := Testbed(t)
	requireAuditReceiver(t, env)
	run := env.Run(t, "job")
	audit := env.Spans(t, run).OfType(model.SpanTypeAudit)
	pods := audit.WithAttr(model.AttrUserName, jobCtrl).Named("create pods").WithAttr(model.AttrObjectKind, "Pod")
	Check(t, "the job controller creates two pods", len(pods) == 2, "job-controller creates: %v", pods)
	for _, p := range pods {
		Check(t, "a job pod names its Job owner", p.Attr(model.AttrOwnerKind) == "Job" && p.Attr(model.AttrOwnerName) == "nightly-manual",
			"%s owner %s/%s", p, p.Attr(model.AttrOwnerKind), p.Attr(model.AttrOwnerName))
	}
	job := audit.ForObject("Job", "default", "nightly-manual").Named("create jobs").WithAttr(model.AttrUserName, "kubernetes-admin")
	Check(t, "the job names its CronJob owner", len(job) == 1 && job[0].Attr(model.AttrOwnerKind) == "CronJob" && job[0].Attr(model.AttrOwnerName) == "nightly",
		"Job create spans: %v", job)
}

// secretValues reads the values the secret scenario writes from its `# secret-values:` header.
func secretValues(t *testing.T, env *Env) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(env.Root, "testbed", "scenarios", "secret.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "# secret-values: "); ok {
			return strings.Fields(rest)
		}
	}
	t.Fatal("secret.sh has no `# secret-values:` header")
	return nil
}

func TestSecretValuesNeverReachJaeger(t *testing.T) {
	env := Testbed(t)
	requireAuditReceiver(t, env)
	run := env.Run(t, "secret")
	values := secretValues(t, env)
	var needles []string
	for _, v := range values {
		enc := base64.StdEncoding.EncodeToString([]byte(v))
		needles = append(needles, v, enc, strings.TrimRight(enc, "="))
	}

	// Positive control: the secrets' writes did reach Jaeger, so "not found" means redacted.
	spans := env.Spans(t, run)
	secrets := spans.OfType(model.SpanTypeAudit).Where(func(s *Span) bool { return s.Attr(model.AttrObjectKind) == "Secret" })
	Check(t, "the secrets' writes are in Jaeger", len(secrets) >= 5, "Secret audit spans: %v", secrets.Names())

	// Everything Jaeger holds, through both APIs, since the cluster came up.
	w := Window{Start: env.setupDone.Add(-time.Minute), End: time.Now().Add(time.Minute)}
	var raw bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := env.Jaeger.Fetch(ctx, w, func(b []byte) { raw.Write(b) }); err != nil {
		t.Fatal(err)
	}
	services, err := env.Jaeger.Services(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, svc := range services {
		b, err := env.Jaeger.SearchRaw(ctx, svc, w.Start, w.End)
		if err != nil {
			t.Fatal(err)
		}
		raw.Write(b)
	}
	for _, n := range needles {
		Check(t, "no secret value in Jaeger", !bytes.Contains(raw.Bytes(), []byte(n)),
			"%q found in the %d bytes Jaeger returned", n, raw.Len())
	}
	t.Logf("searched %d bytes from Jaeger for %d secret values (plain and base64)", raw.Len(), len(values))
}

// TestAllSpansUnique looks at every span of every scenario at once: the receivers derive span IDs
// from audit IDs and event occurrences, so a duplicate means a stream was delivered twice
// without dedup (or an ID collision).
func TestAllSpansUnique(t *testing.T) {
	env := Testbed(t)
	start, end := env.RunsSpan()
	if start.IsZero() {
		t.Fatal("no scenario ran")
	}
	spans := env.SpansIn(t, Window{Start: start.Add(-time.Second), End: end.Add(2 * time.Second)})
	Check(t, "spans exported", len(spans) > 0, "Jaeger returned no span for the scenarios")
	dups := spans.DuplicateIDs()
	byID := spans.ByID()
	var ex []string
	for i, id := range dups {
		if i == 5 {
			break
		}
		ex = append(ex, fmt.Sprint(byID[id]))
	}
	Check(t, "no duplicate span IDs across scenarios", len(dups) == 0, "%d duplicated span IDs, e.g. %v", len(dups), ex)
}

// TestEveryAuditedWriteIsOneSpan compares Jaeger with the apiserver's own audit log file, which
// the apiserver writes synchronously: every write it logged while the scenarios ran must be
// exactly one audit span (nothing lost between webhook, collector and backend, nothing doubled).
func TestEveryAuditedWriteIsOneSpan(t *testing.T) {
	env := Testbed(t)
	requireAuditReceiver(t, env)
	start, end, logged := env.RunsWrites(t)
	spans := env.SpansIn(t, Window{Start: start.Add(-time.Second), End: end.Add(2 * time.Second)}).OfType(model.SpanTypeAudit)
	perID := spans.CountBy(func(s *Span) string { return s.Attr(model.AttrAuditID) })
	var missing, doubled []string
	for id, what := range logged {
		switch n := perID[id]; {
		case n == 0:
			missing = append(missing, what)
		case n > 1:
			doubled = append(doubled, fmt.Sprintf("%s ×%d", what, n))
		}
	}
	Check(t, "the audit log has the scenarios' writes", len(logged) > 100, "%d writes logged between %s and %s", len(logged), start, end)
	Check(t, "every logged write reached Jaeger", len(missing) == 0, "%d of %d missing, e.g. %v", len(missing), len(logged), missing[:min(5, len(missing))])
	Check(t, "no logged write reached Jaeger twice", len(doubled) == 0, "%d doubled, e.g. %v", len(doubled), doubled[:min(5, len(doubled))])
	t.Logf("%d audited writes logged, %d audit spans in Jaeger for the window", len(logged), len(spans))
}

// loggedWrites returns the audit IDs (with a description) of the final-stage events of the audit
// log file received in [start, end], minus what the receiver excludes by default.
func loggedWrites(t *testing.T, path string, start, end time.Time) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	excluded := map[string]bool{"coordination.k8s.io/leases": true, "/events": true, "events.k8s.io/events": true}
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		var ev struct {
			AuditID   string    `json:"auditID"`
			Stage     string    `json:"stage"`
			Verb      string    `json:"verb"`
			Received  time.Time `json:"requestReceivedTimestamp"`
			User      struct{ Username string }
			ObjectRef *struct {
				APIGroup, Resource, Subresource, Namespace, Name string
			} `json:"objectRef"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if ev.Stage != "ResponseComplete" && ev.Stage != "Panic" {
			continue
		}
		if ev.Received.Before(start) || ev.Received.After(end) || ev.ObjectRef == nil {
			continue
		}
		switch ev.Verb {
		case "get", "list", "watch":
			continue
		}
		if excluded[ev.ObjectRef.APIGroup+"/"+ev.ObjectRef.Resource] {
			continue
		}
		out[ev.AuditID] = fmt.Sprintf("%s %s %s/%s %s/%s", ev.User.Username, ev.Verb, ev.ObjectRef.Resource, ev.ObjectRef.Subresource, ev.ObjectRef.Namespace, ev.ObjectRef.Name)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
