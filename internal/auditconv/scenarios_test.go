package auditconv

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/kubetrail/kubetrail/internal/auditconv/internal/jsonscan"
	"github.com/kubetrail/kubetrail/internal/model"
)

// Assertions over the recorded fixtures that hold whatever the golden files say: each one
// states a promise of the receiver about real apiserver traffic.

func TestDeploymentFixtureShowsTheScaleAsADiff(t *testing.T) {
	td, _ := replayScenario(t, "deployment", nil)
	var scales []string
	for _, s := range allSpans(td) {
		if s.Name() == "patch deployments/scale" && attrStr(s.Attributes(), model.AttrUserName) == "kubernetes-admin" {
			scales = append(scales, diffOf(t, s)["spec.replicas"])
		}
	}
	if !slices.Equal(scales, []string{"2 -> 4", "4 -> 2"}) {
		t.Fatalf("spec.replicas diffs of the scale patches = %v, want [2 -> 4, 4 -> 2]", scales)
	}
	var imageChanged bool
	for _, s := range allSpans(td) {
		if s.Name() == "patch deployments" && attrStr(s.Attributes(), model.AttrUserName) == "kubernetes-admin" {
			for path, change := range diffOf(t, s) {
				if strings.HasSuffix(path, ".image") && strings.Contains(change, " -> ") {
					imageChanged = true
				}
			}
		}
	}
	if !imageChanged {
		t.Fatal("the image change patch must carry the image diff")
	}
}

func TestFixturesExportNoManagedFields(t *testing.T) {
	for _, scenario := range scenarios(t) {
		td, _ := replayScenario(t, scenario, nil)
		data, err := (&ptrace.JSONMarshaler{}).MarshalTraces(td)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(data, []byte("managedFields")) {
			t.Errorf("%s: managedFields reached the exported spans", scenario)
		}
		for _, noise := range []string{`"metadata.resourceVersion"`, `"metadata.generation"`} {
			if bytes.Contains(data, []byte(noise)) {
				t.Errorf("%s: the diff noise path %s was exported", scenario, noise)
			}
		}
	}
}

func TestBindingsCarryThePodsIdentity(t *testing.T) {
	for _, scenario := range []string{"deployment", "job", "recreate"} {
		td, _ := replayScenario(t, scenario, nil)
		createTrace := map[string]string{} // pod UID -> trace of its create span
		var bindings []ptrace.Span
		for _, s := range allSpans(td) {
			a := s.Attributes()
			if attrStr(a, model.AttrObjectResource) != "pods" {
				continue
			}
			switch {
			case attrStr(a, model.AttrAuditVerb) == "create" && attrStr(a, model.AttrAuditSubresource) == "<absent>":
				createTrace[attrStr(a, model.AttrObjectUID)] = s.TraceID().String()
			case attrStr(a, model.AttrAuditSubresource) == "binding":
				bindings = append(bindings, s)
			}
		}
		if len(bindings) == 0 {
			t.Fatalf("%s: no binding spans", scenario)
		}
		for _, b := range bindings {
			a := b.Attributes()
			uid := attrStr(a, model.AttrObjectUID)
			if b.Name() != "create pods/binding" || attrStr(a, model.AttrUserName) != "system:kube-scheduler" || attrStr(a, model.AttrObjectKind) != "Pod" || uid == "<absent>" || attrStr(a, model.AttrObjectName) == "<absent>" {
				t.Fatalf("%s: binding span %q = %v", scenario, b.Name(), a.AsRaw())
			}
			if tr, ok := createTrace[uid]; !ok || tr != b.TraceID().String() {
				t.Fatalf("%s: the binding of pod %s is not in the trace of the pod's create", scenario, uid)
			}
		}
	}
}

func TestConflictFixtureLinksEveryLostRace(t *testing.T) {
	td, _ := replayScenario(t, "conflict", nil)
	byID := map[string]ptrace.Span{}
	for _, s := range allSpans(td) {
		byID[s.SpanID().String()] = s
	}
	conflicts := 0
	for _, s := range allSpans(td) {
		if attrStr(s.Attributes(), model.AttrHTTPStatusCode) != "409" {
			continue
		}
		conflicts++
		if s.Links().Len() != 1 {
			t.Fatalf("%q has %d links, want 1", s.Name(), s.Links().Len())
		}
		w, ok := byID[s.Links().At(0).SpanID().String()]
		if !ok {
			t.Fatalf("%q links to a span that was not emitted", s.Name())
		}
		if attrStr(w.Attributes(), model.AttrObjectUID) != attrStr(s.Attributes(), model.AttrObjectUID) || w.Status().Code() == ptrace.StatusCodeError ||
			w.StartTimestamp() > s.EndTimestamp() {
			t.Fatalf("%q links to %q, which is not an earlier successful write of the same object", s.Name(), w.Name())
		}
		if strings.HasPrefix(s.Name(), "bob ") && !strings.HasPrefix(w.Name(), "alice update") {
			t.Fatalf("bob lost to alice, but %q links to %q", s.Name(), w.Name())
		}
	}
	if conflicts < 2 {
		t.Fatalf("the conflict fixture has %d conflicts, want bob's two at least", conflicts)
	}
}

func TestRecreatedObjectsAreTwoObjects(t *testing.T) {
	td, _ := replayScenario(t, "recreate", nil)
	traces := map[string]map[string]bool{} // kind -> trace IDs of "phoenix" creates
	for _, s := range allSpans(td) {
		a := s.Attributes()
		if attrStr(a, model.AttrObjectName) == "phoenix" && attrStr(a, model.AttrAuditVerb) == "create" && attrStr(a, model.AttrAuditSubresource) == "<absent>" {
			kind := attrStr(a, model.AttrObjectKind)
			if traces[kind] == nil {
				traces[kind] = map[string]bool{}
			}
			traces[kind][s.TraceID().String()] = true
		}
	}
	for _, kind := range []string{"Pod", "Service"} {
		if len(traces[kind]) != 2 {
			t.Errorf("%s phoenix was created twice; its creates are in %d traces, want 2", kind, len(traces[kind]))
		}
	}
}

func TestJobFixtureOwnership(t *testing.T) {
	td, _ := replayScenario(t, "job", nil)
	owners := map[string]string{}
	for _, s := range allSpans(td) {
		a := s.Attributes()
		if o := attrStr(a, model.AttrOwnerKind); o != "<absent>" {
			owners[attrStr(a, model.AttrObjectKind)] = o
		}
	}
	if owners["Pod"] != "Job" || owners["Job"] != "CronJob" {
		t.Fatalf("owners by kind = %v, want Pod->Job and Job->CronJob", owners)
	}
}

func TestSecretFixtureNeverLeaksAValue(t *testing.T) {
	values := secretValuesOf(t, "secret")
	if len(values) < 3 {
		t.Fatalf("found %d secret values in the fixture, want the literal, the applied and the rotated one", len(values))
	}
	td, _ := replayScenario(t, "secret", nil)
	jsonBytes, err := (&ptrace.JSONMarshaler{}).MarshalTraces(td)
	if err != nil {
		t.Fatal(err)
	}
	protoBytes, err := (&ptrace.ProtoMarshaler{}).MarshalTraces(td)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range values {
		if bytes.Contains(jsonBytes, []byte(v)) || bytes.Contains(protoBytes, []byte(v)) {
			t.Fatalf("the secret value %q was exported", v)
		}
	}
	if !bytes.Contains(jsonBytes, []byte(redacted)) {
		t.Fatal("the secret spans must show the masked values")
	}
}

// secretValuesOf collects, from the raw fixture, every value a Secret held: data (and its
// base64 decoding), stringData, and the values inside last-applied-configuration.
func secretValuesOf(t *testing.T, scenario string) []string {
	t.Helper()
	posts, _ := filepath.Glob(filepath.Join(fixturesDir, scenario, "audit-webhook", "*.json"))
	seen := map[string]bool{}
	var collect func(t jsonscan.Tree)
	collect = func(obj jsonscan.Tree) {
		for _, f := range []string{"data", "stringData"} {
			for _, v := range jsonscan.Child(obj, f) {
				s, _ := v.(string)
				if s == "" {
					continue
				}
				seen[s] = true
				if dec, err := base64.StdEncoding.DecodeString(s); err == nil && f == "data" {
					seen[string(dec)] = true
				}
			}
		}
		if la := jsonscan.Str(jsonscan.Child(jsonscan.Child(obj, "metadata"), "annotations"), lastAppliedAnnotation); la != "" {
			if inner, ok := jsonscan.ParseTree([]byte(la)); ok {
				collect(inner)
			}
		}
	}
	for _, p := range posts {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var list struct {
			Items []struct {
				ObjectRef      objectReference `json:"objectRef"`
				RequestObject  json.RawMessage `json:"requestObject"`
				ResponseObject json.RawMessage `json:"responseObject"`
			} `json:"items"`
		}
		if err := json.Unmarshal(data, &list); err != nil {
			t.Fatal(err)
		}
		for _, it := range list.Items {
			if it.ObjectRef.Resource != "secrets" {
				continue
			}
			for _, raw := range []json.RawMessage{it.RequestObject, it.ResponseObject} {
				if obj, ok := jsonscan.ParseTree(raw); ok {
					collect(obj)
				}
			}
		}
	}
	var out []string
	for v := range seen {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

// The deployment scenario rolls the Deployment out several times: its writes carry the
// generation they asked for and the one the controller observed, its ReplicaSets the revision
// and the pod-template hash, and the Pods the hash of the template they were made from, which
// is one of the ReplicaSets' (docs/span-model.md, Rollouts).
func TestRolloutAttributesGroupTheDeploymentScenario(t *testing.T) {
	td, _ := replayScenario(t, "deployment", nil)
	gens, observed := map[int64]bool{}, map[int64]bool{}
	rsHash := map[string]string{} // hash -> revision
	var podHashes []string
	for _, s := range allSpans(td) {
		a := s.Attributes()
		switch attrStr(a, model.AttrObjectKind) {
		case "Deployment":
			if v, ok := a.Get(model.AttrObjectGeneration); ok {
				gens[v.Int()] = true
			}
			if v, ok := a.Get(model.AttrObjectObservedGeneration); ok {
				observed[v.Int()] = true
			}
		case "ReplicaSet":
			if h := attrStr(a, model.AttrObjectTemplateHash); h != "<absent>" {
				rsHash[h] = attrStr(a, model.AttrObjectRevision)
			}
		case "Pod":
			if h := attrStr(a, model.AttrObjectTemplateHash); h != "<absent>" && attrStr(a, model.AttrAuditVerb) == "create" {
				podHashes = append(podHashes, h)
			}
		}
	}
	if len(gens) < 3 || len(observed) < 3 {
		t.Fatalf("Deployment generations %v, observed %v: want the scenario's several rollouts", gens, observed)
	}
	if len(rsHash) != 2 || rsHash[slices.Sorted(maps.Keys(rsHash))[0]] == "<absent>" {
		t.Fatalf("ReplicaSet hashes and revisions %v, want two ReplicaSets with revisions", rsHash)
	}
	for _, h := range podHashes {
		if _, ok := rsHash[h]; !ok {
			t.Fatalf("a Pod of template %s, which no ReplicaSet has (%v)", h, rsHash)
		}
	}
	if len(podHashes) < 5 {
		t.Fatalf("%d Pod creates with a template hash", len(podHashes))
	}
}
