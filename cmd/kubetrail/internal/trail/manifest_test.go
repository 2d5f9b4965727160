package trail

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/golden"

	"github.com/kubetrail/kubetrail/internal/model"
)

// recordedSpans are a scenario's traces as the processor wrote them, recorded from the real
// control plane (processor/k8sobjectlinkprocessor/testdata/golden).
func recordedSpans(t *testing.T, scenario string) []*Span {
	t.Helper()
	td, err := golden.ReadTraces(filepath.Join("../../../../processor/k8sobjectlinkprocessor/testdata/golden", scenario+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return SpansFromTraces(td)
}

// deleteMetadata are what a delete's answer changes besides what the writes before it did.
var deleteMetadata = []string{"deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion", "generation"}

// TestRebuiltStateBeforeEachDeleteIsTheBodyTheDeleteAnswered rebuilds every object of the
// recorded scenarios just before its delete, from its create's body and every diff after it,
// and compares the result with the body the apiserver answered the delete with (the delete's
// snapshot): the two must be the same object, but for what a delete itself sets. An object whose
// state the spans cannot tell must say so (ErrNotKnown), never answer a wrong body.
func TestRebuiltStateBeforeEachDeleteIsTheBodyTheDeleteAnswered(t *testing.T) {
	compared := 0
	for _, scenario := range []string{"deployment", "conflict", "job", "recreate", "unschedulable", "secret"} {
		spans := recordedSpans(t, scenario)
		uids := map[string]bool{}
		for _, s := range spans {
			if s.IsWrite() && s.Object.UID != "" {
				uids[s.Object.UID] = true
			}
		}
		for uid := range uids {
			for _, d := range objectWrites(spans, uid) {
				body, ok, _ := snapshotOf(d)
				if d.Str(model.AttrAuditVerb) != "delete" || d.Failed() || !ok {
					continue
				}
				m, err := ManifestAt(spans, uid, d.End.Add(-time.Nanosecond))
				if err != nil {
					if !strings.Contains(err.Error(), ErrNotKnown.Error()) {
						t.Errorf("%s %s before its delete: %v", scenario, d.Object.DisplayName(), err)
					}
					t.Logf("%s %s before its delete: %v", scenario, d.Object.DisplayName(), err)
					continue
				}
				got, want := stripped(m.Object), stripped(body)
				if !reflect.DeepEqual(got, want) {
					g, _ := json.MarshalIndent(got, "", " ")
					w, _ := json.MarshalIndent(want, "", " ")
					t.Errorf("%s %s: rebuilt before its delete at %s:\n%s\nthe delete answered:\n%s", scenario, d.Object.DisplayName(), d.Start, g, w)
				}
				compared++
			}
		}
	}
	if compared < 10 {
		t.Fatalf("compared %d objects' rebuilt states with their deletes' bodies, want at least 10", compared)
	}
	t.Logf("%d objects rebuilt up to their delete, each equal to the body the delete answered", compared)
}

// stripped is obj without what a delete sets, its keyed lists (conditions, containers) sorted by
// key: the receiver compares them element by key, so a reordering is not a change and the
// rebuilt order may differ from the apiserver's.
func stripped(obj map[string]any) map[string]any {
	c := sortKeyedLists(deepCopy(obj)).(map[string]any)
	if md, ok := c["metadata"].(map[string]any); ok {
		for _, k := range deleteMetadata {
			delete(md, k)
		}
	}
	return c
}

func sortKeyedLists(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, c := range v {
			v[k] = sortKeyedLists(c)
		}
	case []any:
		for i, c := range v {
			v[i] = sortKeyedLists(c)
		}
		for _, field := range []string{"name", "type"} {
			keys := map[string]bool{}
			for _, c := range v {
				m, ok := c.(map[string]any)
				k, isStr := m[field].(string)
				if !ok || !isStr || keys[k] {
					keys = nil
					break
				}
				keys[k] = true
			}
			if keys != nil {
				sort.Slice(v, func(i, j int) bool {
					return v[i].(map[string]any)[field].(string) < v[j].(map[string]any)[field].(string)
				})
				break
			}
		}
	}
	return v
}

func TestManifestAtFollowsTheDeploymentsScaleAndImageChange(t *testing.T) {
	spans := recordedSpans(t, "deployment")
	var uid string
	var scale, image *Span
	for _, s := range spans {
		if s.Object.Kind == "Deployment" && s.IsWrite() && s.IsUser() {
			uid = s.Object.UID
			switch s.Verb() {
			case "patch scale":
				if scale == nil {
					scale = s
				}
			case "patch":
				image = s
			}
		}
	}
	if scale == nil || image == nil {
		t.Fatal("the recorded deployment scenario has no scale or image patch")
	}
	at := func(tm time.Time) (replicas any, img any) {
		t.Helper()
		m, err := ManifestAt(spans, uid, tm)
		if err != nil {
			t.Fatalf("at %s: %v", tm, err)
		}
		spec := m.Object["spec"].(map[string]any)
		c := spec["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
		return spec["replicas"], c["image"]
	}
	if r, i := at(scale.End.Add(-time.Nanosecond)); r != 2.0 || i != "registry.k8s.io/nginx:1.27" {
		t.Errorf("before the scale: replicas %v image %v, want 2 and nginx:1.27", r, i)
	}
	if r, i := at(scale.End); r != 4.0 || i != "registry.k8s.io/nginx:1.27" {
		t.Errorf("after the scale: replicas %v image %v, want 4 and nginx:1.27", r, i)
	}
	if r, i := at(image.End); r != 4.0 || i != "registry.k8s.io/nginx:1.28" {
		t.Errorf("after the image patch: replicas %v image %v, want 4 and nginx:1.28", r, i)
	}
	// Before the create, the object did not exist.
	first := objectWrites(spans, uid)[0]
	if _, err := ManifestAt(spans, uid, first.Start.Add(-time.Second)); err == nil || !strings.Contains(err.Error(), "did not exist yet") {
		t.Errorf("before its create: %v, want it did not exist yet", err)
	}
}

// TestAWriteWithoutADiffMakesTheStateUnknownUntilADiffFromTheKnownVersion: a status patch whose
// diff was skipped (base_not_seen) leaves the state unknown, named; the next write whose diff is
// based on another version keeps it unknown, never applied on a stale base.
func TestAWriteWithoutADiffMakesTheStateUnknownUntilADiffFromTheKnownVersion(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	obj := model.Object{Kind: "Deployment", Namespace: "shop", Name: "web", UID: "u1"}
	write := func(sec int, verb, newRV string, attrs map[string]any, events ...Event) *Span {
		a := map[string]any{model.AttrAuditVerb: verb, model.AttrHTTPStatusCode: int64(200), attrNewResVer: newRV, model.AttrUserName: "alice"}
		for k, v := range attrs {
			a[k] = v
		}
		return &Span{Type: model.SpanTypeAudit, Object: obj, Start: t0.Add(time.Duration(sec) * time.Second), End: t0.Add(time.Duration(sec)*time.Second + time.Millisecond),
			Attrs: a, Events: events, SpanID: [8]byte{byte(sec)}}
	}
	diff := func(base string, path, oldV, newV string) Event {
		return Event{Name: model.EventObjectDiff, Attrs: map[string]any{
			attrDiffPaths: []any{path}, attrDiffOld: []any{oldV}, attrDiffNew: []any{newV}, attrDiffCount: int64(1), attrDiffBaseRV: base}}
	}
	created := Event{Name: model.EventObjectSnapshot, Attrs: map[string]any{attrBody: `{"kind":"Deployment","metadata":{"name":"web","resourceVersion":"10"},"spec":{"replicas":1}}`}}
	diff2 := func(base string) Event {
		return Event{Name: model.EventObjectDiff, Attrs: map[string]any{
			attrDiffPaths: []any{"spec.paused", "spec.replicas"}, attrDiffOld: []any{"", "2"}, attrDiffNew: []any{"true", "5"}, attrDiffCount: int64(2), attrDiffBaseRV: base}}
	}
	spans := []*Span{
		write(1, "create", "10", nil, created),
		write(2, "patch", "11", nil, diff("10", "spec.replicas", "1", "2")),
		write(3, "patch", "12", map[string]any{attrDiffSkipped: "base_not_seen"}),
		write(4, "patch", "13", nil, diff("12", "spec.replicas", "3", "5")),
		write(5, "patch", "14", nil, diff2("11")),
	}
	m, err := ManifestAt(spans, "u1", t0.Add(2*time.Second+time.Millisecond))
	if err != nil || m.Object["spec"].(map[string]any)["replicas"] != 2.0 || m.ResourceVersion != "11" {
		t.Fatalf("after the second write: %v %v", m, err)
	}
	for _, sec := range []int{3, 4} {
		_, err = ManifestAt(spans, "u1", t0.Add(time.Duration(sec)*time.Second+time.Millisecond))
		if err == nil || !strings.Contains(err.Error(), "alice patch at 10:00:03.000: its diff was not computed (base_not_seen)") ||
			!strings.Contains(err.Error(), "--at 2026-11-21T10:00:02.001Z") {
			t.Errorf("after write %d: %v, want unknown since the skipped diff, known at the second write", sec, err)
		}
	}
	// A diff based on the version last known (11) holds every change since then: the state is
	// known again.
	m, err = ManifestAt(spans, "u1", t0.Add(5*time.Second+time.Millisecond))
	if err != nil || m.Object["spec"].(map[string]any)["replicas"] != 5.0 || m.Object["spec"].(map[string]any)["paused"] != true || m.ResourceVersion != "14" {
		t.Fatalf("after a diff based on the last known version: %v %v", m, err)
	}
	// A diff whose old value is not what the state holds is not applied.
	spans[4] = write(5, "patch", "14", nil, diff("11", "spec.replicas", "7", "5"))
	if _, err = ManifestAt(spans, "u1", t0.Add(5*time.Second+time.Millisecond)); err == nil || !strings.Contains(err.Error(), "its change of spec.replicas does not start from the state rebuilt so far") {
		t.Errorf("a diff from another state: %v", err)
	}
}

func TestParseFieldPathReadsWhatTheReceiverWrites(t *testing.T) {
	for _, p := range []string{
		"spec.replicas",
		"spec.template.spec.containers[name=nginx].image",
		"status.conditions[type=Ready].status",
		`metadata.labels["app.kubernetes.io/name"]`,
		`metadata.annotations["deployment.kubernetes.io/revision"]`,
		"spec.ports[1].port",
		`spec.containers[name="a]b"].image`,
		`["weird key"].x`,
		"spec.template.spec.containers[name=registry.k8s.io:5000].image",
	} {
		fp, err := ParseFieldPath(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if fp.String() != p {
			t.Errorf("%s reads back as %s", p, fp)
		}
	}
	for _, p := range []string{"", "spec..replicas", ".spec", "spec.", "spec[", "spec[x]", "spec[-1]", "spec[nam=x]", "spec[name=]", `spec["x`, "spec replicas", "a[0]b", "spec.re…(600 bytes)"} {
		if _, err := ParseFieldPath(p); err == nil {
			t.Errorf("%q parsed; want an error", p)
		}
	}
	a, _ := ParseFieldPath("spec.template")
	b, _ := ParseFieldPath("spec.template.spec.containers[name=app].image")
	c, _ := ParseFieldPath("spec.templates")
	if !a.Overlaps(b) || !b.Overlaps(a) || a.Overlaps(c) {
		t.Errorf("Overlaps: %v %v %v", a.Overlaps(b), b.Overlaps(a), a.Overlaps(c))
	}
}

// TestAPodAfterItsBindingIsNotKnownUntilItsNextStatus: a binding answers with a Status, so
// between it and the kubelet's next status patch (diffed from the create's body) the Pod's state
// is not in any body; after the patch it is known again, on its node.
func TestAPodAfterItsBindingIsNotKnownUntilItsNextStatus(t *testing.T) {
	spans := recordedSpans(t, "deployment")
	for _, b := range spans {
		if b.Object.Kind != "Pod" || b.Verb() != "create binding" || b.Failed() {
			continue
		}
		_, err := ManifestAt(spans, b.Object.UID, b.End)
		if err == nil || !strings.Contains(err.Error(), "a binding answers with a Status, not the Pod") {
			t.Fatalf("just after the binding of %s: %v", b.Object.DisplayName(), err)
		}
		for _, s := range objectWrites(spans, b.Object.UID) {
			if s.Verb() == "patch status" && s.Start.After(b.End) {
				m, err := ManifestAt(spans, b.Object.UID, s.End)
				if err != nil || nestedString(m.Object, "spec", "nodeName") != "kwok-node-0" {
					t.Fatalf("after the kubelet's status patch: %v", err)
				}
				return
			}
		}
		t.Fatalf("no status patch after the binding of %s", b.Object.DisplayName())
	}
	t.Fatal("the recorded deployment scenario has no binding")
}
