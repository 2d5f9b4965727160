package auditconv

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/internal/redactiontest"
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
			if got := newRedactor(DefaultSettings()).redactPatch([]byte(tt.patch), maskConstant); got != tt.want {
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

// planted are credentials a test puts where redaction promises to mask them: literal env values
// of credential names, annotations of credential keys, redacted resources' data, webhook patches
// and error messages that quote them. None may appear in any exported byte, in any form.
type planted struct{ values []string }

func (p *planted) v(name string) string {
	v := "planted-" + name + "-x9k2"
	p.values = append(p.values, v)
	return v
}

// assertNoneExported marshals td as OTLP JSON and protobuf and fails on any planted value (or
// its base64) found, or an internal tag; it returns the JSON.
func (p *planted) assertNoneExported(t *testing.T, td ptrace.Traces) string {
	t.Helper()
	jsonBytes, err := (&ptrace.JSONMarshaler{}).MarshalTraces(td)
	if err != nil {
		t.Fatal(err)
	}
	protoBytes, err := (&ptrace.ProtoMarshaler{}).MarshalTraces(td)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range p.values {
		for _, form := range []string{v, base64.StdEncoding.EncodeToString([]byte(v))} {
			if bytes.Contains(jsonBytes, []byte(form)) || bytes.Contains(protoBytes, []byte(form)) {
				i := bytes.Index(jsonBytes, []byte(form))
				t.Errorf("planted value %q was exported (as %q), near: %.300s", v, form, jsonBytes[max(i-200, 0):])
			}
		}
	}
	if bytes.Contains(jsonBytes, []byte(tagPrefix)) {
		t.Error("an internal redaction tag was exported")
	}
	return string(jsonBytes)
}

func envJSON(pairs ...string) string {
	var b strings.Builder
	for i := 0; i < len(pairs); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":%q,"value":%q}`, pairs[i], pairs[i+1])
	}
	return "[" + b.String() + "]"
}

func TestNoPlantedCredentialLeavesTheConverter(t *testing.T) {
	var p planted
	c := testConverter(func(s *Settings) {
		s.RedactResources = append(s.RedactResources, GroupResource{Resource: "configmaps"})
	})

	// A Pod created with literal env values and a credential annotation, a mutating webhook
	// adding an env value (by entry and by index) and an annotation on the way.
	podRef := objectReference{Resource: "pods", Namespace: "default", Name: "web-0", APIVersion: "v1"}
	podPassword, podToken := p.v("pod-password"), p.v("pod-token")
	podAnnotation := p.v("pod-annotation")
	pod := func(rv string) string {
		return fmt.Sprintf(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-0","namespace":"default","uid":"p-1","resourceVersion":%q,
			"annotations":{"example.com/api-token":%q,"team":"payments"}},
			"spec":{"containers":[{"name":"web","image":"nginx","env":%s}],"initContainers":[{"name":"init","image":"busybox","env":%s}]}}`,
			rv, podAnnotation, envJSON("DB_PASSWORD", podPassword, "LOG_LEVEL", "debug", "API_TOKEN", podToken), envJSON("AWS_SECRET_ACCESS_KEY", p.v("init-aws-key")))
	}
	webhookPatch := fmt.Sprintf(`[{"op":"add","path":"/spec/containers/0/env/-","value":{"name":"VAULT_TOKEN","value":%q}},`+
		`{"op":"replace","path":"/spec/containers/0/env/0/value","value":%q},`+
		`{"op":"add","path":"/metadata/annotations/example.com~1api-token","value":%q},`+
		`{"op":"add","path":"/metadata/labels/tier","value":"frontend"}]`, p.v("webhook-env"), p.v("webhook-env-by-index"), p.v("webhook-annotation"))
	webhookAnn, err := json.Marshal(map[string]any{"configuration": "inject", "webhook": "inject.example.com", "patch": json.RawMessage(webhookPatch), "patchType": "JSONPatch"})
	if err != nil {
		t.Fatal(err)
	}
	podCreate := event("pod-create", "create", "alice", podRef, 201, withRequest(pod("")), withResponse(pod("1")))
	podCreate.Annotations = []annotation{{Key: "patch.webhook.admission.k8s.io/round_0_index_0", Value: string(webhookAnn)}}

	// A Pod refused by a webhook that quotes the value it refused, in the message and a cause,
	// and a policy failure that does too.
	refused := p.v("refused-password")
	refusedPod := fmt.Sprintf(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-1","namespace":"default"},"spec":{"containers":[{"name":"web","image":"nginx","env":%s}]}}`,
		envJSON("DB_PASSWORD", refused))
	denial := fmt.Sprintf("admission webhook %q denied the request: env DB_PASSWORD has the literal value %q", "policy.example.com", refused)
	podRefused := event("pod-refused", "create", "alice", objectReference{Resource: "pods", Namespace: "default", Name: "web-1", APIVersion: "v1"}, 400,
		withRequest(refusedPod), withStatus(status{Code: 400, Reason: "BadRequest", Message: denial,
			Details: &statusDetails{Causes: []statusCause{{Field: "spec.containers[0].env[0].value", Type: "FieldValueForbidden", Message: "literal " + refused}}}}))
	podRefused.Annotations = []annotation{{Key: annPolicyFailure, Value: fmt.Sprintf(`[{"message":"no literal credentials: %s","policy":"no-literals","binding":"b","expressionIndex":0,"validationActions":["Audit"]}]`, refused)}}

	// A Deployment applied with kubectl (its last-applied annotation holds the whole object),
	// then its template's env value rotated and an env entry added by a strategic merge patch.
	deploy := func(rv, password, extra, annotation string) string {
		env := envJSON("STRIPE_SECRET_KEY", password, "REGION", "eu-west-1")
		if extra != "" {
			env = envJSON("STRIPE_SECRET_KEY", password, "REGION", "eu-west-1", "NEW_RELIC_LICENSE_KEY", extra)
		}
		applied := fmt.Sprintf(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"annotations":{"example.com/api-token":%q},"name":"demo","namespace":"default"},"spec":{"template":{"spec":{"containers":[{"name":"web","env":%s}]}}}}`+"\n", annotation, env)
		return fmt.Sprintf(`{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"demo","namespace":"default","uid":"d-1","resourceVersion":%q,
			"annotations":{"kubectl.kubernetes.io/last-applied-configuration":%q,"example.com/api-token":%q}},
			"spec":{"replicas":2,"template":{"metadata":{"annotations":{"checksum/secret":%q}},"spec":{"containers":[{"name":"web","image":"nginx","env":%s}]}}}}`,
			rv, applied, annotation, annotation+"-sum", env)
	}
	oldKey, newKey, added := p.v("stripe-old"), p.v("stripe-new"), p.v("license-key")
	oldAnn, newAnn := p.v("deploy-annotation-old"), p.v("deploy-annotation-new")
	smp := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"web","env":%s}]}}}}`, envJSON("NEW_RELIC_LICENSE_KEY", added))
	deployEvents := []Event{
		event("d-create", "create", "alice", deployRef(""), 201, withRequest(deploy("", oldKey, "", oldAnn)), withResponse(deploy("10", oldKey, "", oldAnn)), at(time.Second)),
		event("d-update", "update", "alice", deployRef("10"), 200, withRequest(deploy("10", newKey, "", newAnn)), withResponse(deploy("11", newKey, "", newAnn)), at(2*time.Second)),
		event("d-patch", "patch", "alice", deployRef(""), 200, withRequest(smp), withResponse(deploy("12", newKey, added, newAnn)), at(3*time.Second)),
		event("d-delete", "delete", "alice", deployRef(""), 200, withResponse(`{"kind":"Status","apiVersion":"v1","status":"Success"}`), at(4*time.Second)),
	}

	// A ConfigMap in redact_resources, created and changed.
	cmRef := objectReference{Resource: "configmaps", Namespace: "default", Name: "settings", APIVersion: "v1"}
	cm := func(rv, v string) string {
		return fmt.Sprintf(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"settings","namespace":"default","uid":"c-1","resourceVersion":%q},"data":{"dsn":%q,"mode":"fast"}}`, rv, v)
	}
	cm1, cm2 := p.v("configmap-dsn-1"), p.v("configmap-dsn-2")
	withCMRef := func(rv string) objectReference { r := cmRef; r.ResourceVersion, r.UID = rv, "c-1"; return r }

	// A Secret.
	secRef := objectReference{Resource: "secrets", Namespace: "default", Name: "creds", APIVersion: "v1"}
	sec := p.v("secret-password")

	td := must(convertOne(t, c, append(append([]Event{podCreate, podRefused}, deployEvents...),
		event("cm-create", "create", "alice", cmRef, 201, withRequest(cm("", cm1)), withResponse(cm("20", cm1)), at(5*time.Second)),
		event("cm-update", "update", "alice", withCMRef("20"), 200, withRequest(cm("20", cm2)), withResponse(cm("21", cm2)), at(6*time.Second)),
		event("s-create", "create", "alice", secRef, 201, withRequest(secretBody("", sec)), withResponse(secretBody("30", sec)), at(7*time.Second)),
	)...))
	out := p.assertNoneExported(t, td)

	spans := map[string]ptrace.Span{}
	for _, s := range allSpans(td) {
		spans[attrStr(s.Attributes(), model.AttrAuditID)] = s
	}
	if len(spans) != 9 {
		t.Fatalf("spans = %d, want 9", len(spans))
	}
	// What stays: keys, names, harmless values, and the fact of each change.
	snap, _ := spanEvent(spans["pod-create"], model.EventObjectSnapshot)
	body := attrStr(snap.Attributes(), attrObjectBody)
	for _, want := range []string{`{"name":"DB_PASSWORD","value":"<redacted>"}`, `{"name":"LOG_LEVEL","value":"debug"}`,
		`"example.com/api-token":"<redacted>"`, `"team":"payments"`, `{"name":"AWS_SECRET_ACCESS_KEY","value":"<redacted>"}`} {
		if !strings.Contains(body, want) {
			t.Errorf("the Pod's snapshot lacks %s: %s", want, body)
		}
	}
	patches := annotationSlice(spans["pod-create"].Attributes(), attrAdmissionPatches)
	if len(patches) != 1 || !strings.Contains(patches[0], `{"name":"VAULT_TOKEN","value":"<redacted>"}`) ||
		!strings.Contains(patches[0], `"path":"/spec/containers/0/env/0/value","value":"<redacted>"`) ||
		!strings.Contains(patches[0], `"path":"/metadata/annotations/example.com~1api-token","value":"<redacted>"`) ||
		!strings.Contains(patches[0], `"path":"/metadata/labels/tier","value":"frontend"`) {
		t.Errorf("the webhook's patch must keep its paths and harmless values and mask the rest: %q", patches)
	}
	if msg := spans["pod-refused"].Status().Message(); !strings.Contains(msg, `literal value "<redacted>"`) {
		t.Errorf("the error message must say a value was quoted, not which: %q", msg)
	}
	if got := attrStr(spans["pod-refused"].Attributes(), attrAdmissionPolicyFails); !strings.Contains(got, "no literal credentials: <redacted>") {
		t.Errorf("policy failures = %s", got)
	}

	diff := diffOf(t, spans["d-update"])
	for path, want := range map[string]string{
		"spec.template.spec.containers[name=web].env[name=STRIPE_SECRET_KEY].value": `"<redacted>" -> "<redacted>"`,
		`metadata.annotations["example.com/api-token"]`:                             `"<redacted>" -> "<redacted>"`,
		`spec.template.metadata.annotations["checksum/secret"]`:                     `"<redacted>" -> "<redacted>"`,
	} {
		if diff[path] != want {
			t.Errorf("diff[%s] = %q, want %q (all of it: %v)", path, diff[path], want, diff)
		}
	}
	if _, ok := diff[`metadata.annotations["kubectl.kubernetes.io/last-applied-configuration"]`]; !ok {
		t.Errorf("the last-applied annotation changed with the env value it holds: %v", diff)
	}
	if _, ok := diff["spec.template.spec.containers[name=web].env[name=REGION].value"]; ok {
		t.Error("an unchanged env value showed as changed")
	}
	diff = diffOf(t, spans["d-patch"])
	if got := diff["spec.template.spec.containers[name=web].env[name=NEW_RELIC_LICENSE_KEY]"]; got != ` -> {"name":"NEW_RELIC_LICENSE_KEY","value":"<redacted>"}` {
		t.Errorf("an added env entry shows its name and a masked value: %q (%v)", got, diff)
	}
	patchEvent, _ := spanEvent(spans["d-patch"], eventAuditPatch)
	if got := attrStr(patchEvent.Attributes(), model.AttrAuditPatch); !strings.Contains(got, `{"name":"NEW_RELIC_LICENSE_KEY","value":"<redacted>"}`) {
		t.Errorf("the patch body = %s", got)
	}
	if snap, ok := spanEvent(spans["d-delete"], model.EventObjectSnapshot); !ok || !strings.Contains(attrStr(snap.Attributes(), attrObjectBody), `"value":"<redacted>"`) {
		t.Error("a deletion answered with a Status snapshots the cached body, masked")
	}
	if got := diffOf(t, spans["cm-update"])["data.dsn"]; got != `"<redacted>" -> "<redacted>"` {
		t.Errorf("a ConfigMap in redact_resources: diff data.dsn = %q", got)
	}
	if !strings.Contains(out, `\"mode\":\"<redacted>\"`) {
		t.Error("every value of a redacted resource's data is masked, harmless or not")
	}
}

// The recorded captures of the testbed's real control plane, with credentials planted in every
// place (internal/redactiontest), through the converter: nothing planted comes out, while the
// masked entries and changes still show.
func TestNoPlantedCredentialLeavesTheConverterOnRecordedCaptures(t *testing.T) {
	for _, scenario := range scenarios(t) {
		t.Run(scenario, func(t *testing.T) {
			posts, err := filepath.Glob(filepath.Join(fixturesDir, scenario, "audit-webhook", "*.json"))
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(posts)
			var plant redactiontest.Planter
			conv := newConverter(defaultSettings(), "test")
			all := ptrace.NewTraces()
			for _, path := range posts {
				raw, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				body, err := plant.Capture(raw)
				if err != nil {
					t.Fatal(err)
				}
				events, err := decodeBody(body)
				if err != nil {
					t.Fatalf("%s: %v", path, err)
				}
				var st Stats
				conv.convert(goldenCluster, events, &st).ResourceSpans().MoveAndAppendTo(all.ResourceSpans())
			}
			if len(plant.Values) == 0 {
				t.Fatal("nothing was planted")
			}
			p := planted{values: plant.Values}
			out := p.assertNoneExported(t, all)
			if strings.Contains(out, redactiontest.Prefix) {
				i := strings.Index(out, redactiontest.Prefix)
				t.Errorf("part of a planted value was exported: %.200s", out[max(i-100, 0):])
			}
			for _, want := range []string{
				`{\"name\":\"` + redactiontest.EnvPassword + `\",\"value\":\"<redacted>\"}`,
				`{\"name\":\"` + redactiontest.EnvPlain + `\",\"value\":\"` + redactiontest.PlainValue + `\"}`,
				`\"` + redactiontest.AnnotationKey + `\":\"<redacted>\"`,
				`env[name=` + redactiontest.EnvToken + `].value`,                           // a changed env value: a diff path
				`{\"name\":\"` + redactiontest.EnvWebhook + `\",\"value\":\"<redacted>\"}`, // a webhook's patch
			} {
				if !strings.Contains(out, want) {
					t.Errorf("the export lacks %s", want)
				}
			}
			switch scenario {
			case "deployment", "conflict": // 409s, whose request bodies the planted message quotes
				if !strings.Contains(out, `has the literal value \"<redacted>\"`) {
					t.Error("the error messages quoting a planted value must show the mask")
				}
			case "secret":
				if !strings.Contains(out, `\"path\":\"/data/injected\",\"value\":\"<redacted>\"`) {
					t.Error("the webhook's patch of a Secret must show its path and the mask")
				}
			}
		})
	}
}

func TestRedactionSettings(t *testing.T) {
	const value = "literal-value-of-a-variable"
	pod := fmt.Sprintf(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"default","uid":"p-1","resourceVersion":"1",
		"annotations":{"example.com/api-token":%q,"example.com/owner":%q,"cert-manager.io/issuer":%q}},
		"spec":{"containers":[{"name":"c","env":%s}]}}`, value+"-a", value+"-o", value+"-i",
		envJSON("SERVICE_URL", value+"-url", "ssl_cert_dir", value+"-cert", "PGPASSWORD", value+"-pg"))
	ref := objectReference{Resource: "pods", Namespace: "default", Name: "p", APIVersion: "v1"}
	snapshot := func(t *testing.T, mutate func(*Settings)) string {
		t.Helper()
		ev := event("c", "create", "alice", ref, 201, withResponse(pod))
		snap, ok := spanEvent(onlySpan(t, must(convertOne(t, testConverter(mutate), ev))), model.EventObjectSnapshot)
		if !ok {
			t.Fatal("no snapshot")
		}
		return attrStr(snap.Attributes(), attrObjectBody)
	}
	shown := func(body string) (out []string) {
		for _, suffix := range []string{"-a", "-o", "-i", "-url", "-cert", "-pg"} {
			if strings.Contains(body, value+suffix+`"`) {
				out = append(out, suffix)
			}
		}
		return out
	}
	for _, tt := range []struct {
		name   string
		mutate func(*Settings)
		shown  []string
	}{
		{"defaults: credential-like env names and annotation names", func(*Settings) {}, []string{"-o", "-i", "-url"}},
		{"redact_env_names empty keeps env values", func(s *Settings) { s.RedactEnvNames = "" }, []string{"-o", "-i", "-url", "-cert", "-pg"}},
		{"redact_env_names .* masks every literal value", func(s *Settings) { s.RedactEnvNames = ".*" }, []string{"-o", "-i"}},
		{"redact_annotations empty keeps annotations", func(s *Settings) { s.RedactAnnotations = nil }, []string{"-a", "-o", "-i", "-url"}},
		{"redact_annotations by prefix", func(s *Settings) { s.RedactAnnotations = []string{`^example\.com/`} }, []string{"-i", "-url"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := snapshot(t, tt.mutate)
			if got := shown(body); !slices.Equal(got, tt.shown) {
				t.Errorf("values shown = %v, want %v: %s", got, tt.shown, body)
			}
		})
	}
	// A body with nothing to redact is exported as before (keys sorted, as encoding/json does).
	plain := `{"apiVersion":"v1","kind":"Pod","metadata":{"annotations":{"a":"b"},"name":"p","namespace":"default","resourceVersion":"1","uid":"p-1"},"spec":{"containers":[{"env":[{"name":"HOME","value":"/root"}],"name":"c"}]}}`
	ev := event("c", "create", "alice", ref, 201, withResponse(plain))
	snap, _ := spanEvent(onlySpan(t, must(convertOne(t, testConverter(), ev))), model.EventObjectSnapshot)
	if got := attrStr(snap.Attributes(), attrObjectBody); got != plain {
		t.Errorf("snapshot = %s, want %s", got, plain)
	}
}

// The docs' examples of the default redact_env_names (docs/security.md, the receiver README): the
// names it masks, among them DB_PASSWD (PASS) and some harmless ones, and names of credentials it
// does not catch, which an operator must add to the pattern.
func TestTheDocumentedEnvNameExamples(t *testing.T) {
	re := regexp.MustCompile(DefaultRedactEnvNames)
	for name, masked := range map[string]bool{
		"DB_PASSWORD": true, "DB_PASSWD": true, "PGPASSWORD": true, "API_TOKEN": true, "AWS_SECRET_ACCESS_KEY": true,
		"SSL_CERT_DIR": true, "AUTHOR": true,
		"DB_PWD": false, "DATABASE_URL": false, "SENTRY_DSN": false, "LOG_LEVEL": false,
	} {
		if got := re.MatchString(name); got != masked {
			t.Errorf("%s: masked %v, the docs say %v", name, got, masked)
		}
	}
}

func TestRedactionSettingsAreValidated(t *testing.T) {
	if s := DefaultSettings(); s.RedactEnvNames != DefaultRedactEnvNames || !slices.Equal(s.RedactAnnotations, []string{DefaultRedactAnnotation}) || s.Validate() != nil {
		t.Fatalf("defaults: %q %q %v", s.RedactEnvNames, s.RedactAnnotations, s.Validate())
	}
	for _, tt := range []struct {
		mutate func(*Settings)
		want   string
	}{
		{func(s *Settings) { s.RedactEnvNames = "(pass" }, "redact_env_names: error parsing regexp"},
		{func(s *Settings) { s.RedactAnnotations = []string{"ok", "[z-a]"} }, "redact_annotations[1]: error parsing regexp"},
		{func(s *Settings) { s.RedactAnnotations = []string{""} }, "redact_annotations[0]: an empty pattern"},
	} {
		s := DefaultSettings()
		tt.mutate(&s)
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate = %v, want %q", err, tt.want)
		}
	}
	// A pattern that does not compile and was not validated fails closed.
	r := newRedactor(Settings{RedactEnvNames: "(", RedactAnnotations: []string{"["}})
	if !r.matchEnv("HOME") || !r.matchAnnotation("a") {
		t.Error("an invalid pattern must match every name")
	}
}

func TestPatchText(t *testing.T) {
	r := newRedactor(DefaultSettings())
	for _, tt := range []struct{ name, patch, want string }{
		{"nothing to redact stays as sent, compacted", `{"spec": {"replicas": 3}}`, `{"spec":{"replicas":3}}`},
		{"an env list without credentials stays", `{"spec":{"containers":[{"name":"c","env":[{"name":"HOME","value":"/"}]}]}}`, `{"spec":{"containers":[{"name":"c","env":[{"name":"HOME","value":"/"}]}]}}`},
		{"a strategic merge patch of an env value", `{"spec":{"containers":[{"name":"c","env":[{"name":"A_TOKEN","value":"x"}]}]}}`, `{"spec":{"containers":[{"env":[{"name":"A_TOKEN","value":"<redacted>"}],"name":"c"}]}}`},
		{"an env entry removed keeps its name", `{"spec":{"containers":[{"name":"c","env":[{"name":"A_TOKEN","$patch":"delete"}]}]}}`, `{"spec":{"containers":[{"name":"c","env":[{"name":"A_TOKEN","$patch":"delete"}]}]}}`},
		{"an annotation set to null stays null", `{"metadata":{"annotations":{"x/token":null}}}`, `{"metadata":{"annotations":{"x/token":null}}}`},
		{"a merge patch of an annotation", `{"metadata":{"annotations":{"x/token":"v","x/owner":"o"}}}`, `{"metadata":{"annotations":{"x/owner":"o","x/token":"<redacted>"}}}`},
		{"a JSON patch of a whole env list", `[{"op":"replace","path":"/spec/containers/0/env","value":[{"name":"PASSWORD","value":"v"},{"name":"HOME","value":"/"}]}]`, `[{"op":"replace","path":"/spec/containers/0/env","value":[{"name":"PASSWORD","value":"<redacted>"},{"name":"HOME","value":"/"}]}]`},
		{"a JSON patch of a value by index: the name is unknown", `[{"op":"test","path":"/spec/containers/0/env/1/value","value":"v"}]`, `[{"op":"test","path":"/spec/containers/0/env/1/value","value":"<redacted>"}]`},
		{"a JSON patch of a harmless annotation", `[{"op":"add","path":"/metadata/annotations/x~1owner","value":"o"}]`, `[{"op":"add","path":"/metadata/annotations/x~1owner","value":"o"}]`},
		{"a JSON patch of the annotations", `[{"op":"add","path":"/metadata/annotations","value":{"x/secret":"s"}}]`, `[{"op":"add","path":"/metadata/annotations","value":{"x/secret":"<redacted>"}}]`},
		{"a JSON patch of a pod template", `[{"op":"add","path":"/spec/template","value":{"metadata":{"annotations":{"checksum/secret":"s"}},"spec":{"containers":[{"env":[{"name":"KEY","value":"k"}]}]}}}]`, `[{"op":"add","path":"/spec/template","value":{"metadata":{"annotations":{"checksum/secret":"<redacted>"}},"spec":{"containers":[{"env":[{"name":"KEY","value":"<redacted>"}]}]}}}]`},
		{"an escaped key is read as the apiserver reads it", `{"spec":{"containers":[{"\u0065nv":[{"name":"TOKEN","value":"t"}]}]}}`, `{"spec":{"containers":[{"env":[{"name":"TOKEN","value":"<redacted>"}]}]}}`},
		{"the last-applied annotation is redacted inside", `{"metadata":{"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"spec\":{\"containers\":[{\"env\":[{\"name\":\"TOKEN\",\"value\":\"t\"}]}]}}\n"}}}`, `{"metadata":{"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"spec\":{\"containers\":[{\"env\":[{\"name\":\"TOKEN\",\"value\":\"<redacted>\"}]}]}}"}}}`},
		{"not JSON stays as sent", `env: x`, `env: x`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := r.patchText([]byte(tt.patch), false, maskConstant); got != tt.want {
				t.Errorf("patchText = %s, want %s", got, tt.want)
			}
		})
	}
}
