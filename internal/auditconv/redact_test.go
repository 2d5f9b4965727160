package auditconv

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"testing"

	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/kubetrail/kubetrail/internal/model"
)

// secretValues are the plain values this test puts in a Secret; neither they nor their base64
// forms may appear anywhere in what the receiver exports.
var secretValues = []string{"hunter2-first-password", "s3cr3t-second-password", "stringdata-token-value", "json-patch-value-xyz"}

func secretBody(rv, password string) string {
	b64 := base64.StdEncoding.EncodeToString([]byte(password))
	lastApplied := fmt.Sprintf(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"creds","namespace":"default"},"stringData":{"token":%q},"data":{"password":%q}}`, secretValues[2], b64)
	return fmt.Sprintf(`{"kind":"Secret","apiVersion":"v1","metadata":{"name":"creds","namespace":"default","uid":"s-1","resourceVersion":%q,
		"annotations":{"kubectl.kubernetes.io/last-applied-configuration":%q,"team":"payments"}},
		"data":{"password":%q,"token":%q},"type":"Opaque"}`, rv, lastApplied, b64, base64.StdEncoding.EncodeToString([]byte(secretValues[2])))
}

func TestSecretValuesNeverLeaveTheReceiver(t *testing.T) {
	c := testConverter()
	ref := objectReference{Resource: "secrets", Namespace: "default", Name: "creds", APIVersion: "v1"}
	withRef := func(rv string) objectReference { r := ref; r.ResourceVersion = rv; r.UID = "s-1"; return r }
	td := must(convertOne(t, c,
		event("c", "create", "alice", ref, 201, withRequest(secretBody("", secretValues[0])), withResponse(secretBody("1", secretValues[0]))),
		event("u", "update", "alice", withRef("1"), 200, withRequest(secretBody("1", secretValues[1])), withResponse(secretBody("2", secretValues[1]))),
		event("p", "patch", "alice", ref, 200,
			withRequest(fmt.Sprintf(`{"stringData":{"token":%q},"metadata":{"annotations":{"kubectl.kubernetes.io/last-applied-configuration":%q}}}`, secretValues[2], secretValues[2])),
			withResponse(secretBody("3", secretValues[1]))),
		event("j", "patch", "alice", ref, 200, withRequest(fmt.Sprintf(`[{"op":"replace","path":"/data/password","value":%q}]`, secretValues[3])), withResponse(secretBody("4", secretValues[3]))),
		event("d", "delete", "alice", withRef(""), 200, withResponse(`{"kind":"Status","apiVersion":"v1","status":"Success"}`)),
	))
	if td.SpanCount() != 5 {
		t.Fatalf("spans = %d", td.SpanCount())
	}

	jsonBytes, err := (&ptrace.JSONMarshaler{}).MarshalTraces(td)
	if err != nil {
		t.Fatal(err)
	}
	protoBytes, err := (&ptrace.ProtoMarshaler{}).MarshalTraces(td)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range secretValues {
		for _, form := range []string{v, base64.StdEncoding.EncodeToString([]byte(v))} {
			if bytes.Contains(jsonBytes, []byte(form)) || bytes.Contains(protoBytes, []byte(form)) {
				t.Fatalf("secret value %q (as %q) was exported", v, form)
			}
		}
	}
	if bytes.Contains(jsonBytes, []byte("<redacted:")) {
		t.Fatal("an internal redaction tag was exported")
	}

	spans := allSpans(td)
	snap, ok := spanEvent(spans[0], model.EventObjectSnapshot)
	if body := attrStr(snap.Attributes(), attrObjectBody); !ok || !bytes.Contains([]byte(body), []byte(`"password":"<redacted>"`)) ||
		!bytes.Contains([]byte(body), []byte(`"team":"payments"`)) {
		t.Fatalf("the create snapshot must keep the key and mask the value: %v", snap.Attributes().AsRaw())
	}
	diff := diffOf(t, spans[1])
	if diff["data.password"] != `"<redacted>" -> "<redacted>"` {
		t.Fatalf("a changed secret value shows as a changed path with masked values, diff = %v", diff)
	}
	if _, ok := diff["data.token"]; ok {
		t.Fatal("an unchanged secret value must not show as changed")
	}
	if _, ok := spanEvent(spans[4], model.EventObjectSnapshot); !ok {
		t.Fatal("a delete answered with a Status snapshots the last known body")
	}
}

func TestRedactPatch(t *testing.T) {
	tests := []struct{ name, patch, want string }{
		{"a merge patch keeps keys and masks values", `{"data":{"k":"djE="},"metadata":{"labels":{"a":"b"}}}`, `{"data":{"k":"<redacted>"},"metadata":{"labels":{"a":"b"}}}`},
		{"a JSON patch masks every value", `[{"op":"add","path":"/metadata/labels/x","value":"y"},{"op":"remove","path":"/data/k"}]`, `[{"op":"add","path":"/metadata/labels/x","value":"<redacted>"},{"op":"remove","path":"/data/k"}]`},
		{"an unparseable patch is dropped whole", "data:\n  k: djE=\n", "<redacted>"},
		// The apiserver audits a patch body before it validates it: a malformed JSON patch
		// is exported too, and its stray fields and elements may hold the value.
		{"a JSON patch keeps only op, path and from of an operation", `[{"op":"add","path":"/data/k","val":"djE="},{"op":"copy","from":"/data/a","path":"/data/b"}]`, `[{"op":"add","path":"/data/k"},{"from":"/data/a","op":"copy","path":"/data/b"}]`},
		{"a JSON patch element that is not an operation is masked", `["djE=",{"op":"test","path":"/data/k","value":"djE="}]`, `["<redacted>",{"op":"test","path":"/data/k","value":"<redacted>"}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := redactPatch([]byte(tt.patch)); got != tt.want {
				t.Fatalf("redactPatch = %s, want %s", got, tt.want)
			}
		})
	}
}

// A TokenReview carries a bearer token in spec.token. It is a create like any other, so an audit
// policy that logs its bodies (a catch-all RequestResponse or Request rule) would make the token
// part of the create's snapshot, whatever redact_resources says.
func TestTokenReviewTokensNeverLeaveTheReceiver(t *testing.T) {
	const token = "eyJhbGciOiJSUzI1NiJ9.bearer-token-value"
	review := fmt.Sprintf(`{"kind":"TokenReview","apiVersion":"authentication.k8s.io/v1","metadata":{"creationTimestamp":null},"spec":{"token":%q,"audiences":["api"]},"status":{"authenticated":true,"user":{"username":"alice"}}}`, token)
	ref := objectReference{Resource: "tokenreviews", APIGroup: "authentication.k8s.io", APIVersion: "v1"}
	for _, tt := range []struct {
		name string
		ev   Event
	}{
		{"at RequestResponse level", event("r", "create", "system:kube-apiserver", ref, 201, withRequest(review), withResponse(review))},
		{"at Request level", event("q", "create", "system:kube-apiserver", ref, 201, withRequest(review))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			td := must(convertOne(t, testConverter(func(cfg *Settings) { cfg.RedactResources = nil }), tt.ev))
			if td.SpanCount() != 1 {
				t.Fatalf("spans = %d", td.SpanCount())
			}
			out, err := (&ptrace.JSONMarshaler{}).MarshalTraces(td)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(out, []byte("bearer-token-value")) {
				t.Fatalf("a TokenReview's token was exported: %s", out)
			}
		})
	}
}
