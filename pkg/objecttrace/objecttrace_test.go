package objecttrace

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/internal/objid"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var (
	// at lies in the window 14:00-14:30 of a 30-minute window.
	at          = time.Date(2026, 11, 27, 14, 29, 59, 0, time.UTC)
	atWindow    = time.Date(2026, 11, 27, 14, 0, 0, 0, time.UTC)
	deployGVK   = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	configMapGV = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
)

// withClock sets the clock that picks the window of a span; the package's users have none to set.
func withClock(now func() time.Time) Option {
	return optionFunc(func(c *config) { c.now = now })
}

// recorded returns a provider whose ended spans the recorder holds.
func recorded(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, rec
}

func deployment() *metav1.ObjectMeta {
	return &metav1.ObjectMeta{
		Namespace: "shop", Name: "web", UID: "0b7c6f0e-8d1a-4d4e-9a57-3c2f0e6f9a10", Generation: 3,
		OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "v1", Kind: "ConfigMap", Name: "not-the-controller", UID: "u-other"},
			{APIVersion: "example.com/v1", Kind: "Shop", Name: "shop", UID: "u-shop", Controller: new(true)},
		},
	}
}

func onlySpan(t *testing.T, rec *tracetest.SpanRecorder) sdktrace.ReadOnlySpan {
	t.Helper()
	ended := rec.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans ended, want 1", len(ended))
	}
	return ended[0]
}

func attrMap(kvs []attribute.KeyValue) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

func TestSpanIsAChildOfTheObjectSpanOfTheCurrentWindow(t *testing.T) {
	tp, rec := recorded(t)
	tr := New(WithTracerProvider(tp), WithCluster("prod-eu-1"), WithWindow(30*time.Minute), withClock(func() time.Time { return at }))
	obj := deployment()
	_, span := tr.StartSpanFromObject(context.Background(), obj, deployGVK, "reconcile")
	span.End()

	s := onlySpan(t, rec)
	key := objid.UIDKey("prod-eu-1", string(obj.UID))
	if got, want := [16]byte(s.SpanContext().TraceID()), objid.ObjectTraceID(key, atWindow); got != want {
		t.Errorf("trace ID %x, want the object's window trace %x", got, want)
	}
	if got, want := [8]byte(s.Parent().SpanID()), objid.ObjectSpanID(key, atWindow); got != want {
		t.Errorf("parent %x, want the object span %x", got, want)
	}
	if !s.Parent().IsRemote() || !s.SpanContext().IsSampled() || s.SpanKind() != trace.SpanKindInternal {
		t.Errorf("parent remote %v, sampled %v, kind %v", s.Parent().IsRemote(), s.SpanContext().IsSampled(), s.SpanKind())
	}
	if scope := s.InstrumentationScope(); s.Name() != "reconcile" || scope.Name != ScopeName || scope.Version != Version() {
		t.Errorf("name %q, scope %q version %q", s.Name(), scope.Name, scope.Version)
	}
	ref, err := objid.DecodeTraceState(s.SpanContext().TraceState().Get(objid.TraceStateKey))
	want := objid.ObjectRef{Cluster: "prod-eu-1", UID: string(obj.UID), Window: atWindow}
	if err != nil || ref != want {
		t.Errorf("trace state names %+v (%v), want %+v", ref, err, want)
	}
}

func TestTheNextWindowIsAnotherTrace(t *testing.T) {
	tp, rec := recorded(t)
	now := at
	tr := New(WithTracerProvider(tp), withClock(func() time.Time { return now }))
	_, span := tr.StartSpanFromObject(context.Background(), deployment(), deployGVK, "reconcile")
	span.End()
	now = at.Add(time.Second)
	_, span = tr.StartSpanFromObject(context.Background(), deployment(), deployGVK, "reconcile")
	span.End()
	ended := rec.Ended()
	if ended[0].SpanContext().TraceID() == ended[1].SpanContext().TraceID() {
		t.Error("14:29:59 and 14:30:00 share a trace")
	}
	key := objid.UIDKey("", string(deployment().UID))
	if got, want := [16]byte(ended[1].SpanContext().TraceID()), objid.ObjectTraceID(key, atWindow.Add(30*time.Minute)); got != want {
		t.Errorf("trace ID %x, want %x", got, want)
	}
}

func TestDescendantsInheritTheTraceState(t *testing.T) {
	tp, rec := recorded(t)
	tr := New(WithTracerProvider(tp), WithCluster("c"))
	ctx, span := tr.StartSpanFromObject(context.Background(), deployment(), deployGVK, "reconcile")
	_, child := tp.Tracer("controller").Start(ctx, "create child")
	child.End()
	span.End()

	ended := rec.Ended()
	c, p := ended[0], ended[1]
	if c.Parent().SpanID() != p.SpanContext().SpanID() || c.SpanContext().TraceID() != p.SpanContext().TraceID() {
		t.Error("the child is not the reconcile span's child")
	}
	if got, want := c.SpanContext().TraceState().Get(objid.TraceStateKey), p.SpanContext().TraceState().Get(objid.TraceStateKey); got == "" || got != want {
		t.Errorf("the child's member %q, the parent's %q", got, want)
	}
}

func TestAttributes(t *testing.T) {
	tests := []struct {
		name    string
		cluster string
		obj     metav1.Object
		gvk     schema.GroupVersionKind
		opts    []trace.SpanStartOption
		want    map[string]any
	}{
		{
			name: "a namespaced object with a controlling owner and a generation", cluster: "prod",
			obj: deployment(), gvk: deployGVK, opts: []trace.SpanStartOption{WithObjectResource("deployments")},
			want: map[string]any{
				"kubetrail.span.type": "controller", "kubetrail.controller.name": "shop-operator",
				"k8s.cluster.name": "prod", "k8s.object.api_group": "apps", "k8s.object.api_version": "apps/v1",
				"k8s.object.kind": "Deployment", "k8s.object.resource": "deployments", "k8s.namespace.name": "shop",
				"k8s.object.name": "web", "k8s.object.uid": "0b7c6f0e-8d1a-4d4e-9a57-3c2f0e6f9a10",
				"k8s.object.generation": int64(3), "k8s.object.owner.api_version": "example.com/v1",
				"k8s.object.owner.kind": "Shop", "k8s.object.owner.name": "shop", "k8s.object.owner.uid": "u-shop",
			},
		},
		{
			name: "a cluster-scoped core object without owner, generation or cluster name",
			obj:  &metav1.ObjectMeta{Name: "shop", UID: "u-ns"}, gvk: schema.GroupVersionKind{Version: "v1", Kind: "Namespace"},
			want: map[string]any{
				"kubetrail.span.type": "controller", "kubetrail.controller.name": "shop-operator",
				"k8s.object.api_group": "", "k8s.object.api_version": "v1", "k8s.object.kind": "Namespace",
				"k8s.object.name": "shop", "k8s.object.uid": "u-ns",
			},
		},
		{
			name: "an empty gvk is taken from the object's TypeMeta",
			obj: func() metav1.Object {
				u := &unstructured.Unstructured{}
				u.SetGroupVersionKind(deployGVK)
				u.SetName("web")
				u.SetUID("u-web")
				return u
			}(),
			want: map[string]any{
				"kubetrail.span.type": "controller", "kubetrail.controller.name": "shop-operator",
				"k8s.object.api_group": "apps", "k8s.object.api_version": "apps/v1", "k8s.object.kind": "Deployment",
				"k8s.object.name": "web", "k8s.object.uid": "u-web",
			},
		},
		{
			name: "no gvk and no TypeMeta: no group, version or kind",
			obj:  &metav1.ObjectMeta{Namespace: "ns", Name: "x", UID: "u-x"},
			want: map[string]any{
				"kubetrail.span.type": "controller", "kubetrail.controller.name": "shop-operator",
				"k8s.namespace.name": "ns", "k8s.object.name": "x", "k8s.object.uid": "u-x",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp, rec := recorded(t)
			tr := New(WithTracerProvider(tp), WithCluster(tt.cluster), WithControllerName("shop-operator"))
			_, span := tr.StartSpanFromObject(context.Background(), tt.obj, tt.gvk, "reconcile", tt.opts...)
			span.End()
			got := attrMap(onlySpan(t, rec).Attributes())
			if len(got) != len(tt.want) {
				t.Errorf("got %d attributes, want %d: %v", len(got), len(tt.want), got)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s = %#v, want %#v", k, got[k], v)
				}
			}
		})
	}
}

func TestTheControllerNameDefaults(t *testing.T) {
	tp, rec := recorded(t)
	_, span := New(WithTracerProvider(tp), WithControllerName("")).StartSpanFromObject(context.Background(), deployment(), deployGVK, "reconcile")
	span.End()
	if got := attrMap(onlySpan(t, rec).Attributes())["kubetrail.controller.name"]; got != DefaultControllerName {
		t.Errorf("controller name %v", got)
	}
}

func TestASpanInTheContextIsLinkedAsTheCaller(t *testing.T) {
	tp, rec := recorded(t)
	ctx, caller := tp.Tracer("http").Start(context.Background(), "POST /hook")
	_, span := New(WithTracerProvider(tp)).StartSpanFromObject(ctx, deployment(), deployGVK, "reconcile")
	span.End()
	caller.End()

	s := rec.Ended()[0]
	if s.Parent().SpanID() == caller.SpanContext().SpanID() || s.SpanContext().TraceID() == caller.SpanContext().TraceID() {
		t.Error("the span is the caller's child; want the object span's")
	}
	links := s.Links()
	if len(links) != 1 || !links[0].SpanContext.Equal(caller.SpanContext()) ||
		attrMap(links[0].Attributes)["kubetrail.link.type"] != "caller" {
		t.Errorf("links %+v, want one caller link to %v", links, caller.SpanContext())
	}
}

func TestNoSpanInTheContextNoLink(t *testing.T) {
	tp, rec := recorded(t)
	_, span := New(WithTracerProvider(tp)).StartSpanFromObject(context.Background(), deployment(), deployGVK, "reconcile")
	span.End()
	if links := onlySpan(t, rec).Links(); len(links) != 0 {
		t.Errorf("links %+v", links)
	}
}

func TestAnObjectWithoutUIDGetsAPlainChildOfTheContext(t *testing.T) {
	tp, rec := recorded(t)
	tr := New(WithTracerProvider(tp), WithCluster("c"))
	ctx, caller := tp.Tracer("http").Start(context.Background(), "POST /hook")
	obj := &metav1.ObjectMeta{Namespace: "ns", Name: "new"}
	_, span := tr.StartSpanFromObject(ctx, obj, configMapGV, "create")
	span.End()
	caller.End()

	s := rec.Ended()[0]
	if s.Parent().SpanID() != caller.SpanContext().SpanID() || s.SpanContext().TraceID() != caller.SpanContext().TraceID() {
		t.Error("not a child of the span in the context")
	}
	if ts := s.SpanContext().TraceState().Len(); ts != 0 || len(s.Links()) != 0 {
		t.Errorf("trace state of %d members, %d links", ts, len(s.Links()))
	}
	a := attrMap(s.Attributes())
	if a["k8s.object.name"] != "new" || a["kubetrail.span.type"] != "controller" {
		t.Errorf("attributes %v", a)
	}
	if _, ok := a["k8s.object.uid"]; ok {
		t.Error("an empty UID attribute")
	}

	_, root := tr.StartSpanFromObject(context.Background(), obj, configMapGV, "create")
	root.End()
	if s := rec.Ended()[2]; s.Parent().IsValid() || !s.SpanContext().IsValid() {
		t.Errorf("without a span in the context: parent %v, span %v", s.Parent(), s.SpanContext())
	}
}

func TestAClusterNameTooLongForTheTraceStateFallsBackToAPlainSpan(t *testing.T) {
	tp, rec := recorded(t)
	long := string(make([]byte, 300))
	_, span := New(WithTracerProvider(tp), WithCluster(long)).StartSpanFromObject(context.Background(), deployment(), deployGVK, "reconcile")
	span.End()
	if s := onlySpan(t, rec); s.Parent().IsValid() || s.SpanContext().TraceState().Len() != 0 {
		t.Errorf("parent %v, trace state %q", s.Parent(), s.SpanContext().TraceState())
	}
}

func TestEnvironmentDefaults(t *testing.T) {
	tests := []struct {
		name        string
		envCluster  string
		envWindow   string
		opts        []Option
		wantCluster string
		wantWindow  time.Duration
	}{
		{"the environment gives cluster and window", "staging", "10m", nil, "staging", 10 * time.Minute},
		{"options win over the environment", "staging", "10m", []Option{WithCluster("prod"), WithWindow(time.Hour)}, "prod", time.Hour},
		{"an explicitly empty cluster wins too", "staging", "", []Option{WithCluster("")}, "", DefaultWindow},
		{"an unparsable window is 30 minutes", "", "half an hour", nil, "", DefaultWindow},
		{"a negative window is 30 minutes", "", "-10m", nil, "", DefaultWindow},
		{"a non-positive option leaves the environment's", "", "10m", []Option{WithWindow(0)}, "", 10 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvCluster, tt.envCluster)
			t.Setenv(EnvWindow, tt.envWindow)
			tp, rec := recorded(t)
			tr := New(append([]Option{WithTracerProvider(tp), withClock(func() time.Time { return at })}, tt.opts...)...)
			obj := deployment()
			_, span := tr.StartSpanFromObject(context.Background(), obj, deployGVK, "reconcile")
			span.End()
			s := onlySpan(t, rec)
			w := objid.WindowStart(at, tt.wantWindow)
			if got, want := [16]byte(s.SpanContext().TraceID()), objid.ObjectTraceID(objid.UIDKey(tt.wantCluster, string(obj.UID)), w); got != want {
				t.Errorf("trace ID %x, want %x (cluster %q, window %v)", got, want, tt.wantCluster, tt.wantWindow)
			}
		})
	}
}

// The names are written out here because internal/model pulls collector modules; they must be
// the ones the processor and the other components use.
func TestAttributeNamesAreTheModels(t *testing.T) {
	pairs := [][2]string{
		{attrSpanType, model.AttrSpanType}, {spanTypeController, model.SpanTypeController},
		{attrControllerName, model.AttrControllerName}, {attrLinkType, model.AttrLinkType},
		{attrClusterName, model.AttrClusterName}, {attrObjectAPIGroup, model.AttrObjectAPIGroup},
		{attrObjectAPIVersion, model.AttrObjectAPIVersion}, {attrObjectKind, model.AttrObjectKind},
		{attrObjectResource, model.AttrObjectResource}, {attrNamespaceName, model.AttrNamespaceName},
		{attrObjectName, model.AttrObjectName}, {attrObjectUID, model.AttrObjectUID},
		{attrObjectGeneration, model.AttrObjectGeneration}, {attrOwnerAPIVersion, model.AttrOwnerAPIVersion},
		{attrOwnerKind, model.AttrOwnerKind}, {attrOwnerName, model.AttrOwnerName}, {attrOwnerUID, model.AttrOwnerUID},
		{AnnotationTraceparent, model.AnnotationTraceparent}, {AnnotationTracestate, model.AnnotationTracestate},
		{AnnotationTraceContext, model.AnnotationLegacyTraceContext},
	}
	for _, p := range pairs {
		if p[0] != p[1] {
			t.Errorf("%q here, %q in internal/model", p[0], p[1])
		}
	}
}
