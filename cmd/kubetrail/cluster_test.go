package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/golden"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kubetrail/kubetrail/cmd/kubetrail/internal/trail"
)

var deploymentsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}

// fakeResources is what the fake cluster's discovery serves: a few built-in kinds with the
// short names a real apiserver announces, and a custom resource whose short name only the
// cluster knows.
var fakeResources = []*metav1.APIResourceList{
	{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "pods", SingularName: "pod", Namespaced: true, Kind: "Pod", ShortNames: []string{"po"}, Verbs: []string{"get"}},
		{Name: "nodes", SingularName: "node", Namespaced: false, Kind: "Node", ShortNames: []string{"no"}, Verbs: []string{"get"}},
	}},
	{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{
		{Name: "deployments", SingularName: "deployment", Namespaced: true, Kind: "Deployment", ShortNames: []string{"deploy"}, Verbs: []string{"get", "patch"}},
		{Name: "replicasets", SingularName: "replicaset", Namespaced: true, Kind: "ReplicaSet", ShortNames: []string{"rs"}, Verbs: []string{"get"}},
	}},
	{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{
		{Name: "widgets", SingularName: "widget", Namespaced: true, Kind: "Widget", ShortNames: []string{"wd"}, Verbs: []string{"get"}},
	}},
}

type fakeCluster struct {
	dynamic   *dynfake.FakeDynamicClient
	discovery *fakediscovery.FakeDiscovery
}

// withFakeCluster makes connect answer with a cluster of the given objects whose kubeconfig
// context (named "test") has the namespace ns: the same mapper and lookups as a real one, over
// client-go's fake discovery and dynamic clients.
func withFakeCluster(t *testing.T, ns string, objs ...runtime.Object) *fakeCluster {
	t.Helper()
	listKinds := map[schema.GroupVersionResource]string{}
	for _, l := range fakeResources {
		gv, _ := schema.ParseGroupVersion(l.GroupVersion)
		for _, r := range l.APIResources {
			listKinds[gv.WithResource(r.Name)] = r.Kind + "List"
		}
	}
	fc := &fakeCluster{
		dynamic:   dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds, objs...),
		discovery: &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{Resources: fakeResources}},
	}
	prev := connect
	t.Cleanup(func() { connect = prev })
	connect = func(*kubeFlags, io.Writer) (*cluster, error) {
		return newCluster("test", ns, fc.discovery, fc.dynamic, nil), nil
	}
	return fc
}

// gets are the objects the command read from the fake cluster, as "namespace/resource/name".
func (fc *fakeCluster) gets() []string {
	var out []string
	for _, a := range fc.dynamic.Actions() {
		if g, ok := a.(clienttesting.GetAction); ok {
			out = append(out, g.GetNamespace()+"/"+g.GetResource().Resource+"/"+g.GetName())
		}
	}
	return out
}

func object(apiVersion, kind, namespace, name, uid string, owner ...*unstructured.Unstructured) *unstructured.Unstructured {
	o := &unstructured.Unstructured{}
	o.SetAPIVersion(apiVersion)
	o.SetKind(kind)
	o.SetNamespace(namespace)
	o.SetName(name)
	o.SetUID(types.UID(uid))
	for _, w := range owner {
		yes := true
		o.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: w.GetAPIVersion(), Kind: w.GetKind(), Name: w.GetName(), UID: w.GetUID(), Controller: &yes}})
	}
	return o
}

// recordedObjects are the deployment scenario's Deployment, one of its ReplicaSets and one Pod
// of that ReplicaSet, with the UIDs and owners the recording gives them.
func recordedObjects(t *testing.T) (deploy, rs, pod *unstructured.Unstructured) {
	t.Helper()
	td, err := golden.ReadTraces(filepath.Join(recorded, "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	spans := trail.SpansFromTraces(td)
	byID := map[string]*trail.Span{}
	for _, s := range spans {
		byID[s.SpanID.String()] = s
	}
	for _, s := range spans {
		if !s.IsObject() || s.Object.Kind != "Pod" {
			continue
		}
		p, ok := byID[s.ParentID.String()]
		if !ok || p.Object.Kind != "ReplicaSet" {
			continue
		}
		d := byID[p.ParentID.String()]
		if d == nil || d.Object.Kind != "Deployment" {
			continue
		}
		deploy = object("apps/v1", "Deployment", "default", d.Object.Name, d.Object.UID)
		rs = object("apps/v1", "ReplicaSet", "default", p.Object.Name, p.Object.UID, deploy)
		pod = object("v1", "Pod", "default", s.Object.Name, s.Object.UID, rs)
		return deploy, rs, pod
	}
	t.Fatal("the recording has no Pod under a ReplicaSet under a Deployment")
	return nil, nil, nil
}

// stderrLines are stderr's lines, without the empty last one.
func stderrLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// With a cluster that answers, the object's UID and its owners come from it, so the windows'
// trace IDs are computed: no tag search, with no -n (the context's namespace) and no --uid.
func TestTraceReadsTheUIDAndOwnersFromTheClusterAndComputesTheTraceIDs(t *testing.T) {
	td, err := golden.ReadTraces(filepath.Join(recorded, "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	deploy, rs, pod := recordedObjects(t)
	const plugin = "/home/u/.krew/bin/kubectl-trail"
	rng := []string{"--since", "2026-11-21T10:00:00Z", "--until", "2026-11-21T11:30:00Z", "-o", "json"}

	t.Run("a Deployment by TYPE/NAME: its UID from the cluster, one GET per window, no search", func(t *testing.T) {
		fc := withFakeCluster(t, "default", deploy, rs, pod)
		srv := newFakeJaeger(t, td)
		code, out, errOut := invoke(t, plugin, append([]string{"deploy/demo", "--cluster", "testbed", "--source", "jaeger=" + srv.URL, "-v", "1"}, rng...)...)
		if code != 0 {
			t.Fatal(errOut)
		}
		f := jaegerCalls[srv.URL]
		if f.searches != 0 || f.gets != 5 {
			t.Fatalf("searches %d, trace GETs %d: want the 4 windows' and 1 continuation's computed IDs, no search", f.searches, f.gets)
		}
		if n := decodeTree(t, out); n.UID != string(deploy.GetUID()) || len(n.Children) != 2 {
			t.Fatalf("root %s %s with %d children", n.Kind, n.UID, len(n.Children))
		}
		if g := fc.gets(); len(g) != 1 || g[0] != "default/deployments/demo" {
			t.Fatalf("read %v from the cluster, want the Deployment of the context's namespace", g)
		}
		for _, want := range []string{"uid " + string(deploy.GetUID()) + " from the cluster (context test), no controlling owner; computing the trace IDs",
			"no tag search"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("-v 1 stderr lacks %q:\n%s", want, errOut)
			}
		}
	})
	t.Run("a Pod by TYPE NAME: its owners from the cluster, its Deployment's windows computed", func(t *testing.T) {
		fc := withFakeCluster(t, "default", deploy, rs, pod)
		srv := newFakeJaeger(t, td)
		code, out, errOut := invoke(t, plugin, append([]string{"po", pod.GetName(), "--cluster", "testbed", "--source", "jaeger=" + srv.URL}, rng...)...)
		if code != 0 {
			t.Fatal(errOut)
		}
		if f := jaegerCalls[srv.URL]; f.searches != 0 {
			t.Fatalf("%d searches: the root's trace IDs must be computed from the owners the cluster told", f.searches)
		}
		if n := decodeTree(t, out); n.Kind != "Pod" || n.UID != string(pod.GetUID()) || len(n.Spans) == 0 {
			t.Fatalf("root %s %s with %d spans", n.Kind, n.UID, len(n.Spans))
		}
		want := []string{"default/pods/" + pod.GetName(), "default/replicasets/" + rs.GetName(), "default/deployments/demo"}
		if g := fc.gets(); strings.Join(g, " ") != strings.Join(want, " ") {
			t.Fatalf("read %v from the cluster, want the chain %v", g, want)
		}
		if errOut != "" {
			t.Fatalf("stderr %q: a lookup that worked says nothing without -v", errOut)
		}
	})
	t.Run("a Deployment gone from the cluster: one line on stderr, then the backend search", func(t *testing.T) {
		withFakeCluster(t, "default")
		srv := newFakeJaeger(t, td)
		code, out, errOut := invoke(t, plugin, append([]string{"deployment/demo", "--cluster", "testbed", "--source", "jaeger=" + srv.URL}, rng...)...)
		if code != 0 {
			t.Fatal(errOut)
		}
		if f := jaegerCalls[srv.URL]; f.searches != 1 || !strings.Contains(f.tags[0], `"k8s.object.name":"demo"`) {
			t.Fatalf("searches %d, tags %v: want one search by name", f.searches, f.tags)
		}
		if n := decodeTree(t, out); n.UID != string(deploy.GetUID()) {
			t.Fatalf("uid %s", n.UID)
		}
		if l := stderrLines(errOut); len(l) != 1 || l[0] != "kubectl trail: Deployment default/demo is not in the cluster (context test); searching the backend" {
			t.Fatalf("stderr %q: want one line saying the object is gone", errOut)
		}
	})
	t.Run("--uid wins: the cluster is not asked", func(t *testing.T) {
		fc := withFakeCluster(t, "default", deploy)
		srv := newFakeJaeger(t, td)
		code, _, errOut := invoke(t, plugin, append([]string{"deploy/demo", "--cluster", "testbed", "--uid", string(deploy.GetUID()), "--source", "jaeger=" + srv.URL}, rng...)...)
		if code != 0 {
			t.Fatal(errOut)
		}
		if len(fc.dynamic.Actions()) != 0 || len(fc.discovery.Actions()) != 0 {
			t.Fatalf("the cluster was asked: %v %v", fc.dynamic.Actions(), fc.discovery.Actions())
		}
	})
	t.Run("without --cluster the IDs cannot be computed: the backend is searched by the cluster's UID", func(t *testing.T) {
		withFakeCluster(t, "default", deploy)
		srv := newFakeJaeger(t, td)
		code, out, errOut := invoke(t, plugin, append([]string{"deploy/demo", "--source", "jaeger=" + srv.URL}, rng...)...)
		if code != 0 {
			t.Fatal(errOut)
		}
		f := jaegerCalls[srv.URL]
		if f.searches != 1 || f.tags[0] != fmt.Sprintf(`{"k8s.object.uid":"%s"}`, deploy.GetUID()) {
			t.Fatalf("searches %d, tags %v: want one search by the UID", f.searches, f.tags)
		}
		if n := decodeTree(t, out); n.UID != string(deploy.GetUID()) {
			t.Fatalf("uid %s", n.UID)
		}
	})
	t.Run("$KUBETRAIL_CLUSTER stands for --cluster", func(t *testing.T) {
		withFakeCluster(t, "default", deploy)
		srv := newFakeJaeger(t, td)
		t.Setenv("KUBETRAIL_CLUSTER", "testbed")
		if code, _, errOut := invoke(t, plugin, append([]string{"deploy/demo", "--source", "jaeger=" + srv.URL}, rng...)...); code != 0 {
			t.Fatal(errOut)
		}
		if f := jaegerCalls[srv.URL]; f.searches != 0 {
			t.Fatalf("%d searches: the IDs must be computed with the cluster from the environment", f.searches)
		}
	})
}

// The namespace is -n, else the context's; a cluster-scoped kind has none, whatever -n says;
// a short name only the cluster announces resolves through its discovery.
func TestNamespacesAndKindsComeFromTheClusterAsInKubectl(t *testing.T) {
	src := "file=" + recordedFile(t, "deployment")
	tests := []struct {
		name    string
		args    []string
		get     string // what the command read from the cluster
		message string // the error, the object being in no recording
	}{
		{"the context's namespace", []string{"deploy/web"}, "shop/deployments/web", "Deployment shop/web has no spans"},
		{"-n over the context's", []string{"deploy", "web", "-n", "prod"}, "prod/deployments/web", "Deployment prod/web has no spans"},
		{"a node has no namespace", []string{"no/worker-3", "-n", "prod"}, "/nodes/worker-3", "Node worker-3 has no spans"},
		{"a custom resource's short name", []string{"wd/blue"}, "shop/widgets/blue", "Widget shop/blue has no spans"},
		{"a resource with its version and group", []string{"deployments.v1.apps/web"}, "shop/deployments/web", "Deployment shop/web has no spans"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fc := withFakeCluster(t, "shop")
			code, _, errOut := invoke(t, "kubectl-trail", append(tc.args, "--source", src)...)
			if code != 1 || !strings.Contains(errOut, tc.message) {
				t.Fatalf("exit %d, stderr %q: want %q", code, errOut, tc.message)
			}
			if g := fc.gets(); len(g) != 1 || g[0] != tc.get {
				t.Fatalf("read %v from the cluster, want %s", g, tc.get)
			}
		})
	}
}

// A kubeconfig whose cluster does not answer is no error: one line says so, the backend is
// searched, and the namespace is still the context's. Without any kubeconfig nothing is said.
func TestAnUnreachableClusterFallsBackToTheBackendQuietly(t *testing.T) {
	src := "file=" + recordedFile(t, "deployment")
	withKubeconfig(t)

	code, out, errOut := invoke(t, "kubectl-trail", "deploy/demo", "--source", src)
	if code != 0 || !strings.HasPrefix(out, "Deployment default/demo in cluster testbed") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	l := stderrLines(errOut)
	if len(l) != 1 || !strings.HasPrefix(l[0], "kubectl trail: cluster unreachable (context gone: ") || !strings.HasSuffix(l[0], "); searching the backend") {
		t.Fatalf("stderr %q: want one line saying the cluster is unreachable", errOut)
	}
	// --context picks the other context, and its namespace.
	code, _, errOut = invoke(t, "kubectl-trail", "deploy/demo", "--context", "elsewhere", "--source", src)
	if code != 1 || !strings.Contains(errOut, "Deployment shop/demo has no spans") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	code, _, errOut = invoke(t, "kubectl-trail", "deploy/demo", "--context", "nosuch", "--source", src)
	if code != 1 || !strings.Contains(errOut, `kubeconfig: context "nosuch" does not exist`) {
		t.Fatalf("a context that is not in the kubeconfig: exit %d: %s", code, errOut)
	}

	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	code, _, errOut = invoke(t, "kubectl-trail", "deploy/demo", "--source", src)
	if code != 0 || errOut != "" {
		t.Fatalf("without a kubeconfig: exit %d, stderr %q: want nothing said", code, errOut)
	}
}
