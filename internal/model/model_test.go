package model

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestWindowStart(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	tests := []struct {
		name string
		t    string
		size time.Duration
		want string
	}{
		{"inside the first half hour", "2026-11-21T10:29:59.999Z", 30 * time.Minute, "2026-11-21T10:00:00Z"},
		{"exactly on a boundary starts the next window", "2026-11-21T10:30:00Z", 30 * time.Minute, "2026-11-21T10:30:00Z"},
		{"other time zones align to the same UTC boundary", "2026-11-21T12:45:00+02:00", 30 * time.Minute, "2026-11-21T10:30:00Z"},
		{"zero size falls back to the default", "2026-11-21T10:44:00Z", 0, "2026-11-21T10:30:00Z"},
		{"hour windows", "2026-11-21T10:44:00Z", time.Hour, "2026-11-21T10:00:00Z"},
		{"before the epoch floors downwards", "1969-12-31T23:59:00Z", 30 * time.Minute, "1969-12-31T23:30:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := WindowStart(at(tt.t), tt.size)
			if !got.Equal(at(tt.want)) {
				t.Fatalf("WindowStart(%s, %s) = %s, want %s", tt.t, tt.size, got, tt.want)
			}
		})
	}
}

func TestIDsAreDerivedAndDistinct(t *testing.T) {
	w1 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	w2 := w1.Add(DefaultWindow)
	k := UIDKey("prod", "0b0e5a54-1c4f-4b0a-9d2e-1f1d0c7b7a11")
	// Derived twice on purpose: the same inputs must give the same IDs.
	if span, trace := ObjectSpanID(k, w1), ObjectTraceID(k, w1); span != ObjectSpanID(k, w1) || trace != ObjectTraceID(k, w1) {
		t.Fatal("the same key and window must give the same IDs")
	}
	if ObjectSpanID(k, w1) == ObjectSpanID(k, w2) || ObjectTraceID(k, w1) == ObjectTraceID(k, w2) {
		t.Fatal("different windows must give different IDs")
	}
	if ObjectSpanID(k, w1) == ObjectSpanID(UIDKey("dev", "0b0e5a54-1c4f-4b0a-9d2e-1f1d0c7b7a11"), w1) {
		t.Fatal("the cluster must be part of the key")
	}
	if a := AuditSpanID("a"); a != AuditSpanID("a") || a == AuditSpanID("b") {
		t.Fatal("audit span IDs must be a function of the audit ID")
	}
	if EventSpanID("u", "1") == EventSpanID("u", "2") || EventSpanID("u1", "") == EventSpanID("u", "1") {
		t.Fatal("event span IDs must separate UID and occurrence")
	}
	series := EventSeriesSpanID("u", "10", 1, 37, w1, w2)
	for _, other := range []pcommon.SpanID{
		EventSeriesSpanID("u2", "10", 1, 37, w1, w2), EventSeriesSpanID("u", "11", 1, 37, w1, w2),
		EventSeriesSpanID("u", "10", 2, 37, w1, w2), EventSeriesSpanID("u", "10", 1, 38, w1, w2),
		EventSeriesSpanID("u", "10", 1, 37, w1.Add(1), w2), EventSeriesSpanID("u", "10", 1, 37, w1, w2.Add(1)),
		EventSpanID("u", "37"),
	} {
		if other == series {
			t.Fatal("series span IDs must depend on the UID, version, occurrence range and times, and differ from occurrence IDs")
		}
	}
	if series != EventSeriesSpanID("u", "10", 1, 37, w1, w2) {
		t.Fatal("the same series must give the same ID")
	}
	for _, id := range []pcommon.SpanID{ObjectSpanID(k, w1), AuditSpanID(""), EventSpanID("", ""), EventSeriesSpanID("", "", 0, 0, time.Time{}, time.Time{})} {
		if id.IsEmpty() {
			t.Fatal("derived span IDs must never be empty")
		}
	}
}

func TestKeys(t *testing.T) {
	pod := Object{Cluster: "c1", Resource: "pods", Kind: "Pod", Namespace: "default", Name: "web-1"}
	if got := pod.Key(); got != "c1/name//pods/default/web-1" || got.HasUIDKey() {
		t.Fatalf("name key = %q", got)
	}
	pod.UID = "u-1"
	if got := pod.Key(); got != "c1/uid/u-1" || !got.HasUIDKey() {
		t.Fatalf("uid key = %q", got)
	}
	if pod.NameKey() != "c1/name//pods/default/web-1" {
		t.Fatalf("name key must not depend on the UID, got %q", pod.NameKey())
	}
	recreated := pod
	recreated.UID = "u-2"
	if recreated.Key() == pod.Key() {
		t.Fatal("a recreated object with a new UID must be a new object")
	}
}

func TestDisplayName(t *testing.T) {
	for _, tt := range []struct {
		o    Object
		want string
	}{
		{Object{Kind: "Deployment", Namespace: "default", Name: "demo"}, "Deployment default/demo"},
		{Object{Kind: "Node", Name: "kwok-node-0"}, "Node kwok-node-0"},
		{Object{Resource: "widgets", Namespace: "ns", Name: "w"}, "widgets ns/w"},
	} {
		if got := tt.o.DisplayName(); got != tt.want {
			t.Errorf("DisplayName() = %q, want %q", got, tt.want)
		}
	}
}

func TestAttributesRoundTrip(t *testing.T) {
	o := Object{
		Cluster: "c1", Group: "apps", Version: "v1", Resource: "replicasets", Kind: "ReplicaSet",
		Namespace: "default", Name: "demo-6d4b", UID: "rs-uid",
		Owner: Owner{APIVersion: "apps/v1", Kind: "Deployment", Name: "demo", UID: "d-uid"},
	}
	res, attrs := pcommon.NewMap(), pcommon.NewMap()
	o.PutResource(res)
	o.PutOwner(attrs)
	if v, _ := res.Get(AttrObjectAPIVersion); v.Str() != "apps/v1" {
		t.Fatalf("api_version = %q", v.Str())
	}
	if v, _ := res.Get(AttrServiceName); v.Str() != "ReplicaSet" {
		t.Fatalf("service.name = %q", v.Str())
	}
	if _, ok := attrs.Get(AttrObjectName); ok {
		t.Fatal("identity goes on the Resource, not on the span")
	}
	if _, ok := res.Get(AttrOwnerUID); ok {
		t.Fatal("the owner goes on the span, not on the Resource")
	}
	got, ok := ObjectFromAttributes(res, attrs)
	if !ok || got != o {
		t.Fatalf("round trip = %+v, %v; want %+v", got, ok, o)
	}
	attrs.PutStr(AttrObjectUID, "resolved")
	if got, _ := ObjectFromAttributes(res, attrs); got.UID != "resolved" {
		t.Fatalf("a span's own k8s.object.uid (resolved by the processor) overrides the Resource's: %q", got.UID)
	}

	core := Object{Cluster: "c1", Version: "v1", Resource: "pods", Kind: "Pod", Namespace: "default", Name: "p"}
	res, attrs = pcommon.NewMap(), pcommon.NewMap()
	core.PutResource(res)
	core.PutOwner(attrs)
	if v, ok := res.Get(AttrObjectAPIGroup); !ok || v.Str() != "" {
		t.Fatal("the core group must be written as an empty api_group")
	}
	if attrs.Len() != 0 {
		t.Fatalf("no owner attributes without an owner: %v", attrs.AsRaw())
	}
	core.NoOwner = true
	core.PutOwner(attrs)
	if got, _ := ObjectFromAttributes(res, attrs); !got.NoOwner {
		t.Fatal("owner.none must round-trip")
	}
	if _, ok := ObjectFromAttributes(pcommon.NewMap(), pcommon.NewMap()); ok {
		t.Fatal("a span without identity must not yield an object")
	}

	// A span of a kubetrail before span model 1.0: the identity on the span, the Resource the
	// cluster and kind only. A processor of this version still reads it (upgrades).
	oldRes, oldAttrs := pcommon.NewMap(), pcommon.NewMap()
	oldRes.PutStr(AttrClusterName, "c1")
	oldRes.PutStr(AttrServiceName, "ReplicaSet")
	for k, v := range map[string]string{AttrObjectAPIGroup: "apps", AttrObjectAPIVersion: "apps/v1", AttrObjectResource: "replicasets",
		AttrObjectKind: "ReplicaSet", AttrNamespaceName: "default", AttrObjectName: "demo-6d4b", AttrObjectUID: "rs-uid"} {
		oldAttrs.PutStr(k, v)
	}
	o.PutOwner(oldAttrs)
	if got, ok := ObjectFromAttributes(oldRes, oldAttrs); !ok || got != o {
		t.Fatalf("a span before span model 1.0 = %+v, %v; want %+v", got, ok, o)
	}
}

func TestSchemaVersions(t *testing.T) {
	if err := CheckSchema(SchemaURL); err != nil {
		t.Fatalf("this model's own URL: %v", err)
	}
	if err := CheckSchema("https://kubetrail.dev/schemas/1.7.2"); err != nil {
		t.Fatalf("a later minor version is readable: %v", err)
	}
	for url, want := range map[string]string{
		"":                                    "before span model 1.0",
		"https://kubetrail.dev/schemas/2.0.0": "span model 2.0.0",
		"https://opentelemetry.io/schemas/1.43.0": "not kubetrail's",
		"https://kubetrail.dev/schemas/x":         "not kubetrail's",
	} {
		err := CheckSchema(url)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckSchema(%q) = %v, want an error saying %q", url, err, want)
		}
	}
}

func TestOwnerObject(t *testing.T) {
	pod := Object{Cluster: "c1", Namespace: "default", Name: "p",
		Owner: Owner{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs-uid"}}
	owner, ok := pod.OwnerObject(BuiltinMapper())
	if !ok || owner.Resource != "replicasets" || owner.Group != "apps" || owner.Namespace != "default" || owner.Key() != "c1/uid/rs-uid" {
		t.Fatalf("owner = %+v", owner)
	}
	lease := Object{Cluster: "c1", Namespace: "kube-node-lease", Name: "n",
		Owner: Owner{APIVersion: "v1", Kind: "Node", Name: "n", UID: "node-uid"}}
	if owner, _ := lease.OwnerObject(BuiltinMapper()); owner.Namespace != "" || owner.Resource != "nodes" {
		t.Fatalf("a cluster-scoped owner must have no namespace: %+v", owner)
	}
	rollout := Object{Cluster: "c1", Namespace: "default", Name: "rs",
		Owner: Owner{APIVersion: "argoproj.io/v1alpha1", Kind: "Rollout", Name: "web", UID: "ro-uid"}}
	if owner, _ := rollout.OwnerObject(BuiltinMapper()); owner.Resource != "" || owner.Kind != "Rollout" || owner.Key() != "c1/uid/ro-uid" {
		t.Fatalf("an owner kind no mapper knows keeps its kind and UID and guesses no resource: %+v", owner)
	}
	if _, ok := (Object{Name: "x"}).OwnerObject(nil); ok {
		t.Fatal("no owner reference, no owner")
	}
}

func TestMapper(t *testing.T) {
	m := BuiltinMapper()
	if KindFor(m, "apps", "deployments") != "Deployment" || KindFor(m, "", "endpoints") != "Endpoints" {
		t.Fatal("built-in kinds")
	}
	if KindFor(m, "example.com", "widgets") != "widgets" {
		t.Fatal("unknown resources fall back to the resource name, not a guessed singular")
	}
	crd := NewTableMapper([]ResourceInfo{{Group: "example.com", Version: "v1", Resource: "widgets", Kind: "Widget", Namespaced: true}})
	if KindFor(Chain(m, crd), "example.com", "widgets") != "Widget" {
		t.Fatal("a chained mapper must be asked in turn")
	}
	if info, ok := m.ByKind("batch", "CronJob"); !ok || info.Resource != "cronjobs" {
		t.Fatal("by kind")
	}
}

func TestTracesBuilderGroupsByObject(t *testing.T) {
	b := NewTracesBuilder("scope", "v0")
	pod := Object{Cluster: "c1", Version: "v1", Resource: "pods", Kind: "Pod", Namespace: "default", Name: "p", UID: "u1"}
	b.AppendSpan(pod)
	owned := pod
	owned.Owner = Owner{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs-uid"}
	b.AppendSpan(owned) // what a write says of the owner is not identity
	other := pod
	other.Name, other.UID = "q", "u2"
	b.AppendSpan(other)
	elsewhere := pod
	elsewhere.Cluster = "c2"
	b.AppendSpan(elsewhere)
	td := b.Traces()
	if td.ResourceSpans().Len() != 3 || td.SpanCount() != 4 {
		t.Fatalf("resources = %d, spans = %d", td.ResourceSpans().Len(), td.SpanCount())
	}
	rs := td.ResourceSpans().At(0)
	got := rs.Resource().Attributes().AsRaw()
	want := map[string]any{
		AttrClusterName: "c1", AttrServiceName: "Pod", AttrObjectAPIGroup: "", AttrObjectAPIVersion: "v1",
		AttrObjectResource: "pods", AttrObjectKind: "Pod", AttrNamespaceName: "default", AttrObjectName: "p",
		AttrObjectUID: "u1", "k8s.pod.name": "p", "k8s.pod.uid": "u1",
	}
	if !reflect.DeepEqual(got, want) || rs.ScopeSpans().At(0).Spans().Len() != 2 {
		t.Fatalf("first resource = %v (%d spans), want %v holding both spans of pod p", got, rs.ScopeSpans().At(0).Spans().Len(), want)
	}
	if rs.SchemaUrl() != SchemaURL || rs.ScopeSpans().At(0).SchemaUrl() != SchemaURL {
		t.Fatalf("schema URLs %q, %q", rs.SchemaUrl(), rs.ScopeSpans().At(0).SchemaUrl())
	}
}

func BenchmarkObjectSpanID(b *testing.B) {
	k := UIDKey("prod-eu-1", "0b0e5a54-1c4f-4b0a-9d2e-1f1d0c7b7a11")
	w := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	b.ReportAllocs()
	for b.Loop() {
		_ = ObjectSpanID(k, w)
	}
}

func TestSemconvAttributes(t *testing.T) {
	for _, tc := range []struct {
		obj  Object
		want map[string]any
	}{
		{Object{Kind: "Pod", Name: "web-1", UID: "u1", Namespace: "shop"}, map[string]any{"k8s.pod.name": "web-1", "k8s.pod.uid": "u1"}},
		{Object{Group: "apps", Kind: "Deployment", Name: "web", UID: "u2"}, map[string]any{"k8s.deployment.name": "web", "k8s.deployment.uid": "u2"}},
		{Object{Group: "batch", Kind: "CronJob", Name: "nightly"}, map[string]any{"k8s.cronjob.name": "nightly"}},
		{Object{Kind: "Namespace", Name: "shop", UID: "u3"}, map[string]any{"k8s.namespace.name": "shop"}},
		{Object{Kind: "ConfigMap", Name: "cm"}, map[string]any{}},
		{Object{Group: "example.com", Kind: "Pod", Name: "not-core"}, map[string]any{}},
	} {
		attrs := pcommon.NewMap()
		tc.obj.putSemconv(attrs)
		if got := attrs.AsRaw(); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s %s: %v, want %v", tc.obj.Group, tc.obj.Kind, got, tc.want)
		}
	}
}
