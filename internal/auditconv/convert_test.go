package auditconv

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/kubetrail/kubetrail/internal/auditconv/internal/jsonscan"
	"github.com/kubetrail/kubetrail/internal/model"
)

var t0 = time.Date(2026, 11, 21, 10, 45, 54, 0, time.UTC)

// event builds an audit event the way the apiserver writes one at RequestResponse level.
type eventOpt func(*Event)

func event(id, verb, user string, ref objectReference, code int, opts ...eventOpt) Event {
	r := ref
	ev := Event{
		Level: "RequestResponse", AuditID: id, Stage: stageResponseComplete, Verb: verb,
		RequestURI: "/api/v1/namespaces/" + ref.Namespace + "/" + ref.Resource + "?timeout=10s",
		User:       userInfo{Username: user, Groups: []string{"system:authenticated"}},
		SourceIPs:  []string{"10.0.0.7"}, UserAgent: "test/v1", ObjectRef: &r,
		ResponseStatus:           &status{Code: code},
		RequestReceivedTimestamp: t0, StageTimestamp: t0.Add(3 * time.Millisecond),
	}
	for _, o := range opts {
		o(&ev)
	}
	return ev
}

func withResponse(body string) eventOpt {
	return func(ev *Event) { ev.ResponseObject = json.RawMessage(body) }
}

func withRequest(body string) eventOpt {
	return func(ev *Event) { ev.RequestObject = json.RawMessage(body) }
}

func withURI(uri string) eventOpt { return func(ev *Event) { ev.RequestURI = uri } }

func withStatus(st status) eventOpt { return func(ev *Event) { ev.ResponseStatus = &st } }

func at(d time.Duration) eventOpt {
	return func(ev *Event) {
		ev.RequestReceivedTimestamp = t0.Add(d)
		ev.StageTimestamp = t0.Add(d + time.Millisecond)
	}
}

func deployRef(rv string) objectReference {
	return objectReference{Resource: "deployments", Namespace: "default", Name: "demo", UID: "d-1", APIGroup: "apps", APIVersion: "v1", ResourceVersion: rv}
}

func deployment(rv string, replicas int, image string) string {
	return fmt.Sprintf(`{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"demo","namespace":"default","uid":"d-1","resourceVersion":%q,"generation":%d,
	"managedFields":[{"manager":"kubectl","operation":"Update","time":"2026-11-21T10:45:5%dZ"}]},
	"spec":{"replicas":%d,"template":{"spec":{"containers":[{"name":"web","image":%q}]}}}}`, rv, replicas, replicas, replicas, image)
}

func convertOne(t *testing.T, c *Converter, events ...Event) (ptrace.Traces, Stats) {
	t.Helper()
	var st Stats
	return c.convert("c1", events, &st), st
}

func testConverter(mutate ...func(*Settings)) *Converter {
	cfg := defaultSettings()
	for _, m := range mutate {
		m(cfg)
	}
	return newConverter(cfg, "test")
}

// allSpans returns copies of td's spans whose attributes also hold their Resource's (the
// object's identity), so that a test reads a span as a backend shows it. The placement itself
// is TestIdentityIsOnTheResource's.
func allSpans(td ptrace.Traces) []ptrace.Span {
	var out []ptrace.Span
	for i := 0; i < td.ResourceSpans().Len(); i++ {
		res := td.ResourceSpans().At(i).Resource().Attributes()
		ss := td.ResourceSpans().At(i).ScopeSpans()
		for j := 0; j < ss.Len(); j++ {
			for k := 0; k < ss.At(j).Spans().Len(); k++ {
				s := ptrace.NewSpan()
				ss.At(j).Spans().At(k).CopyTo(s)
				for key, v := range res.All() {
					if _, ok := s.Attributes().Get(key); !ok {
						v.CopyTo(s.Attributes().PutEmpty(key))
					}
				}
				out = append(out, s)
			}
		}
	}
	return out
}

func onlySpan(t *testing.T, td ptrace.Traces) ptrace.Span {
	t.Helper()
	s := allSpans(td)
	if len(s) != 1 {
		t.Fatalf("got %d spans, want 1", len(s))
	}
	return s[0]
}

func attrStr(m pcommon.Map, key string) string {
	v, ok := m.Get(key)
	if !ok {
		return "<absent>"
	}
	return v.AsString()
}

func spanEvent(s ptrace.Span, name string) (ptrace.SpanEvent, bool) {
	for i := 0; i < s.Events().Len(); i++ {
		if s.Events().At(i).Name() == name {
			return s.Events().At(i), true
		}
	}
	return ptrace.SpanEvent{}, false
}

func diffOf(t *testing.T, s ptrace.Span) map[string]string {
	t.Helper()
	e, ok := spanEvent(s, model.EventObjectDiff)
	if !ok {
		t.Fatalf("span %q has no diff event", s.Name())
	}
	paths, _ := e.Attributes().Get(attrDiffPaths)
	olds, _ := e.Attributes().Get(attrDiffOld)
	news, _ := e.Attributes().Get(attrDiffNew)
	out := map[string]string{}
	for i := 0; i < paths.Slice().Len(); i++ {
		out[paths.Slice().At(i).Str()] = olds.Slice().At(i).Str() + " -> " + news.Slice().At(i).Str()
	}
	return out
}

func TestFiltering(t *testing.T) {
	pod := objectReference{Resource: "pods", Namespace: "default", Name: "p", APIVersion: "v1"}
	tests := []struct {
		name   string
		mutate func(*Settings)
		ev     Event
		reason string // "" means the event becomes a span
	}{
		{"a completed write becomes a span", nil, event("a", "create", "alice", pod, 201), ""},
		{"a panicked write becomes a span", nil, event("a", "update", "alice", pod, 500, func(ev *Event) { ev.Stage = stagePanic }), ""},
		{"the RequestReceived stage is not a span", nil, event("a", "create", "alice", pod, 0, func(ev *Event) { ev.Stage = "RequestReceived" }), reasonStage},
		{"the ResponseStarted stage of a watch is not a span", nil, event("a", "watch", "alice", pod, 200, func(ev *Event) { ev.Stage = "ResponseStarted" }), reasonStage},
		{"reads are off by default", nil, event("a", "get", "alice", pod, 200), reasonReadVerb},
		{"reads can be turned on", func(c *Settings) { c.IncludeReadVerbs = true }, event("a", "list", "alice", pod, 200), ""},
		{"non-resource requests have no object", nil, event("a", "create", "alice", pod, 200, func(ev *Event) { ev.ObjectRef = nil }), reasonNonResource},
		{"leases are excluded by default", nil, event("a", "update", "kubelet", objectReference{Resource: "leases", APIGroup: "coordination.k8s.io", Name: "n"}, 200), reasonExcludedResource},
		{"core events are excluded by default", nil, event("a", "create", "kubelet", objectReference{Resource: "events", Name: "e"}, 201), reasonExcludedResource},
		{"a group wildcard excludes every resource of the group", func(c *Settings) { c.ExcludeResources = []GroupResource{{Group: "apps", Resource: "*"}} }, event("a", "update", "x", deployRef("1"), 200), reasonExcludedResource},
		{"a subresource entry excludes only that subresource", func(c *Settings) { c.ExcludeResources = []GroupResource{{Resource: "pods/status"}} }, event("a", "patch", "kwok", objectReference{Resource: "pods", Name: "p", Subresource: "status"}, 200), reasonExcludedResource},
		{"a subresource entry leaves the parent alone", func(c *Settings) { c.ExcludeResources = []GroupResource{{Resource: "pods/status"}} }, event("a", "patch", "kwok", pod, 200), ""},
		{"user agents are excluded by prefix", func(c *Settings) { c.ExcludeUserAgents = []string{"test/"} }, event("a", "create", "alice", pod, 201), reasonExcludedUserAgent},
		{"an event without audit ID is dropped as invalid", nil, event("", "create", "alice", pod, 201), reasonInvalidEvent},
		{"an unknown verb is not a span", nil, event("a", "proxy", "alice", pod, 200), reasonVerb},
		{"a server-side dry run is not a span", nil, event("a", "create", "alice", pod, 201, withURI("/api/v1/namespaces/default/pods?dryRun=All")), reasonDryRun},
		{"a dry run among other parameters is not a span", nil, event("a", "patch", "alice", pod, 200, withURI("/api/v1/namespaces/default/pods/p?fieldManager=kubectl-client-side-apply&dryRun=All&timeout=10s")), reasonDryRun},
		{"an empty dryRun parameter is a real write", nil, event("a", "create", "alice", pod, 201, withURI("/api/v1/namespaces/default/pods?dryRun=")), ""},
		{"dryRun in a path or another parameter's value is a real write", nil, event("a", "create", "alice", pod, 201, withURI("/api/v1/namespaces/dryRun=x/pods?fieldManager=dryRun=All")), ""},
		{"a resource that is not a lower-case plural is malformed (Secrets is no secrets to redact)", nil, event("a", "create", "alice", objectReference{Resource: "Secrets", Namespace: "default", Name: "s"}, 201), reasonInvalidEvent},
		{"a resource with a path in it is malformed", nil, event("a", "create", "alice", objectReference{Resource: "secrets/..", Namespace: "default", Name: "s"}, 201), reasonInvalidEvent},
		{"a resource with a dot is malformed", nil, event("a", "create", "alice", objectReference{Resource: "secrets.v1", Namespace: "default", Name: "s"}, 201), reasonInvalidEvent},
		{"an API group that is not a lower-case DNS name is malformed", nil, event("a", "update", "x", objectReference{Resource: "deployments", APIGroup: "Apps", Name: "d"}, 200), reasonInvalidEvent},
		{"an API group with an empty label is malformed", nil, event("a", "update", "x", objectReference{Resource: "widgets", APIGroup: "example..com", Name: "w"}, 200), reasonInvalidEvent},
		{"a custom resource's plural with a digit and a dash is a resource", nil, event("a", "create", "x", objectReference{Resource: "v2-widgets", APIGroup: "example.com", Name: "w"}, 201), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testConverter(func(cfg *Settings) {
				if tt.mutate != nil {
					tt.mutate(cfg)
				}
			})
			td, st := convertOne(t, c, tt.ev)
			if tt.reason == "" {
				if td.SpanCount() != 1 || len(st.filtered)+len(st.dropped) != 0 {
					t.Fatalf("spans = %d, filtered = %v, dropped = %v; want one span", td.SpanCount(), st.filtered, st.dropped)
				}
				return
			}
			if td.SpanCount() != 0 || st.filtered[tt.reason]+st.dropped[tt.reason] != 1 {
				t.Fatalf("spans = %d, filtered = %v, dropped = %v; want it counted as %q", td.SpanCount(), st.filtered, st.dropped, tt.reason)
			}
		})
	}
}

func TestSpanNames(t *testing.T) {
	tests := []struct {
		name, user, verb, sub string
		st                    status
		want                  string
	}{
		{"a controller's create is the verb and the resource", "system:serviceaccount:kube-system:replicaset-controller", "create", "", status{Code: 201}, "create pods"},
		{"a subresource follows the resource", "system:kube-scheduler", "create", "binding", status{Code: 201}, "create pods/binding"},
		{"a failure is in the status, not the name", "alice", "patch", "", status{Code: 409, Reason: "Conflict"}, "patch pods"},
		{"a failure without reason", "alice", "delete", "", status{Code: 404}, "delete pods"},
		{"a node's user is not in the name", "system:node:kwok-node-0", "patch", "status", status{Code: 200}, "patch pods/status"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ref := objectReference{Resource: "pods", Namespace: "default", Name: "p", UID: "u", APIVersion: "v1", Subresource: tt.sub}
			s := onlySpan(t, must(convertOne(t, testConverter(), event("a", tt.verb, tt.user, ref, tt.st.Code, withStatus(tt.st)))))
			if s.Name() != tt.want {
				t.Fatalf("name = %q, want %q", s.Name(), tt.want)
			}
			if got := attrStr(s.Attributes(), model.AttrUserName); got != tt.user {
				t.Fatalf("user.name = %q, want the full name %q", got, tt.user)
			}
			if failed := tt.st.Code >= 400; failed != (s.Status().Code() == ptrace.StatusCodeError) {
				t.Fatalf("status %v for HTTP %d", s.Status().Code(), tt.st.Code)
			}
		})
	}
}

// TestIdentityIsOnTheResource: the object's identity is on the Resource of its spans (one
// ResourceSpans per object, with the semantic-convention names of its kind), the owner on the
// span, and resource and scope carry the span model's schema URL.
func TestIdentityIsOnTheResource(t *testing.T) {
	ref := objectReference{Resource: "pods", Namespace: "default", APIVersion: "v1"}
	resp := func(name, uid string) string {
		return `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"` + name + `","namespace":"default","uid":"` + uid + `","resourceVersion":"7",
			"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"rs","uid":"rs-1","controller":true}]}}`
	}
	td := must(convertOne(t, testConverter(),
		event("a1", "create", "system:serviceaccount:kube-system:replicaset-controller", ref, 201, withResponse(resp("p1", "u1"))),
		event("a2", "create", "system:serviceaccount:kube-system:replicaset-controller", ref, 201, withResponse(resp("p2", "u2"))),
		event("a3", "patch", "system:node:n1", objectReference{Resource: "pods", Namespace: "default", Name: "p1", UID: "u1", APIVersion: "v1", Subresource: "status"}, 200)))
	if td.ResourceSpans().Len() != 2 {
		t.Fatalf("resources = %d, want one per object", td.ResourceSpans().Len())
	}
	rs := td.ResourceSpans().At(0)
	want := map[string]any{
		model.AttrClusterName: "c1", model.AttrServiceName: "Pod", model.AttrObjectAPIGroup: "", model.AttrObjectAPIVersion: "v1",
		model.AttrObjectResource: "pods", model.AttrObjectKind: "Pod", model.AttrNamespaceName: "default", model.AttrObjectName: "p1",
		model.AttrObjectUID: "u1", "k8s.pod.name": "p1", "k8s.pod.uid": "u1",
	}
	if got := rs.Resource().Attributes().AsRaw(); !reflect.DeepEqual(got, want) {
		t.Fatalf("resource = %v, want %v", got, want)
	}
	if rs.SchemaUrl() != model.SchemaURL || rs.ScopeSpans().At(0).SchemaUrl() != model.SchemaURL {
		t.Fatal("resource and scope carry the span model's schema URL")
	}
	spans := rs.ScopeSpans().At(0).Spans()
	if spans.Len() != 2 {
		t.Fatalf("pod p1's resource holds %d spans, want its create and its status patch", spans.Len())
	}
	for _, s := range spans.All() {
		for _, key := range []string{model.AttrObjectName, model.AttrObjectUID, model.AttrObjectKind, model.AttrNamespaceName, model.AttrClusterName, "k8s.pod.name"} {
			if _, ok := s.Attributes().Get(key); ok {
				t.Errorf("%s: identity attribute %s on the span", s.Name(), key)
			}
		}
	}
	if attrStr(spans.At(0).Attributes(), model.AttrOwnerUID) != "rs-1" {
		t.Fatal("the owner a body names goes on the span")
	}
}

func must(td ptrace.Traces, _ Stats) ptrace.Traces { return td }

func TestIdentityAndIDs(t *testing.T) {
	t.Run("a generateName create takes name and UID from the response and the owner from ownerReferences", func(t *testing.T) {
		ref := objectReference{Resource: "pods", Namespace: "default", APIVersion: "v1"}
		resp := `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"demo-abc","generateName":"demo-","namespace":"default","uid":"p-1","resourceVersion":"7",
			"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"not-me","uid":"x"},{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"demo-6d4b","uid":"rs-1","controller":true}]}}`
		s := onlySpan(t, must(convertOne(t, testConverter(), event("a1", "create", "system:serviceaccount:kube-system:replicaset-controller", ref, 201, withResponse(resp)))))
		a := s.Attributes()
		for key, want := range map[string]string{
			model.AttrObjectName: "demo-abc", model.AttrObjectUID: "p-1", model.AttrObjectKind: "Pod", model.AttrObjectAPIVersion: "v1",
			model.AttrOwnerKind: "ReplicaSet", model.AttrOwnerName: "demo-6d4b", model.AttrOwnerUID: "rs-1", model.AttrOwnerAPIVersion: "apps/v1",
			model.AttrObjectNewRV: "7", model.AttrSpanType: model.SpanTypeAudit, model.AttrClientAddress: "10.0.0.7", model.AttrURLPath: "/api/v1/namespaces/default/pods",
		} {
			if got := attrStr(a, key); got != want {
				t.Errorf("%s = %q, want %q", key, got, want)
			}
		}
		key := model.UIDKey("c1", "p-1")
		w := model.WindowStart(t0, model.DefaultWindow)
		if s.TraceID() != model.ObjectTraceID(key, w) || s.ParentSpanID() != model.ObjectSpanID(key, w) || s.SpanID() != model.AuditSpanID("a1") {
			t.Fatal("IDs must be derived from the object key, the window and the audit ID")
		}
		if _, ok := spanEvent(s, model.EventObjectSnapshot); !ok {
			t.Fatal("a create carries a snapshot")
		}
	})
	t.Run("a binding is activity on the Pod it binds", func(t *testing.T) {
		ref := objectReference{Resource: "pods", Namespace: "default", Name: "demo-abc", UID: "p-1", APIVersion: "v1", Subresource: "binding"}
		resp := `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","code":201}`
		td := must(convertOne(t, testConverter(), event("b1", "create", "system:kube-scheduler", ref, 201, withResponse(resp))))
		s := onlySpan(t, td)
		if attrStr(s.Attributes(), model.AttrObjectKind) != "Pod" || attrStr(s.Attributes(), model.AttrObjectUID) != "p-1" || attrStr(s.Attributes(), model.AttrAuditSubresource) != "binding" {
			t.Fatalf("attributes = %v", s.Attributes().AsRaw())
		}
		if svc := attrStr(td.ResourceSpans().At(0).Resource().Attributes(), model.AttrServiceName); svc != "Pod" {
			t.Fatalf("service.name = %q, want Pod", svc)
		}
		if _, ok := spanEvent(s, model.EventObjectSnapshot); ok {
			t.Fatal("a binding is not a create of the Pod: no snapshot")
		}
	})
	t.Run("without a body the kind comes from the built-in table, else the resource stands in", func(t *testing.T) {
		c := testConverter()
		td := must(convertOne(t, c,
			event("m1", "delete", "alice", objectReference{Resource: "statefulsets", APIGroup: "apps", Namespace: "ns", Name: "db"}, 200, func(ev *Event) { ev.Level = "Metadata" }),
			event("m2", "delete", "alice", objectReference{Resource: "widgets", APIGroup: "example.com", Namespace: "ns", Name: "w"}, 200)))
		spans := allSpans(td)
		if attrStr(spans[0].Attributes(), model.AttrObjectKind) != "StatefulSet" || attrStr(spans[1].Attributes(), model.AttrObjectKind) != "widgets" {
			t.Fatalf("kinds = %s, %s", attrStr(spans[0].Attributes(), model.AttrObjectKind), attrStr(spans[1].Attributes(), model.AttrObjectKind))
		}
		if key := model.Key((model.Object{Cluster: "c1", Group: "apps", Resource: "statefulsets", Namespace: "ns", Name: "db"}).NameKey()); spans[0].TraceID() != model.ObjectTraceID(key, model.WindowStart(t0, model.DefaultWindow)) {
			t.Fatal("without a UID the name key derives the IDs")
		}
	})
	// The apiserver's request info takes /api/v1/namespaces/{name} for a namespace path, so
	// every request on a Namespace but its create names the Namespace as its own namespace.
	t.Run("a cluster-scoped object has no namespace even when objectRef names one", func(t *testing.T) {
		c := testConverter()
		create := objectReference{Resource: "namespaces", Name: "team-a", APIVersion: "v1"}
		later := objectReference{Resource: "namespaces", Namespace: "team-a", Name: "team-a", APIVersion: "v1"}
		resp := `{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"team-a","uid":"ns-1","resourceVersion":"3"}}`
		td := must(convertOne(t, c,
			event("n1", "create", "alice", create, 201, withResponse(resp)),
			event("n2", "delete", "alice", later, 200, func(ev *Event) { ev.Level = "Metadata" })))
		spans := allSpans(td)
		if len(spans) != 2 {
			t.Fatalf("spans = %d", len(spans))
		}
		for _, s := range spans {
			// k8s.namespace.name of a Namespace is its own name (semantic conventions); its
			// identity has no namespace.
			if got := attrStr(s.Attributes(), model.AttrNamespaceName); got != "team-a" {
				t.Errorf("%s: k8s.namespace.name = %q, want the Namespace's own name", s.Name(), got)
			}
		}
		for _, rs := range td.ResourceSpans().All() {
			if o, _ := model.ObjectFromAttributes(rs.Resource().Attributes(), pcommon.NewMap()); o.Namespace != "" || o.Name != "team-a" {
				t.Errorf("a Namespace's identity = %+v", o)
			}
		}
		if attrStr(spans[1].Attributes(), model.AttrObjectUID) != "ns-1" || spans[1].TraceID() != spans[0].TraceID() {
			t.Fatal("the delete must join the Namespace its create named (same name key, so the cached UID)")
		}
	})
	// A deletion that removed the object at once answers with a Status naming its UID. Read late
	// (a log delivery that reorders), after the name's next holder was created, the delete
	// still belongs to the object it deleted, not to the one the cache now knows by that name;
	// and a delete of an object the cache never saw gets its UID too.
	t.Run("a delete answered with a Status joins the UID in its details", func(t *testing.T) {
		c := testConverter()
		ref := objectReference{Resource: "configmaps", Namespace: "ns", Name: "cfg", APIVersion: "v1"}
		cm := func(uid, rv string) string {
			return `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cfg","namespace":"ns","uid":"` + uid + `","resourceVersion":"` + rv + `"}}`
		}
		gone := func(uid string) eventOpt {
			return withResponse(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","details":{"name":"cfg","kind":"configmaps","uid":"` + uid + `"}}`)
		}
		spans := allSpans(must(convertOne(t, c,
			event("c1", "create", "alice", ref, 201, withResponse(cm("old", "1"))),
			event("c2", "create", "alice", ref, 201, withResponse(cm("new", "3")), at(2*time.Second)),
			event("d1", "delete", "alice", ref, 200, gone("old"), at(time.Second)),
			event("d9", "delete", "alice", objectReference{Resource: "configmaps", Namespace: "ns", Name: "unseen", APIVersion: "v1"}, 200,
				withResponse(`{"kind":"Status","apiVersion":"v1","status":"Success","details":{"name":"unseen","kind":"configmaps","uid":"u-unseen"}}`)),
			event("d8", "delete", "alice", objectReference{Resource: "configmaps", Namespace: "ns", Name: "other", APIVersion: "v1"}, 200,
				withResponse(`{"kind":"Status","apiVersion":"v1","status":"Success","details":{"name":"not-other","kind":"configmaps","uid":"u-wrong"}}`)))))
		byID := map[string]ptrace.Span{}
		for _, sp := range spans {
			byID[attrStr(sp.Attributes(), model.AttrAuditID)] = sp
		}
		if len(byID) != 5 {
			t.Fatalf("spans of %d audit IDs, want 5", len(byID))
		}
		// d8's details name another object: not taken (the cache knows no "other" either).
		for id, want := range map[string]string{"c1": "old", "c2": "new", "d1": "old", "d9": "u-unseen", "d8": "<absent>"} {
			if got := attrStr(byID[id].Attributes(), model.AttrObjectUID); got != want {
				t.Errorf("%s: k8s.object.uid = %q, want %q", id, got, want)
			}
		}
		if byID["d1"].TraceID() != byID["c1"].TraceID() || byID["d1"].TraceID() == byID["c2"].TraceID() {
			t.Error("the late delete must be in the deleted object's trace, not its namesake's")
		}
	})
	t.Run("a failure is an error with the Status reason, message and causes", func(t *testing.T) {
		st := status{Code: 422, Reason: "Invalid", Message: `Deployment.apps "demo" is invalid`,
			Details: &statusDetails{Causes: []statusCause{{Type: "FieldValueInvalid", Message: "Invalid value: -1", Field: "spec.replicas"}}}}
		s := onlySpan(t, must(convertOne(t, testConverter(), event("e1", "update", "alice", deployRef("5"), 422, withStatus(st)))))
		if s.Status().Code() != ptrace.StatusCodeError || s.Status().Message() != `Invalid: Deployment.apps "demo" is invalid` {
			t.Fatalf("status = %v %q", s.Status().Code(), s.Status().Message())
		}
		e, ok := spanEvent(s, model.EventAuditError)
		if !ok {
			t.Fatal("no error event")
		}
		if got := attrStr(e.Attributes(), attrErrorCauses); got != `["spec.replicas: Invalid value: -1 (FieldValueInvalid)"]` {
			t.Fatalf("causes = %s", got)
		}
		if attrStr(s.Attributes(), model.AttrHTTPStatusCode) != "422" {
			t.Fatal("status code attribute")
		}
	})
}

func TestDiffs(t *testing.T) {
	t.Run("an update shows changed paths old to new without managedFields, resourceVersion or generation", func(t *testing.T) {
		c := testConverter()
		_, _ = convertOne(t, c, event("c", "create", "alice", deployRef(""), 201, withResponse(deployment("10", 2, "nginx:1"))))
		td, _ := convertOne(t, c, event("u", "update", "alice", deployRef("10"), 200, at(time.Second), withResponse(deployment("11", 4, "nginx:2"))))
		got := diffOf(t, onlySpan(t, td))
		want := map[string]string{"spec.replicas": "2 -> 4", "spec.template.spec.containers[name=web].image": `"nginx:1" -> "nginx:2"`}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("diff = %v, want %v", got, want)
		}
	})
	t.Run("a patch carries its patch body and the diff", func(t *testing.T) {
		c := testConverter()
		_, _ = convertOne(t, c, event("c", "create", "alice", deployRef(""), 201, withResponse(deployment("10", 2, "nginx:1"))))
		td, _ := convertOne(t, c, event("p", "patch", "alice", deployRef(""), 200, withRequest(`{"spec": {"replicas": 3}}`), withResponse(deployment("12", 3, "nginx:1"))))
		s := onlySpan(t, td)
		e, ok := spanEvent(s, eventAuditPatch)
		if !ok || attrStr(e.Attributes(), model.AttrAuditPatch) != `{"spec":{"replicas":3}}` {
			t.Fatalf("patch event = %v", e.Attributes().AsRaw())
		}
		if got := diffOf(t, s); got["spec.replicas"] != "2 -> 3" || len(got) != 1 {
			t.Fatalf("diff = %v", got)
		}
	})
	t.Run("the same update delivered twice shows the same diff twice", func(t *testing.T) {
		c := testConverter()
		create := event("c", "create", "alice", deployRef(""), 201, withResponse(deployment("10", 2, "nginx:1")))
		update := event("u", "update", "alice", deployRef("10"), 200, withResponse(deployment("11", 4, "nginx:1")))
		_, _ = convertOne(t, c, create)
		first := diffOf(t, onlySpan(t, must(convertOne(t, c, update))))
		again := diffOf(t, onlySpan(t, must(convertOne(t, c, update))))
		if fmt.Sprint(first) != fmt.Sprint(again) || first["spec.replicas"] != "2 -> 4" {
			t.Fatalf("first = %v, again = %v", first, again)
		}
	})
	t.Run("a no-op update (new auditID, unchanged resourceVersion) has no diff and says it changed nothing", func(t *testing.T) {
		c := testConverter()
		_, _ = convertOne(t, c, event("c", "create", "alice", deployRef(""), 201, withResponse(deployment("10", 2, "nginx:1"))))
		update := event("u", "update", "alice", deployRef("10"), 200, withResponse(deployment("11", 4, "nginx:1")))
		if got := diffOf(t, onlySpan(t, must(convertOne(t, c, update)))); got["spec.replicas"] != "2 -> 4" {
			t.Fatalf("diff = %v", got)
		}
		noop := event("n", "update", "bob", deployRef("11"), 200, at(time.Second), withResponse(deployment("11", 4, "nginx:1")))
		s := onlySpan(t, must(convertOne(t, c, noop)))
		if e, ok := spanEvent(s, model.EventObjectDiff); ok {
			t.Fatalf("a no-op update got the previous write's diff: %v", e.Attributes().AsRaw())
		}
		if v, ok := s.Attributes().Get(attrAuditNoop); !ok || !v.Bool() {
			t.Fatalf("%s = %v, want true", attrAuditNoop, s.Attributes().AsRaw())
		}
		// The write that did change the object, delivered again, still shows its diff and no flag.
		again := onlySpan(t, must(convertOne(t, c, update)))
		if got := diffOf(t, again); got["spec.replicas"] != "2 -> 4" {
			t.Fatalf("redelivered diff = %v", got)
		}
		if _, ok := again.Attributes().Get(attrAuditNoop); ok {
			t.Fatal("a redelivery is not a no-op")
		}
		// A no-op moved no resourceVersion, so it never wins a race: a 409 based on 11 has no winner.
		lost := onlySpan(t, must(convertOne(t, c, event("l", "update", "carol", deployRef("11"), 409, withStatus(status{Code: 409, Reason: "Conflict"})))))
		if lost.Links().Len() != 0 {
			t.Fatalf("a 409 was linked to %q, a no-op write", attrStr(lost.Links().At(0).Attributes(), model.AttrAuditID))
		}
	})
	t.Run("an update arriving after a newer one does not move the cache backwards", func(t *testing.T) {
		c := testConverter()
		_, _ = convertOne(t, c, event("c", "create", "alice", deployRef(""), 201, withResponse(deployment("10", 2, "a"))))
		// u2 (11 -> 12, replicas 3 -> 5) arrives before u1 (10 -> 11, 2 -> 3): diffed against
		// the cached body at 10 it would claim 2 -> 5, u1's change blamed on u2's writer.
		td, st := convertOne(t, c, event("u2", "update", "alice", deployRef("11"), 200, withResponse(deployment("12", 5, "a"))))
		if n := st.SkippedDiffs(diffSkippedBaseNotSeen); n != 1 {
			t.Fatalf("skipped diffs counted %d, want one base_not_seen", n)
		}
		s := onlySpan(t, td)
		if e, ok := spanEvent(s, model.EventObjectDiff); ok {
			t.Fatalf("an update based on an unseen version got a diff: %v", e.Attributes().AsRaw())
		}
		if got := attrStr(s.Attributes(), attrDiffSkipped); got != diffSkippedBaseNotSeen {
			t.Fatalf("%s = %s, want %s", attrDiffSkipped, got, diffSkippedBaseNotSeen)
		}
		td, st = convertOne(t, c, event("u1", "update", "alice", deployRef("10"), 200, withResponse(deployment("11", 3, "a"))))
		if n := st.SkippedDiffs(diffSkippedOutOfOrder); n != 1 {
			t.Fatalf("skipped diffs counted %d, want one out_of_order", n)
		}
		s = onlySpan(t, td)
		if _, ok := spanEvent(s, model.EventObjectDiff); ok {
			t.Fatal("a stale update must not be diffed against a newer body")
		}
		if got := attrStr(s.Attributes(), attrDiffSkipped); got != diffSkippedOutOfOrder {
			t.Fatalf("%s = %s, want %s", attrDiffSkipped, got, diffSkippedOutOfOrder)
		}
		s = onlySpan(t, must(convertOne(t, c, event("u3", "update", "alice", deployRef("12"), 200, withResponse(deployment("13", 6, "a"))))))
		if got := diffOf(t, s); got["spec.replicas"] != "5 -> 6" {
			t.Fatalf("diff = %v", got)
		}
	})
	t.Run("diffs are off with a zero cache", func(t *testing.T) {
		c := testConverter(func(cfg *Settings) { cfg.DiffCacheSize = 0 })
		_, _ = convertOne(t, c, event("c", "create", "alice", deployRef(""), 201, withResponse(deployment("10", 2, "a"))))
		s := onlySpan(t, must(convertOne(t, c, event("u", "update", "alice", deployRef("10"), 200, withResponse(deployment("11", 3, "a"))))))
		if _, ok := spanEvent(s, model.EventObjectDiff); ok {
			t.Fatal("no cache, no diff")
		}
	})
	t.Run("the cache holds at most diff_cache_size objects, least recently used out first", func(t *testing.T) {
		c := testConverter(func(cfg *Settings) { cfg.DiffCacheSize = 2 })
		for i := range 3 {
			ref := objectReference{Resource: "configmaps", Namespace: "ns", Name: fmt.Sprintf("cm-%d", i), APIVersion: "v1"}
			body := fmt.Sprintf(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm-%d","namespace":"ns","uid":"u%d","resourceVersion":"1"}}`, i, i)
			_, _ = convertOne(t, c, event(fmt.Sprint("c", i), "create", "alice", ref, 201, withResponse(body)))
		}
		if n := c.cache.len(); n != 2 {
			t.Fatalf("cache holds %d objects, want 2", n)
		}
		if c.cache.entries["c1/name//configmaps/ns/cm-0"] != nil {
			t.Fatal("the oldest object must be evicted")
		}
	})
}

// TestDiffBase holds a diff to the write's own base: a write that names the resourceVersion it
// was based on is diffed only when the cache holds that version, and one that names none says
// which version its diff is relative to.
func TestDiffBase(t *testing.T) {
	scaleRef := func(rv string) objectReference {
		r := deployRef(rv)
		r.Subresource = "scale"
		return r
	}
	scale := func(rv string, replicas int) string {
		return fmt.Sprintf(`{"kind":"Scale","apiVersion":"autoscaling/v1","metadata":{"name":"demo","namespace":"default","uid":"d-1","resourceVersion":%q},"spec":{"replicas":%d}}`, rv, replicas)
	}
	// Every case starts from the create of the Deployment at resourceVersion 10 with 2 replicas.
	created := event("c", "create", "alice", deployRef(""), 201, withResponse(deployment("10", 2, "a")))
	tests := []struct {
		name   string
		writes []Event // the last one's span is checked
		diff   map[string]string
		skip   string // attrDiffSkipped, "" for none
		base   string // attrDiffBase on the diff event, "" for none
	}{
		{
			name:   "an update based on the cached version is diffed",
			writes: []Event{event("u", "update", "bob", deployRef("10"), 200, withResponse(deployment("11", 4, "a")))},
			diff:   map[string]string{"spec.replicas": "2 -> 4"},
		},
		{
			name:   "an update based on a version not seen gets no diff and says why",
			writes: []Event{event("u", "update", "bob", deployRef("11"), 200, withResponse(deployment("12", 5, "a")))},
			skip:   diffSkippedBaseNotSeen,
		},
		{
			name: "a patch whose precondition is the cached version is diffed",
			writes: []Event{event("p", "patch", "bob", deployRef(""), 200,
				withRequest(`{"metadata":{"resourceVersion":"10"},"spec":{"replicas":3}}`), withResponse(deployment("11", 3, "a")))},
			diff: map[string]string{"spec.replicas": "2 -> 3"},
		},
		{
			name: "a patch whose precondition is not the cached version gets no diff",
			writes: []Event{event("p", "patch", "bob", deployRef(""), 200,
				withRequest(`{"metadata":{"resourceVersion":"11"},"spec":{"replicas":3}}`), withResponse(deployment("12", 3, "a")))},
			skip: diffSkippedBaseNotSeen,
		},
		{
			name: "a patch without precondition is diffed against the cached version and names it",
			writes: []Event{event("p", "patch", "bob", deployRef(""), 200,
				withRequest(`{"spec":{"replicas":3}}`), withResponse(deployment("12", 3, "a")))},
			diff: map[string]string{"spec.replicas": "2 -> 3"},
			base: "10",
		},
		{
			name:   "an unconditional update (no resourceVersion) names its base",
			writes: []Event{event("u", "update", "bob", deployRef(""), 200, withResponse(deployment("11", 4, "a")))},
			diff:   map[string]string{"spec.replicas": "2 -> 4"},
			base:   "10",
		},
		{
			name:   "a scale update based on a version not seen gets no diff",
			writes: []Event{event("s", "update", "hpa", scaleRef("11"), 200, withResponse(scale("12", 5)))},
			skip:   diffSkippedBaseNotSeen,
		},
		{
			name:   "a scale patch without precondition names its base",
			writes: []Event{event("s", "patch", "bob", scaleRef(""), 200, withRequest(`{"spec":{"replicas":4}}`), withResponse(scale("11", 4)))},
			diff:   map[string]string{"spec.replicas": "2 -> 4"},
			base:   "10",
		},
		{
			name: "a skipped write delivered again says so again",
			writes: []Event{
				event("u", "update", "bob", deployRef("11"), 200, withResponse(deployment("12", 5, "a"))),
				event("u", "update", "bob", deployRef("11"), 200, withResponse(deployment("12", 5, "a"))),
			},
			skip: diffSkippedBaseNotSeen,
		},
		{
			name: "a patch without precondition delivered again names the same base",
			writes: []Event{
				event("p", "patch", "bob", deployRef(""), 200, withRequest(`{"spec":{"replicas":3}}`), withResponse(deployment("12", 3, "a"))),
				event("p", "patch", "bob", deployRef(""), 200, withRequest(`{"spec":{"replicas":3}}`), withResponse(deployment("12", 3, "a"))),
			},
			diff: map[string]string{"spec.replicas": "2 -> 3"},
			base: "10",
		},
		{
			name: "the write after a skipped one is diffed against the skipped one's body",
			writes: []Event{
				event("u1", "update", "bob", deployRef("11"), 200, withResponse(deployment("12", 5, "a"))),
				event("u2", "update", "carol", deployRef("12"), 200, withResponse(deployment("13", 6, "a"))),
			},
			diff: map[string]string{"spec.replicas": "5 -> 6"},
		},
		{
			name: "a scale write skipped leaves the cached body: the write based on it is skipped too",
			writes: []Event{
				event("s", "update", "hpa", scaleRef("11"), 200, withResponse(scale("12", 5))),
				event("u", "update", "carol", deployRef("12"), 200, withResponse(deployment("13", 5, "b"))),
			},
			skip: diffSkippedBaseNotSeen,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testConverter()
			_, _ = convertOne(t, c, created)
			var s ptrace.Span
			for i, w := range tt.writes {
				w.RequestReceivedTimestamp = t0.Add(time.Duration(i+1) * time.Second)
				w.StageTimestamp = w.RequestReceivedTimestamp.Add(time.Millisecond)
				s = onlySpan(t, must(convertOne(t, c, w)))
			}
			if got := attrStr(s.Attributes(), attrDiffSkipped); got != cmp.Or(tt.skip, "<absent>") {
				t.Errorf("%s = %s, want %s", attrDiffSkipped, got, cmp.Or(tt.skip, "<absent>"))
			}
			e, ok := spanEvent(s, model.EventObjectDiff)
			if tt.diff == nil {
				if ok {
					t.Fatalf("diff = %v, want none", e.Attributes().AsRaw())
				}
				return
			}
			if got := diffOf(t, s); fmt.Sprint(got) != fmt.Sprint(tt.diff) {
				t.Fatalf("diff = %v, want %v", got, tt.diff)
			}
			if got := attrStr(e.Attributes(), attrDiffBase); got != cmp.Or(tt.base, "<absent>") {
				t.Fatalf("%s = %s, want %s", attrDiffBase, got, cmp.Or(tt.base, "<absent>"))
			}
		})
	}
}

// TestDiffBaseNeverHeld: a change to an object whose body this collector never held (another
// replica took its create, or it predates the collector) has no diff and says base_not_seen,
// whether or not it names a base, so that a reader tells "not known here" from "nothing changed";
// a redelivery says so again, and the next write is diffed against the body it brought.
func TestDiffBaseNeverHeld(t *testing.T) {
	tests := []struct {
		name string
		w    Event
	}{
		{"a status patch without precondition", event("p", "patch", "kubelet", deployRef(""), 200,
			withRequest(`{"status":{"replicas":2}}`), withResponse(deployment("21", 2, "a")))},
		{"an update naming its base", event("u", "update", "bob", deployRef("20"), 200, withResponse(deployment("21", 3, "a")))},
		{"an unconditional update", event("u", "update", "bob", deployRef(""), 200, withResponse(deployment("21", 3, "a")))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testConverter()
			for i, want := range []int64{1, 0} { // the second is a redelivery: said again, not counted again
				td, st := convertOne(t, c, tt.w)
				s := onlySpan(t, td)
				if got := attrStr(s.Attributes(), attrDiffSkipped); got != diffSkippedBaseNotSeen {
					t.Fatalf("delivery %d: %s = %s, want %s", i+1, attrDiffSkipped, got, diffSkippedBaseNotSeen)
				}
				if e, ok := spanEvent(s, model.EventObjectDiff); ok {
					t.Fatalf("delivery %d: diff = %v, want none", i+1, e.Attributes().AsRaw())
				}
				if n := st.SkippedDiffs(diffSkippedBaseNotSeen); int64(n) != want {
					t.Fatalf("delivery %d: skipped diffs counted %d, want %d", i+1, n, want)
				}
			}
			next := event("n", "update", "carol", deployRef("21"), 200, withResponse(deployment("22", 7, "a")))
			next.RequestReceivedTimestamp = t0.Add(time.Second)
			next.StageTimestamp = next.RequestReceivedTimestamp.Add(time.Millisecond)
			s := onlySpan(t, must(convertOne(t, c, next)))
			if got := attrStr(s.Attributes(), attrDiffSkipped); got != "<absent>" {
				t.Fatalf("the write after: %s = %s, want none", attrDiffSkipped, got)
			}
			if _, ok := spanEvent(s, model.EventObjectDiff); !ok {
				t.Fatal("the write after is diffed against the body the first one brought")
			}
		})
	}
	t.Run("a create is not a change: no reason", func(t *testing.T) {
		c := testConverter()
		s := onlySpan(t, must(convertOne(t, c, event("c", "create", "alice", deployRef(""), 201, withResponse(deployment("10", 2, "a"))))))
		if got := attrStr(s.Attributes(), attrDiffSkipped); got != "<absent>" {
			t.Fatalf("%s = %s on a create", attrDiffSkipped, got)
		}
	})
}

// diffTrees diffs two trees as the receiver diffs bodies: encoded, indexed, diffFlat.
func diffTrees(t *testing.T, old, cur jsonscan.Tree) diffResult {
	t.Helper()
	a, okA := flatten([]byte(jsonscan.Marshal(old)), nil)
	b, okB := flatten([]byte(jsonscan.Marshal(cur)), nil)
	if !okA || !okB {
		t.Fatal("a tree did not index")
	}
	return diffFlat(&a, &b)
}

func TestDiffPaths(t *testing.T) {
	old, _ := jsonscan.ParseTree([]byte(`{"metadata":{"labels":{"app.kubernetes.io/name":"a","keep":"x"},"resourceVersion":"1","generation":1,"managedFields":[1]},"spec":{"list":[1,2,3],"gone":{"a":1}}}`))
	cur, _ := jsonscan.ParseTree([]byte(`{"metadata":{"labels":{"app.kubernetes.io/name":"b","keep":"x"},"resourceVersion":"2","generation":2,"managedFields":[2]},"spec":{"list":[1,5],"new":"v"}}`))
	d := diffTrees(t, old, cur)
	want := `metadata.labels["app.kubernetes.io/name"],spec.gone,spec.list[1],spec.list[2],spec.new`
	if d.paths() != want || d.Total != 5 {
		t.Fatalf("paths = %s (total %d), want %s", d.paths(), d.Total, want)
	}
	if d.Changes[1].Old != `{"a":1}` || d.Changes[1].New != "" || d.Changes[4].Old != "" || d.Changes[4].New != `"v"` {
		t.Fatalf("a removed or added subtree is one change with the absent side empty: %+v", d.Changes)
	}
	t.Run("lists keyed by name or type are compared by key", func(t *testing.T) {
		old, _ := jsonscan.ParseTree([]byte(`{"status":{"conditions":[{"type":"Progressing","status":"True"},{"type":"Available","status":"False"}]},
			"spec":{"containers":[{"name":"web","image":"a"},{"name":"log","image":"b"}],"ports":[{"port":80},{"port":81}]}}`))
		cur, _ := jsonscan.ParseTree([]byte(`{"status":{"conditions":[{"type":"Available","status":"True"},{"type":"Progressing","status":"True"}]},
			"spec":{"containers":[{"name":"log","image":"b"},{"name":"web","image":"c"},{"name":"proxy","image":"d"}],"ports":[{"port":80},{"port":82}]}}`))
		d := diffTrees(t, old, cur)
		want := `spec.containers[name=proxy],spec.containers[name=web].image,spec.ports[1].port,status.conditions[type=Available].status`
		if d.paths() != want {
			t.Fatalf("paths = %s, want %s: reordering is no change, unkeyed lists go by index", d.paths(), want)
		}
	})
	var many strings.Builder
	many.WriteString(`{"spec":{`)
	for i := range maxDiffPaths + 10 {
		if i > 0 {
			many.WriteByte(',')
		}
		fmt.Fprintf(&many, `"k%03d":%d`, i, i)
	}
	many.WriteString("}}")
	big, _ := jsonscan.ParseTree([]byte(many.String()))
	d = diffTrees(t, jsonscan.Tree{"spec": map[string]any{}}, big)
	if len(d.Changes) != maxDiffPaths || d.Total != maxDiffPaths+10 {
		t.Fatalf("changes = %d, total = %d: a diff is capped but counts everything", len(d.Changes), d.Total)
	}
}

func TestConflictLinksToTheWinningWrite(t *testing.T) {
	c := testConverter()
	_, _ = convertOne(t, c, event("create", "create", "alice", deployRef(""), 201, withResponse(deployment("259", 2, "a"))))
	winner := event("winner", "update", "system:serviceaccount:kube-system:deployment-controller", deployRef("259"), 200, at(time.Second), withResponse(deployment("262", 2, "a")))
	loser := event("loser", "update", "system:serviceaccount:kube-system:deployment-controller", deployRef("259"), 409, at(2*time.Second),
		withStatus(status{Code: 409, Reason: "Conflict", Message: "the object has been modified"}))
	td, _ := convertOne(t, c, winner, loser)
	spans := allSpans(td)
	if len(spans) != 2 {
		t.Fatalf("spans = %d", len(spans))
	}
	w, l := spans[0], spans[1]
	if l.Name() != "update deployments" || l.Status().Code() != ptrace.StatusCodeError || l.Links().Len() != 1 {
		t.Fatalf("loser %q has %d links", l.Name(), l.Links().Len())
	}
	link := l.Links().At(0)
	if link.SpanID() != w.SpanID() || link.TraceID() != w.TraceID() || attrStr(link.Attributes(), model.AttrLinkType) != model.LinkTypeConflict || attrStr(link.Attributes(), model.AttrAuditID) != "winner" {
		t.Fatalf("link = %v %v %v", link.SpanID(), link.TraceID(), link.Attributes().AsRaw())
	}
	if w.Links().Len() != 0 {
		t.Fatal("a successful write links nothing")
	}

	t.Run("without a write based on the same version the next write after it wins", func(t *testing.T) {
		c := testConverter()
		_, _ = convertOne(t, c, event("create", "create", "alice", deployRef(""), 201, withResponse(deployment("5", 1, "a"))))
		_, _ = convertOne(t, c, event("w1", "patch", "alice", deployRef(""), 200, withResponse(deployment("6", 2, "a"))))
		td, _ := convertOne(t, c, event("l", "update", "bob", deployRef("5"), 409, withStatus(status{Code: 409, Reason: "Conflict"})))
		s := onlySpan(t, td)
		if s.Links().Len() != 1 || attrStr(s.Links().At(0).Attributes(), model.AttrAuditID) != "w1" {
			t.Fatalf("links = %d", s.Links().Len())
		}
	})
	t.Run("AlreadyExists is not a lost race", func(t *testing.T) {
		c := testConverter()
		_, _ = convertOne(t, c, event("create", "create", "alice", deployRef(""), 201, withResponse(deployment("5", 1, "a"))))
		s := onlySpan(t, must(convertOne(t, c, event("dup", "create", "alice", deployRef("5"), 409, withStatus(status{Code: 409, Reason: "AlreadyExists"})))))
		if s.Links().Len() != 0 {
			t.Fatal("no link for AlreadyExists")
		}
	})
}

func TestDeletedObjects(t *testing.T) {
	c := testConverter()
	podRef := objectReference{Resource: "pods", Namespace: "default", Name: "phoenix", APIVersion: "v1"}
	pod := func(uid, rv string, extra string) string {
		return fmt.Sprintf(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"phoenix","namespace":"default","uid":%q,"resourceVersion":%q%s}}`, uid, rv, extra)
	}
	_, _ = convertOne(t, c, event("c1", "create", "alice", podRef, 201, withResponse(pod("u1", "1", ""))))
	graceful := onlySpan(t, must(convertOne(t, c, event("d1", "delete", "alice", podRef, 200, withResponse(pod("u1", "2", `,"deletionGracePeriodSeconds":30`))))))
	if _, ok := spanEvent(graceful, model.EventObjectSnapshot); !ok {
		t.Fatal("a delete carries a snapshot")
	}
	if e := c.cache.entries[podRef.key("c1")]; e == nil || !e.hasBody() {
		t.Fatal("a graceful deletion leaves the object, and its body, in place")
	}
	_, _ = convertOne(t, c, event("d2", "delete", "kubelet", podRef, 200, withResponse(pod("u1", "3", `,"deletionGracePeriodSeconds":0`))))
	if e := c.cache.entries[podRef.key("c1")]; e == nil || e.hasBody() || e.uid != "u1" {
		t.Fatal("a final deletion drops the body and keeps a tombstone with the UID")
	}
	late := onlySpan(t, must(convertOne(t, c, event("d3", "delete", "kubelet", podRef, 404, withStatus(status{Code: 404, Reason: "NotFound"})))))
	if attrStr(late.Attributes(), model.AttrObjectUID) != "u1" {
		t.Fatal("a late request on the name joins the deleted object's trace")
	}
	metadataCreate := onlySpan(t, must(convertOne(t, c, event("c2-metadata", "create", "alice", podRef, 201))))
	if attrStr(metadataCreate.Attributes(), model.AttrObjectUID) != "<absent>" {
		t.Fatal("a create without a body must not take the UID of the name's previous object")
	}
	again := onlySpan(t, must(convertOne(t, c, event("c2", "create", "alice", podRef, 201, withResponse(pod("u2", "5", ""))))))
	if attrStr(again.Attributes(), model.AttrObjectUID) != "u2" || again.TraceID() == late.TraceID() {
		t.Fatal("a recreated name is a new object in a new trace")
	}
}

func (r objectReference) key(cluster string) string {
	return model.Object{Cluster: cluster, Group: r.APIGroup, Resource: r.Resource, Namespace: r.Namespace, Name: r.Name}.NameKey()
}

func TestRequestDetails(t *testing.T) {
	pod := objectReference{Resource: "pods", Namespace: "default", Name: "p", UID: "u", APIVersion: "v1"}
	t.Run("an impersonated request names both users", func(t *testing.T) {
		s := onlySpan(t, must(convertOne(t, testConverter(), event("i", "delete", "admin", pod, 200, func(ev *Event) {
			ev.ImpersonatedUser = &userInfo{Username: "system:serviceaccount:ci:deployer"}
		}))))
		if attrStr(s.Attributes(), model.AttrUserName) != "admin" || attrStr(s.Attributes(), model.AttrAuditImpersonatedUser) != "system:serviceaccount:ci:deployer" {
			t.Fatalf("attributes = %v", s.Attributes().AsRaw())
		}
	})
	t.Run("a panic is an error even without a status", func(t *testing.T) {
		s := onlySpan(t, must(convertOne(t, testConverter(), event("p", "update", "alice", pod, 0, func(ev *Event) {
			ev.Stage = stagePanic
			ev.ResponseStatus = nil
		}))))
		if s.Name() != "update pods" || s.Status().Code() != ptrace.StatusCodeError || !strings.HasPrefix(s.Status().Message(), "Panic") {
			t.Fatalf("name %q, status %v", s.Name(), s.Status().Code())
		}
	})
	t.Run("the window setting derives the IDs", func(t *testing.T) {
		at := event("w", "update", "alice", pod, 200, at(50*time.Minute))
		s := onlySpan(t, must(convertOne(t, testConverter(func(cfg *Settings) { cfg.Window = time.Hour }), at)))
		w := model.WindowStart(t0.Add(50*time.Minute), time.Hour)
		if s.TraceID() != model.ObjectTraceID(model.UIDKey("c1", "u"), w) || s.ParentSpanID() != model.ObjectSpanID(model.UIDKey("c1", "u"), w) {
			t.Fatal("a one-hour window must derive the IDs from the hour")
		}
		if w.Equal(model.WindowStart(t0.Add(50*time.Minute), model.DefaultWindow)) {
			t.Fatal("the test needs a time where the two windows differ")
		}
	})
	t.Run("an end before the start is clamped to the start", func(t *testing.T) {
		s := onlySpan(t, must(convertOne(t, testConverter(), event("e", "update", "alice", pod, 200, func(ev *Event) {
			ev.StageTimestamp = ev.RequestReceivedTimestamp.Add(-time.Second)
		}))))
		if s.EndTimestamp() != s.StartTimestamp() {
			t.Fatal("end before start")
		}
	})
}

// TestBodiesLeavingTheHotSetStillDiff: a body whose index left the ring of hot indexes is
// indexed again for its next diff, and gets its index back.
func TestBodiesLeavingTheHotSetStillDiff(t *testing.T) {
	c := testConverter()
	cm := func(i int, v string) (objectReference, string) {
		ref := objectReference{Resource: "configmaps", Namespace: "ns", Name: fmt.Sprintf("cm-%d", i), APIVersion: "v1"}
		return ref, fmt.Sprintf(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm-%d","namespace":"ns","uid":"u%d","resourceVersion":"%d"},"data":{"k":%q}}`, i, i, i+10, v)
	}
	for i := range hotIndexes + 1 {
		ref, body := cm(i, "old")
		_, _ = convertOne(t, c, event(fmt.Sprint("c", i), "create", "alice", ref, 201, withResponse(body)))
	}
	first := c.cache.entries[(objectReference{Resource: "configmaps", Namespace: "ns", Name: "cm-0"}).key("c1")]
	if first == nil || first.nodes != nil || first.body == nil {
		t.Fatal("the oldest body must have left the hot set, its bytes kept")
	}
	if last := c.cache.entries[(objectReference{Resource: "configmaps", Namespace: "ns", Name: fmt.Sprint("cm-", hotIndexes)}).key("c1")]; last == nil || last.nodes == nil {
		t.Fatal("the newest body must keep its index")
	}
	ref, _ := cm(0, "")
	ref.UID = "u0"
	_, body := cm(0, "new")
	body = strings.Replace(body, `"resourceVersion":"10"`, `"resourceVersion":"9999"`, 1)
	s := onlySpan(t, must(convertOne(t, c, event("u", "update", "alice", ref, 200, withResponse(body)))))
	if got := diffOf(t, s); got["data.k"] != `"old" -> "new"` || len(got) != 1 {
		t.Fatalf("diff = %v", got)
	}
	if first.nodes == nil {
		t.Fatal("the updated body is hot again")
	}
}

// paths lists a diff's paths, comma-separated.
func (d diffResult) paths() string {
	ps := make([]string, len(d.Changes))
	for i, c := range d.Changes {
		ps[i] = c.Path
	}
	return strings.Join(ps, ",")
}

func TestLongDiffPathsAreCutLikeValues(t *testing.T) {
	c := testConverter()
	long := strings.Repeat("k", 3000)
	ref := objectReference{Resource: "configmaps", Namespace: "ns", Name: "cm", UID: "u1", APIVersion: "v1"}
	body := func(rv, v string) string {
		return fmt.Sprintf(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm","namespace":"ns","uid":"u1","resourceVersion":%q},"data":{%q:%q,"short":%q}}`, rv, long, v, v)
	}
	_, _ = convertOne(t, c, event("c", "create", "alice", ref, 201, withResponse(body("1", "a"))))
	s := onlySpan(t, must(convertOne(t, c, event("u", "update", "alice", ref, 200, withResponse(body("2", "b"))))))
	e, ok := spanEvent(s, model.EventObjectDiff)
	if !ok {
		t.Fatal("no diff event")
	}
	paths, _ := e.Attributes().Get(attrDiffPaths)
	if paths.Slice().Len() != 2 {
		t.Fatalf("paths = %v", paths.Slice().AsRaw())
	}
	cut := paths.Slice().At(0).Str()
	full := "data." + long
	if len(cut) > maxPathBytes+32 || !strings.HasPrefix(cut, full[:maxPathBytes-1]) || !strings.HasSuffix(cut, fmt.Sprintf("…(%d bytes)", len(full))) {
		t.Fatalf("a %d-byte path was exported as %d bytes: %q…", len(full), len(cut), cut[:min(len(cut), 40)])
	}
	if got := paths.Slice().At(1).Str(); got != "data.short" {
		t.Fatalf("a short path must stay whole, got %q", got)
	}
	if v, ok := e.Attributes().Get(attrDiffPathsTruncated); !ok || !v.Bool() {
		t.Fatalf("%s = %v, want true", attrDiffPathsTruncated, e.Attributes().AsRaw())
	}
	// A diff whose paths are all short carries no flag.
	_, _ = convertOne(t, c, event("dc", "create", "alice", deployRef(""), 201, withResponse(deployment("10", 1, "a"))))
	s = onlySpan(t, must(convertOne(t, c, event("du", "update", "alice", deployRef("10"), 200, withResponse(deployment("11", 2, "a"))))))
	e, ok = spanEvent(s, model.EventObjectDiff)
	if !ok {
		t.Fatal("no diff event")
	}
	if _, flagged := e.Attributes().Get(attrDiffPathsTruncated); flagged {
		t.Fatal("short paths must not be flagged")
	}
}

// invalidStrings lists every exported string of td that is not valid UTF-8, with where it is.
func invalidStrings(td ptrace.Traces) []string {
	var bad []string
	var walk func(where string, v pcommon.Value)
	walk = func(where string, v pcommon.Value) {
		switch v.Type() {
		case pcommon.ValueTypeStr:
			if !utf8.ValidString(v.Str()) {
				bad = append(bad, where)
			}
		case pcommon.ValueTypeSlice:
			for i := 0; i < v.Slice().Len(); i++ {
				walk(fmt.Sprintf("%s[%d]", where, i), v.Slice().At(i))
			}
		case pcommon.ValueTypeMap:
			v.Map().Range(func(k string, x pcommon.Value) bool { walk(where+"."+k, x); return true })
		}
	}
	attrs := func(where string, m pcommon.Map) {
		m.Range(func(k string, v pcommon.Value) bool { walk(where+" "+k, v); return true })
	}
	for _, s := range allSpans(td) {
		if !utf8.ValidString(s.Name()) || !utf8.ValidString(s.Status().Message()) {
			bad = append(bad, "span name or status of "+s.Name())
		}
		attrs("span", s.Attributes())
		for i := 0; i < s.Events().Len(); i++ {
			attrs(s.Events().At(i).Name(), s.Events().At(i).Attributes())
		}
		for i := 0; i < s.Links().Len(); i++ {
			attrs("link", s.Links().At(i).Attributes())
		}
	}
	return bad
}

func TestExportedStringsAreValidUTF8(t *testing.T) {
	c := testConverter()
	ref := objectReference{Resource: "configmaps", Namespace: "ns", Name: "cm", UID: "u1", APIVersion: "v1"}
	cm := func(rv, v string) string {
		return `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm","namespace":"ns","uid":"u1","resourceVersion":"` + rv + `"},"data":{"k":"` + v + `"}}`
	}
	_, _ = convertOne(t, c, event("c", "create", "alice", ref, 201, withResponse(cm("1", "a\xffb"))))
	patch := "{\"data\":{\"k\":\"x\xc3\x28y\",\"\xfe\":\"z\"}}"
	td, _ := convertOne(t, c,
		event("p", "patch", "alice", ref, 200, withRequest(patch), withResponse(cm("2", "x\xc3\x28y"))),
		event("f", "patch", "bob", ref, 422, withRequest(patch), withStatus(status{Code: 422, Reason: "Invalid\xff",
			Message: "bad value \xe2\x82", Details: &statusDetails{Causes: []statusCause{{Field: "data.\xfe", Message: "no\xff", Type: "FieldValueInvalid"}}}})),
	)
	if bad := invalidStrings(td); len(bad) > 0 {
		t.Fatalf("strings that are not valid UTF-8 were exported: %v", bad)
	}
	s := allSpans(td)[0]
	e, ok := spanEvent(s, eventAuditPatch)
	if !ok {
		t.Fatal("no patch event")
	}
	if got, want := attrStr(e.Attributes(), model.AttrAuditPatch), "{\"data\":{\"k\":\"x\uFFFD(y\",\"\uFFFD\":\"z\"}}"; got != want {
		t.Fatalf("patch = %q, want %q (each invalid byte replaced with U+FFFD)", got, want)
	}
}

func TestAnnotationsBecomeAttributes(t *testing.T) {
	c := testConverter()
	ref := objectReference{Resource: "pods", Namespace: "default", Name: "p", APIVersion: "v1"}
	ev := event("ann", "create", "alice", ref, 201)
	ev.Annotations = []annotation{
		{Key: "authorization.k8s.io/decision", Value: "allow"},
		{Key: "authorization.k8s.io/reason", Value: `RBAC: allowed by ClusterRoleBinding "admin"`},
		{Key: "mutation.webhook.admission.k8s.io/round_0_index_0", Value: `{"configuration":"inject","webhook":"sidecar.example.com","mutated":true}`},
		{Key: "mutation.webhook.admission.k8s.io/round_0_index_1", Value: `{"configuration":"defaults","webhook":"defaults.example.com","mutated":false}`},
		{Key: "mutation.webhook.admission.k8s.io/round_1_index_0", Value: `not json`},
		{Key: "validation.policy.admission.k8s.io/validation_failure", Value: `[{"message":"no latest tag","policy":"tags","binding":"tags","expressionIndex":0,"validationActions":["Audit"]}]`},
		{Key: "pod-security.kubernetes.io/enforce-policy", Value: "restricted:latest"},
		{Key: "pod-security.kubernetes.io/audit-violations", Value: `would violate PodSecurity "restricted:latest": privileged`},
		{Key: "apiserver.latency.k8s.io/etcd", Value: "1.5s"},
		{Key: "apiserver.latency.k8s.io/mutating-webhook", Value: "250ms"},
		{Key: "apiserver.latency.k8s.io/total", Value: "not a duration"},
		{Key: "example.com/anything", Value: "left out"},
	}
	attrs := onlySpan(t, must(convertOne(t, c, ev))).Attributes()
	for key, want := range map[string]string{
		"k8s.audit.authorization.decision":        "allow",
		"k8s.audit.authorization.reason":          "<absent>", // said only when not allowed
		"k8s.audit.admission.policy_failures":     `[{"message":"no latest tag","policy":"tags","binding":"tags","expressionIndex":0,"validationActions":["Audit"]}]`,
		"k8s.audit.pod_security.enforce_policy":   "restricted:latest",
		"k8s.audit.pod_security.audit_violations": `would violate PodSecurity "restricted:latest": privileged`,
	} {
		if got := attrStr(attrs, key); got != want {
			t.Errorf("%s = %q, want %q", key, got, want)
		}
	}
	slice := func(key string) []string { return annotationSlice(attrs, key) }
	if got := slice("k8s.audit.admission.webhooks"); !slices.Equal(got, []string{"sidecar.example.com", "defaults.example.com"}) {
		t.Errorf("webhooks = %v", got)
	}
	if got := slice("k8s.audit.admission.mutated_by"); !slices.Equal(got, []string{"sidecar.example.com"}) {
		t.Errorf("mutated_by = %v", got)
	}
	if v, ok := attrs.Get("k8s.audit.latency.etcd"); !ok || v.Double() != 1.5 {
		t.Errorf("latency.etcd = %v", v.AsRaw())
	}
	if v, ok := attrs.Get("k8s.audit.latency.mutating_webhook"); !ok || v.Double() != 0.25 {
		t.Errorf("latency.mutating_webhook = %v", v.AsRaw())
	}
	if _, ok := attrs.Get("k8s.audit.latency.total"); ok {
		t.Error("a latency that is not a duration is left out")
	}
	attrs.Range(func(k string, _ pcommon.Value) bool {
		if strings.Contains(k, "example.com") || strings.Contains(k, "anything") {
			t.Errorf("unknown annotation exported as %s", k)
		}
		return true
	})
}

// annotationSlice returns a string-array attribute, nil when absent.
func annotationSlice(attrs pcommon.Map, key string) []string {
	v, ok := attrs.Get(key)
	if !ok {
		return nil
	}
	var out []string
	for _, e := range v.Slice().All() {
		out = append(out, e.Str())
	}
	return out
}

// The apiserver writes its annotations with sorted keys: the eleventh webhook of a round
// (index_10) comes before the third (index_2). Attributes list webhooks in call order.
func TestWebhooksAreListedInCallOrder(t *testing.T) {
	ref := objectReference{Resource: "pods", Namespace: "default", Name: "p", APIVersion: "v1"}
	ev := event("order", "create", "alice", ref, 201)
	mutation := func(round, index int, webhook string, mutated bool) annotation {
		return annotation{
			Key:   fmt.Sprintf("mutation.webhook.admission.k8s.io/round_%d_index_%d", round, index),
			Value: fmt.Sprintf(`{"configuration":"c","webhook":%q,"mutated":%t}`, webhook, mutated),
		}
	}
	ev.Annotations = []annotation{
		mutation(0, 0, "first.example.com", false),
		mutation(0, 10, "eleventh.example.com", true),
		mutation(0, 2, "third.example.com", true),
		mutation(1, 0, "reinvoked.example.com", false),
	}
	attrs := onlySpan(t, must(convertOne(t, testConverter(), ev))).Attributes()
	if got, want := annotationSlice(attrs, "k8s.audit.admission.webhooks"), []string{"first.example.com", "third.example.com", "eleventh.example.com", "reinvoked.example.com"}; !slices.Equal(got, want) {
		t.Errorf("webhooks = %v, want %v", got, want)
	}
	if got, want := annotationSlice(attrs, "k8s.audit.admission.mutated_by"), []string{"third.example.com", "eleventh.example.com"}; !slices.Equal(got, want) {
		t.Errorf("mutated_by = %v, want %v", got, want)
	}
}

// The apiserver records each applied webhook patch (Request level and above) as
// patch.webhook.admission.k8s.io/round_<r>_index_<i> = {"configuration","webhook","patch","patchType"}.
func TestWebhookPatchesBecomeAttributes(t *testing.T) {
	patchAnn := func(round, index int, value string) annotation {
		return annotation{Key: fmt.Sprintf("patch.webhook.admission.k8s.io/round_%d_index_%d", round, index), Value: value}
	}
	convert := func(t *testing.T, c *Converter, ref objectReference, anns ...annotation) pcommon.Map {
		t.Helper()
		ev := event("patched", "create", "alice", ref, 201)
		ev.Annotations = anns
		return onlySpan(t, must(convertOne(t, c, ev))).Attributes()
	}
	pod := objectReference{Resource: "pods", Namespace: "default", Name: "p", APIVersion: "v1"}

	t.Run("webhooks and patches in call order", func(t *testing.T) {
		attrs := convert(t, testConverter(), pod,
			annotation{Key: "mutation.webhook.admission.k8s.io/round_0_index_0", Value: `{"configuration":"inject","webhook":"sidecar.example.com","mutated":true}`},
			patchAnn(0, 2, `{"configuration":"labels","webhook":"labels.example.com","patch":[{"op":"add","path":"/metadata/labels/team","value":"payments"}],"patchType":"JSONPatch"}`),
			patchAnn(0, 0, `{"configuration":"inject","webhook":"sidecar.example.com","patch":[ {"op":"add", "path":"/spec/containers/1", "value":{"name":"proxy","image":"proxy:1.2"}} ],"patchType":"JSONPatch"}`),
			patchAnn(0, 1, `not json`),
			patchAnn(0, 3, `{"configuration":"nameless","patch":[]}`),
		)
		if got, want := annotationSlice(attrs, "k8s.audit.admission.patched_by"), []string{"sidecar.example.com", "labels.example.com"}; !slices.Equal(got, want) {
			t.Errorf("patched_by = %v, want %v", got, want)
		}
		want := []string{
			`[{"op":"add","path":"/spec/containers/1","value":{"name":"proxy","image":"proxy:1.2"}}]`,
			`[{"op":"add","path":"/metadata/labels/team","value":"payments"}]`,
		}
		if got := annotationSlice(attrs, "k8s.audit.admission.patches"); !slices.Equal(got, want) {
			t.Errorf("patches = %q, want %q", got, want)
		}
		if _, ok := attrs.Get("k8s.audit.admission.patches.truncated"); ok {
			t.Error("patches within the bound are not marked truncated")
		}
	})

	t.Run("a redacted resource's patches lose their values", func(t *testing.T) {
		const value, lastApplied = "webhook-injected-password", "webhook-last-applied-token"
		b64 := base64.StdEncoding.EncodeToString([]byte(value))
		secret := objectReference{Resource: "secrets", Namespace: "default", Name: "creds", APIVersion: "v1"}
		ops := fmt.Sprintf(`[{"op":"add","path":"/data/password","value":%q},{"op":"add","path":"/stringData","value":{"token":%q}},`+
			`{"op":"replace","path":"/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration","value":%q},{"op":"add","path":"/data/x","val":%q}]`,
			b64, value, lastApplied, value)
		ann, err := json.Marshal(map[string]any{"configuration": "vault", "webhook": "vault.example.com", "patch": json.RawMessage(ops), "patchType": "JSONPatch"})
		if err != nil {
			t.Fatal(err)
		}
		ev := event("secret", "create", "alice", secret, 201)
		ev.Annotations = []annotation{patchAnn(0, 0, string(ann))}
		td := must(convertOne(t, testConverter(), ev))
		out, err := (&ptrace.JSONMarshaler{}).MarshalTraces(td)
		if err != nil {
			t.Fatal(err)
		}
		proto, err := (&ptrace.ProtoMarshaler{}).MarshalTraces(td)
		if err != nil {
			t.Fatal(err)
		}
		for _, form := range []string{value, b64, lastApplied, base64.StdEncoding.EncodeToString([]byte(lastApplied))} {
			if strings.Contains(string(out), form) || strings.Contains(string(proto), form) {
				t.Fatalf("a value a webhook patched into a Secret was exported (%q): %s", form, out)
			}
		}
		attrs := onlySpan(t, td).Attributes()
		if got := annotationSlice(attrs, "k8s.audit.admission.patched_by"); !slices.Equal(got, []string{"vault.example.com"}) {
			t.Errorf("patched_by = %v", got)
		}
		want := `[{"op":"add","path":"/data/password","value":"<redacted>"},{"op":"add","path":"/stringData","value":"<redacted>"},` +
			`{"op":"replace","path":"/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration","value":"<redacted>"},{"op":"add","path":"/data/x"}]`
		if got := annotationSlice(attrs, "k8s.audit.admission.patches"); !slices.Equal(got, []string{want}) {
			t.Errorf("patches = %q, want the paths with masked values %q", got, want)
		}
	})

	t.Run("all patches share the body bound", func(t *testing.T) {
		big := func(webhook string, n int) annotation {
			return annotation{Value: fmt.Sprintf(`{"webhook":%q,"patch":[{"op":"add","path":"/metadata/annotations/big","value":%q}]}`, webhook, strings.Repeat("é", n/2))}
		}
		a, b, c := big("a.example.com", 40<<10), big("b.example.com", 40<<10), big("c.example.com", 10)
		a.Key, b.Key, c.Key = patchAnn(0, 0, "").Key, patchAnn(0, 1, "").Key, patchAnn(0, 2, "").Key
		attrs := convert(t, testConverter(), pod, a, b, c)
		got := annotationSlice(attrs, "k8s.audit.admission.patches")
		if len(got) != 3 {
			t.Fatalf("patches = %d entries, want one per webhook", len(got))
		}
		total := 0
		for _, p := range got {
			total += len(p)
			if !utf8.ValidString(p) {
				t.Error("a patch was cut inside a character")
			}
		}
		if total > maxBodyBytes || total < maxBodyBytes-1 {
			t.Errorf("patches hold %d bytes, want the body bound (%d) filled", total, maxBodyBytes)
		}
		if !json.Valid([]byte(got[0])) || got[2] != "" {
			t.Errorf("the first patch is whole and the last, past the bound, empty: %d, %d bytes", len(got[0]), len(got[2]))
		}
		if v, ok := attrs.Get("k8s.audit.admission.patches.truncated"); !ok || !v.Bool() {
			t.Error("cut patches are marked truncated")
		}
	})
}

// TestStageTimestampIsClamped: a stage timestamp before the request's, or far in the future,
// cannot end the span: it ends when it began and says it was clamped.
func TestStageTimestampIsClamped(t *testing.T) {
	c := testConverter()
	c.now = func() time.Time { return time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC) }
	ref := objectReference{Resource: "configmaps", Namespace: "default", Name: "cm", APIVersion: "v1"}
	for _, tc := range []struct {
		name    string
		stage   time.Duration
		clamped bool
	}{
		{"stage before request", -time.Second, true},
		{"stage in the year 9999", time.Until(time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)), true},
		{"stage after request", 3 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := event("a-"+tc.name, "create", "alice", ref, 201)
			ev.StageTimestamp = ev.RequestReceivedTimestamp.Add(tc.stage)
			span := onlySpan(t, must(convertOne(t, c, ev)))
			_, has := span.Attributes().Get(attrClamped)
			if has != tc.clamped {
				t.Fatalf("clamped attribute present = %v, want %v", has, tc.clamped)
			}
			if tc.clamped && span.EndTimestamp() != span.StartTimestamp() {
				t.Fatal("a clamped span ends when it starts")
			}
		})
	}
	future := event("future", "create", "alice", ref, 201)
	future.RequestReceivedTimestamp = c.now().Add(48 * time.Hour)
	future.StageTimestamp = future.RequestReceivedTimestamp
	if td, st := convertOne(t, c, future); td.SpanCount() != 0 || st.dropped[reasonInvalidTimestamp] != 1 {
		t.Fatalf("an event received two days from now: %d spans, dropped %v", td.SpanCount(), st.dropped)
	}
}

// Why a request was allowed is left out (the same sentence on every request of a user); why it
// was not is kept, whichever order the annotations come in.
func TestAuthorizationReasonOnlyWhenNotAllowed(t *testing.T) {
	ref := objectReference{Resource: "pods", Namespace: "default", Name: "p", APIVersion: "v1"}
	for _, order := range [][2]int{{0, 1}, {1, 0}} {
		ev := event("deny", "create", "alice", ref, 403, withStatus(status{Code: 403, Reason: "Forbidden"}))
		anns := []annotation{{Key: "authorization.k8s.io/decision", Value: "forbid"}, {Key: "authorization.k8s.io/reason", Value: "no RBAC policy matched"}}
		ev.Annotations = []annotation{anns[order[0]], anns[order[1]]}
		attrs := onlySpan(t, must(convertOne(t, testConverter(), ev))).Attributes()
		if attrStr(attrs, "k8s.audit.authorization.decision") != "forbid" || attrStr(attrs, "k8s.audit.authorization.reason") != "no RBAC policy matched" {
			t.Fatalf("order %v: %v", order, attrs.AsRaw())
		}
	}
}

// k8s.audit.user.groups is left out when the groups are those the user name implies, and kept
// when they say more.
func TestUserGroupsOnlyWhenTheyTellMore(t *testing.T) {
	for _, tc := range []struct {
		user   string
		groups []string
		kept   bool
	}{
		{"system:serviceaccount:kube-system:replicaset-controller", []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}, false},
		{"system:serviceaccount:kube-system:replicaset-controller", []string{"system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"}, true},
		{"system:serviceaccount:kube-system:x", []string{"system:serviceaccounts", "system:authenticated", "system:authenticated"}, true},
		{"system:node:n1", []string{"system:nodes", "system:authenticated"}, false},
		{"system:kube-scheduler", []string{"system:authenticated"}, false},
		{"system:kube-scheduler", []string{"system:authenticated", "system:masters"}, true},
		{"alice", []string{"system:authenticated"}, true},
		{"kubernetes-admin", []string{"kubeadm:cluster-admins", "system:authenticated"}, true},
	} {
		ref := objectReference{Resource: "pods", Namespace: "default", Name: "p", APIVersion: "v1"}
		ev := event("g", "delete", tc.user, ref, 200, func(ev *Event) { ev.User.Groups = tc.groups })
		attrs := onlySpan(t, must(convertOne(t, testConverter(), ev))).Attributes()
		if _, kept := attrs.Get(model.AttrAuditUserGroups); kept != tc.kept {
			t.Errorf("%s %v: groups kept %v, want %v", tc.user, tc.groups, kept, tc.kept)
		}
	}
}
