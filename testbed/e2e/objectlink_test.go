//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/kubetrail/kubetrail/internal/model"
)

// Object-tree checks: they need the k8s_object_link processor. Each works on the objects the
// run itself created (by UID), so reruns of a scenario in the same window by other tests do not
// disturb them.

func requireObjectLink(t *testing.T, env *Env) {
	t.Helper()
	requireAuditReceiver(t, env)
	if !Check(t, "the collector has the k8s_object_link processor", env.Components.Has("processors", "k8s_object_link"),
		"processors %v", env.Components["processors"]) {
		t.FailNow()
	}
}

func ofClusterName(ss Spans, cluster string) Spans {
	return ss.Where(func(s *Span) bool { return s.Resource[model.AttrClusterName] == cluster })
}

// createdUIDs are the UIDs of kind namespace/name created (audit create, 2xx) within w.
func createdUIDs(ss Spans, w Window, kind, namespace, name string) []string {
	return ss.OfType(model.SpanTypeAudit).ForObject(kind, namespace, name).
		WithAttr(model.AttrAuditVerb, "create").WithAttr(model.AttrHTTPStatusCode, "201").
		Between(w.Start, w.End).Values(model.AttrObjectUID)
}

// objectTree indexes the object spans of one cluster: per UID, per window start.
type objectTree struct {
	byUID   map[string]map[time.Time]*Span
	dupes   []string
	spans   Spans
	objects Spans
}

func newObjectTree(ss Spans) *objectTree {
	// A window placed in a trace context's trace leaves a pointer span in its derived trace: not an
	// object span of the tree.
	objects := ss.OfType(model.SpanTypeObject).Where(func(s *Span) bool { return s.Attr(model.AttrTracePlacedIn) == "" })
	ot := &objectTree{byUID: map[string]map[time.Time]*Span{}, spans: ss, objects: objects}
	for _, o := range ot.objects {
		// Objects only ever seen without a UID (a token request on a ServiceAccount, say) are
		// keyed by name, as the processor keys them.
		uid := o.Attr(model.AttrObjectUID)
		if uid == "" {
			uid = "name:" + o.Resource[model.AttrClusterName].(string) + "/" + o.Object()
		}
		if ot.byUID[uid] == nil {
			ot.byUID[uid] = map[time.Time]*Span{}
		}
		if prev, dup := ot.byUID[uid][o.Start]; dup {
			ot.dupes = append(ot.dupes, fmt.Sprintf("%s@%s (%s, %s)", o.Object(), o.Start.Format(time.TimeOnly), prev.SpanID, o.SpanID))
		}
		ot.byUID[uid][o.Start] = o
	}
	return ot
}

// childrenOf are the object spans with the given owner UID.
func (ot *objectTree) childrenOf(ownerUID string) Spans {
	return ot.objects.WithAttr(model.AttrOwnerUID, ownerUID)
}

// checkUnder checks that every object span of the child UIDs sits under its owner's object span of
// the same window, in the same trace.
func (ot *objectTree) checkUnder(t *testing.T, what string, children Spans) {
	t.Helper()
	var bad []string
	for _, c := range children {
		owner := ot.byUID[c.Attr(model.AttrOwnerUID)][c.Start]
		if owner == nil || c.ParentSpanID != owner.SpanID || c.TraceID != owner.TraceID {
			bad = append(bad, c.Name)
		}
	}
	Check(t, what, len(children) > 0 && len(bad) == 0, "%d of %d not under their owner's span of the same window: %v", len(bad), len(children), bad)
}

// checkActivity checks that every audit and Event span about the given UIDs is a child of its
// object's span of its window.
func (ot *objectTree) checkActivity(t *testing.T, what string, uids map[string]bool) {
	t.Helper()
	n := 0
	var bad []string
	for _, s := range ot.spans {
		if s.Type() == model.SpanTypeObject || !uids[s.Attr(model.AttrObjectUID)] {
			continue
		}
		n++
		var obj *Span
		for w, o := range ot.byUID[s.Attr(model.AttrObjectUID)] {
			if !s.Start.Before(w) && s.Start.Before(o.End) {
				obj = o
			}
		}
		if obj == nil || s.ParentSpanID != obj.SpanID || s.TraceID != obj.TraceID {
			bad = append(bad, s.Name+" on "+s.Object())
		}
	}
	Check(t, what, n > 0 && len(bad) == 0, "%d of %d activity spans not under their object's span: %v", len(bad), n, bad[:min(len(bad), 10)])
}

// checkDeploymentTree checks the tree docs/design.md describes for one Deployment demo (by UID):
// per window one root, its object children exactly ReplicaSets (two over the run), each Pod
// under its ReplicaSet, every activity span under its object, and one trace per window.
func checkDeploymentTree(t *testing.T, prefix string, ss Spans, deployUID string) {
	t.Helper()
	ot := newObjectTree(ss)
	Check(t, prefix+"exactly one object span per object per window", len(ot.dupes) == 0, "duplicated: %v", ot.dupes)
	roots := ot.byUID[deployUID]
	if !Check(t, prefix+"an object span for Deployment default/demo", len(roots) > 0, "none for UID %s among %d object spans", deployUID, len(ot.objects)) {
		return
	}
	var notRoot, notRS []string
	// The scenario creates it with a trace context: a window nested in that trace sits under the
	// context's span (trace_context.nest). The context is the one its create's audit span links to.
	contexts := map[string]bool{}
	for _, a := range ss.OfType(model.SpanTypeAudit).WithAttr(model.AttrObjectUID, deployUID).WithAttr(model.AttrAuditVerb, "create") {
		for _, l := range a.Links {
			if fmt.Sprint(l.Attributes[model.AttrLinkType]) == model.LinkTypeTraceContext {
				contexts[l.TraceID+"/"+l.SpanID] = true
			}
		}
	}
	for _, d := range roots {
		placed := contexts[d.TraceID+"/"+d.ParentSpanID]
		if d.ParentSpanID != "" && !placed {
			notRoot = append(notRoot, d.Start.Format(time.TimeOnly))
		}
	}
	Check(t, prefix+"Deployment default/demo is the root of its window's trace, or under the trace context it was created with", len(notRoot) == 0, "has another parent in windows %v", notRoot)
	rsSpans := ot.childrenOf(deployUID)
	rsUIDs := map[string]bool{}
	for _, rs := range rsSpans {
		rsUIDs[rs.Attr(model.AttrObjectUID)] = true
		if rs.Attr(model.AttrObjectKind) != "ReplicaSet" || !strings.HasPrefix(rs.Object(), "ReplicaSet default/demo-") {
			notRS = append(notRS, rs.Name)
		}
	}
	Check(t, prefix+"the Deployment's children are exactly its two ReplicaSets", len(rsUIDs) == 2 && len(notRS) == 0,
		"%d ReplicaSet UIDs, other children %v; children %v", len(rsUIDs), notRS, rsSpans.Names())
	ot.checkUnder(t, prefix+"each ReplicaSet under the Deployment", rsSpans)
	var pods Spans
	for uid := range rsUIDs {
		pods = append(pods, ot.childrenOf(uid)...)
	}
	podUIDs := map[string]bool{}
	for _, p := range pods {
		podUIDs[p.Attr(model.AttrObjectUID)] = true
	}
	Check(t, prefix+"the rollout's Pods are in the tree", len(podUIDs) >= 5, "%d Pods (create 2, scale to 4, new image: at least 5 over the run)", len(podUIDs))
	ot.checkUnder(t, prefix+"each Pod under its ReplicaSet", pods)
	all := map[string]bool{deployUID: true}
	for uid := range rsUIDs {
		all[uid] = true
	}
	for uid := range podUIDs {
		all[uid] = true
	}
	ot.checkActivity(t, prefix+"every audit and Event span under its object's span", all)
	traces := map[time.Time]map[string]bool{}
	for uid := range all {
		for w, o := range ot.byUID[uid] {
			if traces[w] == nil {
				traces[w] = map[string]bool{}
			}
			traces[w][o.TraceID] = true
		}
	}
	var split []string
	for w, ids := range traces {
		if len(ids) != 1 {
			split = append(split, fmt.Sprintf("%s: %d traces", w.Format(time.TimeOnly), len(ids)))
		}
	}
	Check(t, prefix+"one trace per window for the whole tree", len(split) == 0, "%v", split)
}

func TestObjectLinkDeploymentTree(t *testing.T) {
	env := Testbed(t)
	requireObjectLink(t, env)
	run := env.Run(t, "deployment")
	spans := ofClusterName(env.Spans(t, run), ClusterName)
	uids := createdUIDs(spans, run.Window(), "Deployment", "default", "demo")
	if !Check(t, "the run created one Deployment default/demo", len(uids) == 1, "created UIDs %v", uids) {
		return
	}
	checkDeploymentTree(t, "", spans, uids[0])
}

func TestObjectLinkRecreateIsTwoObjects(t *testing.T) {
	env := Testbed(t)
	requireObjectLink(t, env)
	run := env.Run(t, "recreate")
	spans := ofClusterName(env.Spans(t, run), ClusterName)
	ot := newObjectTree(spans)
	Check(t, "recreate: exactly one object span per object per window", len(ot.dupes) == 0, "duplicated: %v", ot.dupes)
	for _, kind := range []string{"Pod", "Service"} {
		uids := createdUIDs(spans, run.Window(), kind, "default", "phoenix")
		var withSpan int
		uidSet := map[string]bool{}
		for _, uid := range uids {
			uidSet[uid] = true
			if len(ot.byUID[uid]) > 0 {
				withSpan++
			}
		}
		Check(t, "recreate: "+kind+" phoenix is two objects with two object spans", len(uids) == 2 && withSpan == 2,
			"created UIDs %v, %d with an object span", uids, withSpan)
		ot.checkActivity(t, "recreate: each "+kind+" incarnation's spans under its own object span", uidSet)
	}
}

func TestObjectLinkJobTree(t *testing.T) {
	env := Testbed(t)
	requireObjectLink(t, env)
	run := env.Run(t, "job")
	spans := ofClusterName(env.Spans(t, run), ClusterName)
	ot := newObjectTree(spans)
	Check(t, "job: exactly one object span per object per window", len(ot.dupes) == 0, "duplicated: %v", ot.dupes)
	cj := createdUIDs(spans, run.Window(), "CronJob", "default", "nightly")
	if !Check(t, "job: the run created CronJob nightly", len(cj) == 1, "%v", cj) {
		return
	}
	for _, c := range ot.byUID[cj[0]] {
		Check(t, "job: CronJob nightly is a root", c.ParentSpanID == "", "parent %s", c.ParentSpanID)
	}
	jobs := ot.childrenOf(cj[0])
	Check(t, "job: the CronJob's child is Job nightly-manual", len(jobs) > 0 && len(jobs.Values(model.AttrObjectUID)) == 1 &&
		jobs[0].Name == "Job" && jobs[0].Object() == "Job default/nightly-manual", "children %v", jobs.Names())
	ot.checkUnder(t, "job: the Job under the CronJob", jobs)
	var pods Spans
	uids := map[string]bool{cj[0]: true}
	for _, uid := range jobs.Values(model.AttrObjectUID) {
		uids[uid] = true
		pods = append(pods, ot.childrenOf(uid)...)
	}
	for _, uid := range pods.Values(model.AttrObjectUID) {
		uids[uid] = true
	}
	Check(t, "job: the Job's two Pods are its children", len(pods.Values(model.AttrObjectUID)) == 2, "pods %v", pods.Names())
	ot.checkUnder(t, "job: each Pod under the Job", pods)
	ot.checkActivity(t, "job: every audit and Event span under its object's span", uids)
}

// splitProxy takes the apiserver's audit webhook POSTs and splits every EventList between the
// targets event by event (event i to target i mod n), under a cluster path of the test's own so
// the test's spans never mix with the main collector's (whose Event watch keeps running). A body
// is acknowledged only when every target took its part. Splitting events, not whole POSTs, makes
// the replicas race on every step of the rollout, however few POSTs the apiserver makes.
func splitProxy(t *testing.T, cluster string, targets ...string) (string, func() []int, func(auditID string) bool) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	events := make([]int, len(targets))
	forwarded := map[string]bool{}
	client := &http.Client{Timeout: 30 * time.Second}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var list map[string]any
		if err := json.NewDecoder(r.Body).Decode(&list); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		items, _ := list["items"].([]any)
		parts := make([][]any, len(targets))
		for i, item := range items {
			parts[i%len(targets)] = append(parts[i%len(targets)], item)
		}
		for i, target := range targets {
			if len(parts[i]) == 0 {
				continue
			}
			part := map[string]any{}
			for k, v := range list {
				part[k] = v
			}
			part["items"] = parts[i]
			body, _ := json.Marshal(part)
			resp, err := client.Post(target+"/audit/"+cluster, "application/json", bytes.NewReader(body))
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			_ = resp.Body.Close()
			if resp.StatusCode/100 != 2 {
				http.Error(w, resp.Status, http.StatusBadGateway)
				return
			}
			mu.Lock()
			events[i] += len(parts[i])
			for _, item := range parts[i] {
				if ev, ok := item.(map[string]any); ok {
					if id, ok := ev["auditID"].(string); ok {
						forwarded[id] = true
					}
				}
			}
			mu.Unlock()
		}
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return "http://" + ln.Addr().String(), func() []int {
			mu.Lock()
			defer mu.Unlock()
			return append([]int(nil), events...)
		}, func(auditID string) bool {
			mu.Lock()
			defer mu.Unlock()
			return forwarded[auditID]
		}
}

// TestObjectLinkTwoReplicasShareRedis splits the audit stream between two collectors that share
// the Redis ID map, event by event: the tree must come out as if one collector had seen
// everything — identical trace IDs across replicas and exactly one object span per object per
// window.
func TestObjectLinkTwoReplicasShareRedis(t *testing.T) {
	env := Testbed(t)
	requireObjectLink(t, env)
	cluster := fmt.Sprintf("e2e-objectlink-%d", time.Now().Unix())
	replica := func(name string) *Collector {
		cfg := env.CollectorConfig()
		cfg.Delete("receivers.k8s_event_spans")
		cfg.SetPipeline("receivers", "k8s_audit")
		cfg.Set("processors.k8s_object_link.id_map.backend", "redis")
		cfg.Set("processors.k8s_object_link.id_map.redis.addresses", []any{"127.0.0.1:6379"})
		cfg.Set("processors.k8s_object_link.id_map.redis.key_prefix", cluster+":")
		// Each replica also writes what it exports to a file: Jaeger merges byte-identical spans,
		// and with derived IDs an object span emitted by both replicas IS byte-identical, so
		// "emitted exactly once" can only be seen at the replicas' own outputs.
		cfg.Set("exporters.file.path", filepath.Join(env.OutDir, "objectlink-"+name+".jsonl"))
		cfg.SetPipeline("exporters", append(cfg.Pipeline("exporters"), "file")...)
		return env.StartExtraCollector(t, name, cfg)
	}
	t.Cleanup(func() { deleteRedisPrefix(t, "127.0.0.1:6379", cluster+":") })
	a, b := replica("objectlink-a"), replica("objectlink-b")
	proxy, delivered, forwarded := splitProxy(t, cluster, a.AuditURL, b.AuditURL)
	env.Router.SetRoute(ToAll(proxy))
	t.Cleanup(env.RestoreRoute)

	run, err := env.RunScenario("deployment")
	if err != nil {
		t.Fatalf("scenario: %v", err)
	}
	// The apiserver posts its last batch up to --audit-webhook-batch-max-wait after the scenario
	// ends: keep the route until every write it logged during the run went through the proxy, or
	// the rest of the run would go to the main collector, under another cluster name.
	logged := loggedWrites(t, env.AuditLog(), run.Start, run.End)
	deadline := time.Now().Add(30 * time.Second)
	var missing []string
	for id, what := range logged {
		for !forwarded(id) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if !forwarded(id) {
			missing = append(missing, what)
		}
	}
	env.RestoreRoute()
	Check(t, "replicas: every write of the run went through the split", len(missing) == 0,
		"%d of %d logged writes not forwarded within 30 s, e.g. %v", len(missing), len(logged), missing[:min(len(missing), 5)])
	n := delivered()
	Check(t, "replicas: both collectors received half of the audit events", n[0] > 10 && n[1] > 10,
		"audit events delivered: a=%d b=%d", n[0], n[1])
	spans := ofClusterName(env.Spans(t, run), cluster)
	uids := createdUIDs(spans, run.Window(), "Deployment", "default", "demo")
	if !Check(t, "replicas: the run created one Deployment default/demo", len(uids) == 1, "created UIDs %v among %d spans", uids, len(spans)) {
		return
	}
	checkDeploymentTree(t, "replicas: ", spans, uids[0])

	// Stopped (and so flushed), the replicas' own outputs together must hold each object span of
	// the run's tree exactly once.
	for _, c := range []*Collector{a, b} {
		if err := c.Stop(); err != nil {
			t.Errorf("stop %s: %v", c.Name, err)
		}
	}
	tree := map[string]bool{uids[0]: true}
	for _, o := range spans.OfType(model.SpanTypeObject) {
		if tree[o.Attr(model.AttrOwnerUID)] || tree[o.Attr(model.AttrObjectUID)] {
			tree[o.Attr(model.AttrObjectUID)] = true
		}
	}
	for _, o := range spans.OfType(model.SpanTypeObject) { // Pods: owners are ReplicaSets, now in tree
		if tree[o.Attr(model.AttrOwnerUID)] {
			tree[o.Attr(model.AttrObjectUID)] = true
		}
	}
	emitted := map[string]int{}
	perReplica := map[string]int{}
	for _, c := range []*Collector{a, b} {
		for _, s := range readFileExport(t, filepath.Join(env.OutDir, "objectlink-"+c.Name+".jsonl")) {
			// A pointer span (a window placed in the scenario's trace context) is not the window's
			// object span.
			if s.Type() == model.SpanTypeObject && tree[s.Attr(model.AttrObjectUID)] && s.Attr(model.AttrTracePlacedIn) == "" {
				emitted[s.Object()+"@"+s.Start.Format(time.TimeOnly)]++
				perReplica[c.Name]++
			}
		}
	}
	var twice []string
	for k, n := range emitted {
		if n != 1 {
			twice = append(twice, fmt.Sprintf("%s ×%d", k, n))
		}
	}
	sort.Strings(twice)
	Check(t, "replicas: each object span of the tree emitted by exactly one replica", len(emitted) >= 8 && len(twice) == 0,
		"%d object spans, emitted more than once: %v (per replica %v)", len(emitted), twice, perReplica)
}

// deleteRedisPrefix removes the test's ID map records from the shared Redis (they would expire
// on their own, relations only after a day).
func deleteRedisPrefix(t *testing.T, addr, prefix string) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx := context.Background()
	var keys []string
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if len(keys) > 0 {
		if err := c.Del(ctx, keys...).Err(); err != nil {
			t.Logf("clean up Redis prefix %s: %v", prefix, err)
		}
	}
}

// readFileExport reads a file exporter's output (one OTLP JSON request per line).
func readFileExport(t *testing.T, path string) Spans {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("read %s: %v", path, err)
		return nil
	}
	var out Spans
	var u ptrace.JSONUnmarshaler
	for _, line := range bytes.Split(data, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		td, err := u.UnmarshalTraces(line)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			return out
		}
		out = append(out, SpansFromTraces(td)...)
	}
	return out
}
