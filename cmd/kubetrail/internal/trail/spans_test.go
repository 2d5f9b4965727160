package trail

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/kubetrail/kubetrail/internal/model"
)

// memSource is a backend of whole traces, by ID; it searches nothing.
type memSource map[pcommon.TraceID][]*Span

func (m memSource) Trace(_ context.Context, id pcommon.TraceID) ([]*Span, error) { return m[id], nil }
func (m memSource) Search(context.Context, string, map[string]string, time.Time, time.Time) ([]pcommon.TraceID, error) {
	return nil, nil
}
func (m memSource) String() string { return "memory" }

// spanBuilder writes spans of one batch: kubetrail's under a Resource holding the object's
// identity, a controller's under the controller's own Resource.
type spanBuilder struct{ td ptrace.Traces }

const testCluster = "testbed"

func (b *spanBuilder) objectResource(kind, group, resource, name, uid string) ptrace.SpanSlice {
	rs := b.td.ResourceSpans().AppendEmpty()
	rs.SetSchemaUrl(model.SchemaURL)
	a := rs.Resource().Attributes()
	a.PutStr(model.AttrClusterName, testCluster)
	a.PutStr(model.AttrObjectAPIGroup, group)
	a.PutStr(model.AttrObjectKind, kind)
	a.PutStr(model.AttrObjectResource, resource)
	a.PutStr(model.AttrNamespaceName, "shop")
	a.PutStr(model.AttrObjectName, name)
	a.PutStr(model.AttrObjectUID, uid)
	return rs.ScopeSpans().AppendEmpty().Spans()
}

func (b *spanBuilder) foreignResource(service, schema string) ptrace.SpanSlice {
	rs := b.td.ResourceSpans().AppendEmpty()
	rs.SetSchemaUrl(schema)
	rs.Resource().Attributes().PutStr(model.AttrServiceName, service)
	return rs.ScopeSpans().AppendEmpty().Spans()
}

func addSpan(ss ptrace.SpanSlice, tid pcommon.TraceID, sid, parent pcommon.SpanID, name, typ string, start time.Time, d time.Duration) ptrace.Span {
	s := ss.AppendEmpty()
	s.SetTraceID(tid)
	s.SetSpanID(sid)
	s.SetParentSpanID(parent)
	s.SetName(name)
	s.SetStartTimestamp(pcommon.NewTimestampFromTime(start))
	s.SetEndTimestamp(pcommon.NewTimestampFromTime(start.Add(d)))
	if typ != "" {
		s.Attributes().PutStr(model.AttrSpanType, typ)
	}
	return s
}

func audit(ss ptrace.SpanSlice, tid pcommon.TraceID, sid, parent pcommon.SpanID, verb, user string, start time.Time) {
	s := addSpan(ss, tid, sid, parent, verb+" deployments", model.SpanTypeAudit, start, 5*time.Millisecond)
	s.Attributes().PutStr(model.AttrAuditVerb, verb)
	s.Attributes().PutStr(model.AttrUserName, user)
	s.Attributes().PutInt(model.AttrHTTPStatusCode, 200)
}

// controllerSpan is a controller's span about the Deployment shop/web, its identity on the span.
func controllerSpan(ss ptrace.SpanSlice, tid pcommon.TraceID, sid, parent pcommon.SpanID, controller string, start time.Time) {
	s := addSpan(ss, tid, sid, parent, "reconcile", model.SpanTypeController, start, 40*time.Millisecond)
	a := s.Attributes()
	if controller != "" {
		a.PutStr(model.AttrControllerName, controller)
	}
	a.PutStr(model.AttrClusterName, testCluster)
	a.PutStr(model.AttrObjectAPIGroup, "apps")
	a.PutStr(model.AttrObjectAPIVersion, "apps/v1")
	a.PutStr(model.AttrObjectKind, "Deployment")
	a.PutStr(model.AttrObjectResource, "deployments")
	a.PutStr(model.AttrNamespaceName, "shop")
	a.PutStr(model.AttrObjectName, "web")
	a.PutStr(model.AttrObjectUID, "uid-web")
}

var t0 = time.Date(2026, 11, 21, 10, 40, 0, 0, time.UTC)

func webTarget() Target {
	return Target{Kind: "Deployment", Group: "apps", Resource: "deployments", Namespace: "shop", Name: "web", Cluster: testCluster, UID: "uid-web"}
}

// A controller's span (kubetrail.span.type controller) carries its object's identity itself,
// under the controller's own Resource and schema: it is read, shown under its object with the
// controller's name, and the wait before it is the traced controller's in the summary.
func TestControllerSpansSitUnderTheirObjectAndCountAsTracedController(t *testing.T) {
	b := &spanBuilder{td: ptrace.NewTraces()}
	tid := pcommon.TraceID{1}
	obj := pcommon.SpanID{0xa}
	deploy := b.objectResource("Deployment", "apps", "deployments", "web", "uid-web")
	addSpan(deploy, tid, obj, pcommon.SpanID{}, "Deployment", model.SpanTypeObject, t0, 30*time.Minute)
	audit(deploy, tid, pcommon.SpanID{1}, obj, "create", "ci", t0.Add(time.Second))
	audit(deploy, tid, pcommon.SpanID{4}, obj, "update", "system:serviceaccount:shop:childmaker", t0.Add(3*time.Second))
	ctl := b.foreignResource("childmaker", "https://opentelemetry.io/schemas/1.26.0")
	controllerSpan(ctl, tid, pcommon.SpanID{2}, obj, "childmaker-controller", t0.Add(2*time.Second))
	controllerSpan(ctl, tid, pcommon.SpanID{3}, obj, "", t0.Add(2500*time.Millisecond)) // no name: the service's

	var un Unreadable
	spans := readable(SpansFromTraces(b.td), &un)
	if un.Spans != 0 || len(spans) != 5 {
		t.Fatalf("read %d spans, left out %d (%v): a controller span's schema is its Resource's", len(spans), un.Spans, un.Err)
	}
	var c *Span
	for _, s := range spans {
		if s.IsController() && c == nil {
			c = s
		}
	}
	if c.Object.Kind != "Deployment" || c.Object.UID != "uid-web" || c.Cluster != testCluster || c.Object.Namespace != "shop" {
		t.Fatalf("the controller span's identity: %+v in cluster %q, want its span attributes'", c.Object, c.Cluster)
	}
	root, err := Merge(spans, webTarget(), "uid-web", Filter{Depth: -1})
	if err != nil {
		t.Fatal(err)
	}
	var tree bytes.Buffer
	WriteTree(&tree, root, Header{})
	for _, want := range []string{
		"  · 10:40:02.000  childmaker-controller  reconcile  40ms\n",
		"  · 10:40:02.500  childmaker  reconcile  40ms\n",
		"waiting on, by role: traced controller ",
		"waiting on, by actor: ",
	} {
		if !strings.Contains(tree.String(), want) {
			t.Errorf("the tree lacks %q:\n%s", want, tree.String())
		}
	}
	sum, _ := Summarize(root)
	var traced, byActor ActorWait
	for _, aw := range sum.ByRole {
		if aw.Actor == RoleTracedController {
			traced = aw
		}
	}
	for _, aw := range sum.WaitingOn {
		if aw.Actor == "childmaker-controller" {
			byActor = aw
		}
	}
	// After the create (ends 10:40:01.005) the next step is the controller's reconcile at :02.
	if traced.Count != 2 || traced.Total != 995*time.Millisecond+460*time.Millisecond || byActor.Total != 995*time.Millisecond {
		t.Fatalf("waits by role %+v, by actor %+v", sum.ByRole, sum.WaitingOn)
	}
}

// A window placed in a trace context (a CI step's): the derived trace holds a pointer span, the
// placed trace the window. Find follows the pointer; Merge shows one window, the placed one, as
// the root of the tree, though its parent there is the step's span; walkUp stops there too.
func TestAPointerSpanLeadsToThePlacedWindowShownOnce(t *testing.T) {
	w := model.WindowStart(t0, model.DefaultWindow)
	key := model.UIDKey(testCluster, "uid-web")
	derived, objID := pcommon.TraceID(model.ObjectTraceID(key, w)), pcommon.SpanID(model.ObjectSpanID(key, w))
	ci := pcommon.TraceID{0xc1}
	step, apply := pcommon.SpanID{0xc1}, pcommon.SpanID{0xc2}

	b := &spanBuilder{td: ptrace.NewTraces()}
	// The pointer has a span ID of its own, as k8s_object_link emits it.
	ptr := addSpan(b.objectResource("Deployment", "apps", "deployments", "web", "uid-web"), derived, model.ContinuationSpanID(objID, derived), pcommon.SpanID{}, "Deployment", model.SpanTypeObject, w, model.DefaultWindow)
	ptr.Attributes().PutStr(model.AttrTracePlacedIn, ci.String())
	pointerTrace := SpansFromTraces(b.td)

	b = &spanBuilder{td: ptrace.NewTraces()}
	// The step itself runs under another object's window (a controller that writes web with
	// its own context does that): web's window is still a root, not that object's.
	other := pcommon.SpanID{0xd}
	addSpan(b.objectResource("ConfigMap", "", "configmaps", "parent", "uid-parent"), ci, other, pcommon.SpanID{}, "ConfigMap", model.SpanTypeObject, w, model.DefaultWindow)
	cis := b.foreignResource("github-actions", "")
	addSpan(cis, ci, step, other, "deploy step", "", t0, time.Minute)
	addSpan(cis, ci, apply, step, "kubectl trail apply", "", t0.Add(time.Second), 10*time.Second)
	deploy := b.objectResource("Deployment", "apps", "deployments", "web", "uid-web")
	addSpan(deploy, ci, objID, apply, "Deployment", model.SpanTypeObject, w, model.DefaultWindow)
	audit(deploy, ci, pcommon.SpanID{1}, objID, "patch", "ci", t0.Add(2*time.Second))
	rsID := pcommon.SpanID{0xb}
	rs := b.objectResource("ReplicaSet", "apps", "replicasets", "web-1", "uid-rs")
	addSpan(rs, ci, rsID, objID, "ReplicaSet", model.SpanTypeObject, w, model.DefaultWindow)
	audit(rs, ci, pcommon.SpanID{2}, rsID, "create", "system:serviceaccount:kube-system:deployment-controller", t0.Add(3*time.Second))
	placedTrace := SpansFromTraces(b.td)

	src := memSource{derived: pointerTrace, ci: placedTrace}
	found, err := Find(t.Context(), src, Query{Target: webTarget(), Since: t0.Add(-time.Minute), Until: t0.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	vias := map[string]string{}
	for _, ft := range found.Traces {
		vias[ft.TraceID] = ft.Via
	}
	if vias[derived.String()] != "derived" || vias[ci.String()] != viaPlacedIn || found.Searched {
		t.Fatalf("traces fetched %v (searched %v): want the derived one and the one it points to", vias, found.Searched)
	}
	root, err := Merge(found.Spans, webTarget(), found.UID, Filter{Depth: -1})
	if err != nil {
		t.Fatal(err)
	}
	if len(root.Windows) != 1 || root.Windows[0].TraceID != ci {
		t.Fatalf("%d windows (first in trace %s): want the placed one alone", len(root.Windows), root.Windows[0].TraceID)
	}
	if len(root.Spans) != 1 || len(root.Children) != 1 || root.Children[0].Object.Name != "web-1" || len(root.Children[0].Spans) != 1 {
		t.Fatalf("tree: %d spans, %d children: want the patch, and the ReplicaSet with its create", len(root.Spans), len(root.Children))
	}

	byID := map[pcommon.SpanID]*Span{}
	for _, s := range placedTrace {
		byID[s.SpanID] = s
	}
	if top := walkUp(byID, byID[rsID]); top.SpanID != objID {
		t.Fatalf("walkUp from the ReplicaSet ended at %q, want the Deployment's window (its parent is the step's span)", top.Name)
	}
	for _, ft := range found.Traces {
		if ft.TraceID == pcommon.TraceID(model.ObjectTraceID(model.UIDKey(testCluster, "uid-parent"), w)).String() {
			t.Fatal("the parent object's windows were fetched as web's root owner's")
		}
	}

	// Without the placed trace in the backend, the pointer is the window read.
	delete(src, ci)
	found, err = Find(t.Context(), src, Query{Target: webTarget(), Since: t0.Add(-time.Minute), Until: t0.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Merge(found.Spans, webTarget(), found.UID, Filter{Depth: -1}); err != ErrNoSpans {
		t.Fatalf("the pointer alone: %v, want the window and no activity (ErrNoSpans)", err)
	}
}

// The kubelet's spans placed in an object's trace (k8s_object_link, doors.identity): syncPod is
// one activity of the object, its CRI calls are its parts (the tree names the longest), the
// summary counts the sync as the node agent's, and -o json keeps every span once.
func TestKubeletSyncIsAnActivityWithItsCRICallsAsParts(t *testing.T) {
	tid, obj := pcommon.TraceID{2}, pcommon.SpanID{0xb}
	b := webWindow(tid, obj)
	kubelet := b.foreignResource("kubelet", "https://opentelemetry.io/schemas/1.26.0")
	b.td.ResourceSpans().At(1).Resource().Attributes().PutStr("host.name", "node-1")
	sync := pcommon.SpanID{9}
	addSpan(kubelet, tid, sync, obj, "syncPod", "", t0.Add(2*time.Second), 2400*time.Millisecond)
	addSpan(kubelet, tid, pcommon.SpanID{0x21}, sync, "runtime.v1.RuntimeService/RunPodSandbox", "", t0.Add(2040*time.Millisecond), 270*time.Millisecond)
	addSpan(kubelet, tid, pcommon.SpanID{0x22}, sync, "runtime.v1.ImageService/PullImage", "", t0.Add(2335*time.Millisecond), 1765*time.Millisecond)
	addSpan(kubelet, tid, pcommon.SpanID{0x23}, pcommon.SpanID{0x22}, "blob fetch", "", t0.Add(2400*time.Millisecond), time.Second)

	var un Unreadable
	spans := readable(SpansFromTraces(b.td), &un)
	root, err := Merge(spans, webTarget(), "uid-web", Filter{Depth: -1})
	if err != nil {
		t.Fatal(err)
	}
	if len(root.Spans) != 3 {
		t.Fatalf("activities %d, want the two writes and the sync", len(root.Spans))
	}
	var tree bytes.Buffer
	WriteTree(&tree, root, Header{})
	for _, want := range []string{
		"10:40:02.000  kubelet/node-1  syncPod  2.4s  longest: PullImage 1.77s\n",
		"node agent ",
	} {
		if !strings.Contains(tree.String(), want) {
			t.Errorf("the tree lacks %q:\n%s", want, tree.String())
		}
	}
	if strings.Contains(tree.String(), "RunPodSandbox") {
		t.Errorf("a part is not a line of its own:\n%s", tree.String())
	}
	j := ToJSON(root)
	var sync0 *JSONSpan
	for i := range j.Spans {
		if j.Spans[i].Name == "syncPod" {
			sync0 = &j.Spans[i]
		}
	}
	if sync0 == nil || len(sync0.Parts) != 3 || sync0.Actor != "kubelet/node-1" || sync0.Parts[0].Name != "runtime.v1.RuntimeService/RunPodSandbox" {
		t.Fatalf("json sync: %+v", sync0)
	}
	// Merged again (the viewer rebuilds trees from the same spans): parts are not doubled.
	root, _ = Merge(spans, webTarget(), "uid-web", Filter{Depth: -1})
	for _, s := range root.Spans {
		if s.Name == "syncPod" && len(s.Parts) != 3 {
			t.Fatalf("parts after a second merge: %d", len(s.Parts))
		}
	}
}

// A linked span (k8s_object_link, span model 1.3) stands under an object's span for a span of
// another component that links to the object's trace context: it is read without a schema URL
// (Jaeger keeps none), shown as the object's activity with the component as actor, and the
// scheduler's counts as the scheduler's.
func TestLinkedSpansAreTheObjectsActivity(t *testing.T) {
	tid, obj := pcommon.TraceID{3}, pcommon.SpanID{0xc}
	b := webWindow(tid, obj)
	sched := b.foreignResource("kube-scheduler", "")
	l := addSpan(sched, tid, pcommon.SpanID{7}, obj, "SchedulePod", model.SpanTypeLinked, t0.Add(2*time.Second), 3*time.Millisecond)
	link := l.Links().AppendEmpty()
	link.SetTraceID(pcommon.TraceID{9})
	link.SetSpanID(pcommon.SpanID{9})
	link.Attributes().PutStr(model.AttrLinkType, model.LinkTypeLinkedSpan)

	var un Unreadable
	spans := readable(SpansFromTraces(b.td), &un)
	if un.Spans != 0 || len(spans) != 4 {
		t.Fatalf("read %d spans, left out %d (%v)", len(spans), un.Spans, un.Err)
	}
	root, err := Merge(spans, webTarget(), "uid-web", Filter{Depth: -1})
	if err != nil {
		t.Fatal(err)
	}
	var tree bytes.Buffer
	WriteTree(&tree, root, Header{})
	for _, want := range []string{
		"10:40:02.000  kube-scheduler  SchedulePod  3ms  (links to the object's trace context)\n",
		"scheduler ",
	} {
		if !strings.Contains(tree.String(), want) {
			t.Errorf("the tree lacks %q:\n%s", want, tree.String())
		}
	}
}

// webWindow is a window of the Deployment shop/web, object span obj in trace tid: its create by
// ci at 1 s and the deployment controller's update at 5 s.
func webWindow(tid pcommon.TraceID, obj pcommon.SpanID) *spanBuilder {
	b := &spanBuilder{td: ptrace.NewTraces()}
	deploy := b.objectResource("Deployment", "apps", "deployments", "web", "uid-web")
	addSpan(deploy, tid, obj, pcommon.SpanID{}, "Deployment", model.SpanTypeObject, t0, 30*time.Minute)
	audit(deploy, tid, pcommon.SpanID{1}, obj, "create", "ci", t0.Add(time.Second))
	audit(deploy, tid, pcommon.SpanID{5}, obj, "update", "system:serviceaccount:kube-system:deployment-controller", t0.Add(5*time.Second))
	return b
}
