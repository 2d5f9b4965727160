package auditconv

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/kubetrail/kubetrail/internal/auditconv/internal/jsonscan"
	"github.com/kubetrail/kubetrail/internal/model"
)

// attemptedDiff returns the span's attempted diff (path -> "old -> new"), failing when its diff
// event is not marked attempted.
func attemptedDiff(t *testing.T, s ptrace.Span) map[string]string {
	t.Helper()
	e, ok := spanEvent(s, model.EventObjectDiff)
	if !ok {
		t.Fatalf("span %q has no diff event", s.Name())
	}
	if v, ok := e.Attributes().Get(model.AttrDiffAttempted); !ok || !v.Bool() {
		t.Fatalf("the diff of a refused write must be marked attempted: %v", e.Attributes().AsRaw())
	}
	return diffOf(t, s)
}

func noDiff(t *testing.T, s ptrace.Span) {
	t.Helper()
	if _, ok := spanEvent(s, model.EventObjectDiff); ok {
		t.Fatalf("span %q must carry no diff: %v", s.Name(), diffOf(t, s))
	}
}

var denied = withStatus(status{Code: 422, Reason: "Invalid", Message: `deployments.apps "demo" is forbidden: ValidatingAdmissionPolicy 'max-replicas' with binding 'max-replicas' denied request: failed expression: object.spec.replicas <= 10`})

func scaleRef() objectReference {
	r := deployRef("")
	r.Subresource = "scale"
	return r
}

func TestRefusedWritesCarryWhatTheyTried(t *testing.T) {
	created := func(t *testing.T) *Converter {
		c := testConverter()
		_, _ = convertOne(t, c, event("create", "create", "alice", deployRef(""), 201, withResponse(deployment("5", 2, "a"))))
		return c
	}
	t.Run("a scale patch", func(t *testing.T) {
		c := created(t)
		s := onlySpan(t, must(convertOne(t, c, event("s", "patch", "alice", scaleRef(), 422, denied, withRequest(`{"spec":{"replicas":40}}`)))))
		if s.Status().Code() != ptrace.StatusCodeError {
			t.Fatal("a refused write stays an error")
		}
		d := attemptedDiff(t, s)
		if len(d) != 1 || d["spec.replicas"] != "2 -> 40" {
			t.Fatalf("diff = %v", d)
		}
		e, _ := spanEvent(s, model.EventObjectDiff)
		if attrStr(e.Attributes(), attrDiffBase) != "5" {
			t.Fatalf("the diff names the version it is relative to: %v", e.Attributes().AsRaw())
		}
	})
	t.Run("a scale update", func(t *testing.T) {
		c := created(t)
		s := onlySpan(t, must(convertOne(t, c, event("s", "update", "alice", scaleRef(), 422, denied,
			withRequest(`{"kind":"Scale","apiVersion":"autoscaling/v1","metadata":{"name":"demo"},"spec":{"replicas":12}}`)))))
		if d := attemptedDiff(t, s); len(d) != 1 || d["spec.replicas"] != "2 -> 12" {
			t.Fatalf("diff = %v", d)
		}
	})
	t.Run("an update: the status and the server's metadata are not the client's to change", func(t *testing.T) {
		c := created(t)
		body := strings.Replace(deployment("5", 2, "b"), `"uid":"d-1"`, `"uid":"other"`, 1)
		body = strings.TrimSuffix(body, "}") + `,"status":{"replicas":9}}`
		s := onlySpan(t, must(convertOne(t, c, event("u", "update", "alice", deployRef("5"), 403, withRequest(body),
			withStatus(status{Code: 403, Reason: "Forbidden", Message: `admission webhook "images.example.com" denied the request: image b is not signed`})))))
		d := attemptedDiff(t, s)
		if len(d) != 1 || d["spec.template.spec.containers[name=web].image"] != `"a" -> "b"` {
			t.Fatalf("diff = %v", d)
		}
	})
	t.Run("a strategic-merge patch merges containers by name", func(t *testing.T) {
		c := created(t)
		s := onlySpan(t, must(convertOne(t, c, event("p", "patch", "alice", deployRef(""), 422, denied,
			withRequest(`{"spec":{"template":{"spec":{"$setElementOrder/containers":[{"name":"web"}],"containers":[{"name":"web","image":"c"},{"name":"side","image":"s"}]}}}}`)))))
		d := attemptedDiff(t, s)
		if len(d) != 2 || d["spec.template.spec.containers[name=web].image"] != `"a" -> "c"` || !strings.HasSuffix(d["spec.template.spec.containers[name=side]"], `{"image":"s","name":"side"}`) {
			t.Fatalf("diff = %v", d)
		}
	})
	t.Run("a merge patch's null removes", func(t *testing.T) {
		c := created(t)
		s := onlySpan(t, must(convertOne(t, c, event("p", "patch", "alice", deployRef(""), 422, denied, withRequest(`{"spec":{"replicas":null}}`)))))
		if d := attemptedDiff(t, s); len(d) != 1 || d["spec.replicas"] != "2 -> " {
			t.Fatalf("diff = %v", d)
		}
	})
	t.Run("a JSON patch", func(t *testing.T) {
		c := created(t)
		s := onlySpan(t, must(convertOne(t, c, event("j", "patch", "alice", deployRef(""), 422, denied,
			withRequest(`[{"op":"test","path":"/spec/replicas","value":2},{"op":"replace","path":"/spec/replicas","value":7},{"op":"add","path":"/spec/template/spec/containers/-","value":{"name":"x","image":"y"}}]`)))))
		d := attemptedDiff(t, s)
		if len(d) != 2 || d["spec.replicas"] != "2 -> 7" {
			t.Fatalf("diff = %v", d)
		}
	})
	t.Run("a JSON patch that does not apply tries nothing", func(t *testing.T) {
		c := created(t)
		noDiff(t, onlySpan(t, must(convertOne(t, c, event("j", "patch", "alice", deployRef(""), 422, denied,
			withRequest(`[{"op":"test","path":"/spec/replicas","value":3},{"op":"replace","path":"/spec/replicas","value":7}]`))))))
	})
	t.Run("the status subresource changes only the status", func(t *testing.T) {
		c := created(t)
		body := strings.TrimSuffix(deployment("5", 4, "z"), "}") + `,"status":{"readyReplicas":2}}`
		s := onlySpan(t, must(convertOne(t, c, event("st", "update", "system:serviceaccount:kube-system:deployment-controller",
			objectReference{Resource: "deployments", Namespace: "default", Name: "demo", UID: "d-1", APIGroup: "apps", APIVersion: "v1", ResourceVersion: "5", Subresource: "status"},
			409, withRequest(body), withStatus(status{Code: 409, Reason: "Conflict"})))))
		if d := attemptedDiff(t, s); len(d) != 1 || d["status"] != ` -> {"readyReplicas":2}` {
			t.Fatalf("diff = %v", d)
		}
	})
	t.Run("a write based on a version not held tries nothing shown", func(t *testing.T) {
		c := created(t)
		noDiff(t, onlySpan(t, must(convertOne(t, c, event("u", "update", "alice", deployRef("3"), 409, withRequest(deployment("3", 9, "a")),
			withStatus(status{Code: 409, Reason: "Conflict"}))))))
	})
	t.Run("an update's body names its base when the objectRef does not (GKE)", func(t *testing.T) {
		c := created(t)
		noDiff(t, onlySpan(t, must(convertOne(t, c, event("u", "update", "alice", deployRef(""), 409, withRequest(deployment("3", 9, "a")),
			withStatus(status{Code: 409, Reason: "Conflict"}))))))
		if d := attemptedDiff(t, onlySpan(t, must(convertOne(t, c, event("u2", "update", "alice", deployRef(""), 409, withRequest(deployment("5", 9, "a")),
			withStatus(status{Code: 409, Reason: "Conflict"})))))); d["spec.replicas"] != "2 -> 9" {
			t.Fatalf("diff = %v", d)
		}
	})
	t.Run("an object never seen tries nothing shown", func(t *testing.T) {
		c := testConverter()
		noDiff(t, onlySpan(t, must(convertOne(t, c, event("s", "patch", "alice", scaleRef(), 422, denied, withRequest(`{"spec":{"replicas":40}}`))))))
	})
	t.Run("a refusal without a request body, and a 404, try nothing", func(t *testing.T) {
		c := created(t)
		noDiff(t, onlySpan(t, must(convertOne(t, c, event("s", "patch", "alice", scaleRef(), 422, denied)))))
		noDiff(t, onlySpan(t, must(convertOne(t, c, event("s", "patch", "alice", scaleRef(), 404, withRequest(`{"spec":{"replicas":40}}`),
			withStatus(status{Code: 404, Reason: "NotFound"}))))))
	})
	t.Run("the cache keeps the object as it is", func(t *testing.T) {
		c := created(t)
		_, _ = convertOne(t, c, event("s", "patch", "alice", scaleRef(), 422, denied, withRequest(`{"spec":{"replicas":40}}`)))
		s := onlySpan(t, must(convertOne(t, c, event("ok", "patch", "alice", deployRef(""), 200, withRequest(`{"spec":{"replicas":3}}`), withResponse(deployment("6", 3, "a"))))))
		if _, ok := spanEvent(s, model.EventObjectDiff); !ok {
			t.Fatal("no diff")
		}
		e, _ := spanEvent(s, model.EventObjectDiff)
		if _, ok := e.Attributes().Get(model.AttrDiffAttempted); ok {
			t.Fatal("a write that took effect is not attempted")
		}
		if d := diffOf(t, s); d["spec.replicas"] != "2 -> 3" {
			t.Fatalf("diff = %v", d)
		}
	})
}

func TestRefusedSecretWritesShowNoValue(t *testing.T) {
	c := testConverter()
	ref := objectReference{Resource: "secrets", Namespace: "default", Name: "creds", APIVersion: "v1", UID: "s-1"}
	_, _ = convertOne(t, c, event("c", "create", "alice", ref, 201, withResponse(secretBody("1", secretValues[0]))))
	td := must(convertOne(t, c,
		event("u", "update", "alice", ref, 422, denied, withRequest(secretBody("", secretValues[1]))),
		event("j", "patch", "alice", ref, 422, denied, withRequest(fmt.Sprintf(`[{"op":"replace","path":"/data/password","value":%q}]`, secretValues[3]))),
	))
	spans := allSpans(td)
	for _, s := range spans {
		if d := attemptedDiff(t, s); d["data.password"] != `"<redacted>" -> "<redacted>"` {
			t.Fatalf("%s: a tried secret value shows as a changed path with masked values, diff = %v", s.Name(), d)
		}
	}
	raw, err := (&ptrace.JSONMarshaler{}).MarshalTraces(td)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range secretValues {
		if bytes.Contains(raw, []byte(v)) || bytes.Contains(raw, []byte(base64.StdEncoding.EncodeToString([]byte(v)))) {
			t.Fatalf("secret value %q was exported", v)
		}
	}
	if bytes.Contains(raw, []byte("<redacted:")) {
		t.Fatal("an internal redaction tag was exported")
	}
}

func TestApplyJSONPatch(t *testing.T) {
	tests := []struct{ name, doc, patch, want string }{
		{"add to a map and into a list", `{"a":[1,3]}`, `[{"op":"add","path":"/b","value":{"c":1}},{"op":"add","path":"/a/1","value":2},{"op":"add","path":"/a/-","value":4}]`, `{"a":[1,2,3,4],"b":{"c":1}}`},
		{"remove and replace", `{"a":[1,2,3],"b":1}`, `[{"op":"remove","path":"/a/0"},{"op":"replace","path":"/b","value":"x"}]`, `{"a":[2,3],"b":"x"}`},
		{"move and copy", `{"a":{"x":1},"b":{}}`, `[{"op":"copy","from":"/a/x","path":"/b/y"},{"op":"move","from":"/a","path":"/c"}]`, `{"b":{"y":1},"c":{"x":1}}`},
		{"escaped keys", `{"m":{"a/b":1,"c~d":2}}`, `[{"op":"remove","path":"/m/a~1b"},{"op":"replace","path":"/m/c~0d","value":3}]`, `{"m":{"c~d":3}}`},
		{"a test that holds", `{"a":{"x":[1]}}`, `[{"op":"test","path":"/a","value":{"x":[1]}}]`, `{"a":{"x":[1]}}`},
		{"a failed test", `{"a":1}`, `[{"op":"test","path":"/a","value":2}]`, ""},
		{"a missing path", `{"a":1}`, `[{"op":"remove","path":"/b"}]`, ""},
		{"replace needs the member", `{"a":1}`, `[{"op":"replace","path":"/b","value":2}]`, ""},
		{"an index past the end", `{"a":[1]}`, `[{"op":"add","path":"/a/2","value":2}]`, ""},
		{"a leading zero is no index", `{"a":[1,2]}`, `[{"op":"remove","path":"/a/01"}]`, ""},
		{"an unknown op", `{"a":1}`, `[{"op":"merge","path":"/a","value":2}]`, ""},
		{"an operation that is no object", `{"a":1}`, `["x"]`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var doc, patch any
			if err := jsonscan.UnmarshalNumbers([]byte(tt.doc), &doc); err != nil {
				t.Fatal(err)
			}
			if err := jsonscan.UnmarshalNumbers([]byte(tt.patch), &patch); err != nil {
				t.Fatal(err)
			}
			got, ok := applyPatch(doc, patch)
			if tt.want == "" {
				if ok {
					t.Fatalf("applied: %s", jsonscan.Marshal(got))
				}
				return
			}
			if !ok || jsonscan.Marshal(got) != tt.want {
				t.Fatalf("got %v %s, want %s", ok, jsonscan.Marshal(got), tt.want)
			}
		})
	}
}

func TestMergePatch(t *testing.T) {
	tests := []struct{ name, doc, patch, want string }{
		{"members merge, null removes", `{"a":{"b":1,"c":2}}`, `{"a":{"b":null,"d":3}}`, `{"a":{"c":2,"d":3}}`},
		{"a list of scalars is replaced", `{"a":[1,2]}`, `{"a":[3]}`, `{"a":[3]}`},
		{"named lists merge by name", `{"l":[{"name":"x","v":1},{"name":"y","v":2}]}`, `{"l":[{"name":"y","v":3},{"name":"z"}]}`, `{"l":[{"name":"x","v":1},{"name":"y","v":3},{"name":"z"}]}`},
		{"$patch delete removes a named element", `{"l":[{"name":"x"},{"name":"y"}]}`, `{"l":[{"name":"x","$patch":"delete"}]}`, `{"l":[{"name":"y"}]}`},
		{"$patch replace replaces a map", `{"m":{"a":1,"b":2}}`, `{"m":{"$patch":"replace","c":3}}`, `{"m":{"c":3}}`},
		{"directives are left out", `{"m":{"a":1}}`, `{"m":{"$retainKeys":["a"],"a":2},"$setElementOrder/l":[]}`, `{"m":{"a":2}}`},
		{"a list of unnamed objects is replaced", `{"l":[{"k":1}]}`, `{"l":[{"k":2,"x":null}]}`, `{"l":[{"k":2}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var doc, patch any
			_ = jsonscan.UnmarshalNumbers([]byte(tt.doc), &doc)
			_ = jsonscan.UnmarshalNumbers([]byte(tt.patch), &patch)
			got, ok := applyPatch(doc, patch)
			if !ok || jsonscan.Marshal(got) != tt.want {
				t.Fatalf("got %s, want %s", jsonscan.Marshal(got), tt.want)
			}
		})
	}
}
