package main

import (
	"context"
	"slices"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kubetrail/kubetrail/pkg/objecttrace"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestParseChildren(t *testing.T) {
	for _, tt := range []struct {
		v    string
		want int
		ok   bool
	}{
		{"0", 0, true}, {"3", 3, true}, {"20", 20, true},
		{"21", 0, false}, {"-1", 0, false}, {"", 0, false}, {"three", 0, false}, {" 3", 0, false},
	} {
		n, err := parseChildren(tt.v)
		if n != tt.want || (err == nil) != tt.ok {
			t.Errorf("%q: %d, %v", tt.v, n, err)
		}
	}
}

var parent = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "demo", UID: "u-demo"}}

// child is a ConfigMap named name controlled by the ConfigMap with the given UID.
func child(name, ownerUID string) corev1.ConfigMap {
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "demo", UID: types.UID(ownerUID)}}
	return corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name,
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(owner, configMapGVK)}}}
}

func TestPlan(t *testing.T) {
	tests := []struct {
		name       string
		n          int
		existing   []corev1.ConfigMap
		wantCreate []string
		wantRemove []string
	}{
		{"a new parent gets all its children, in order", 3, nil, []string{"demo-child-0", "demo-child-1", "demo-child-2"}, nil},
		{"only the missing children are created", 3,
			[]corev1.ConfigMap{child("demo-child-1", "u-demo")}, []string{"demo-child-0", "demo-child-2"}, nil},
		{"fewer children asked for: the extras go, sorted", 1,
			[]corev1.ConfigMap{child("demo-child-2", "u-demo"), child("demo-child-0", "u-demo"), child("demo-child-1", "u-demo")},
			nil, []string{"demo-child-1", "demo-child-2"}},
		{"zero children: all go", 0, []corev1.ConfigMap{child("demo-child-0", "u-demo")}, nil, []string{"demo-child-0"}},
		{"a child of a former parent of the same name is not this parent's", 1,
			[]corev1.ConfigMap{child("demo-child-0", "u-old"), child("demo-child-7", "u-old")}, []string{"demo-child-0"}, nil},
		{"a ConfigMap without a controller is left alone", 0,
			[]corev1.ConfigMap{{ObjectMeta: metav1.ObjectMeta{Name: "demo-child-0"}}}, nil, nil},
		{"nothing to do", 2, []corev1.ConfigMap{child("demo-child-0", "u-demo"), child("demo-child-1", "u-demo")}, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			create, remove := plan(parent, tt.n, tt.existing)
			var removed []string
			for _, cm := range remove {
				removed = append(removed, cm.Name)
			}
			if !slices.Equal(create, tt.wantCreate) || !slices.Equal(removed, tt.wantRemove) {
				t.Errorf("create %v, remove %v; want %v, %v", create, removed, tt.wantCreate, tt.wantRemove)
			}
		})
	}
}

func TestNewChildIsControlledByTheParentAndCarriesTheContext(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	c := newChild(trace.ContextWithSpanContext(context.Background(), sc), parent, "demo-child-0")

	ref := metav1.GetControllerOfNoCopy(c)
	if ref == nil || ref.UID != parent.UID || ref.Kind != "ConfigMap" || ref.APIVersion != "v1" ||
		ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
		t.Errorf("owner reference %+v", c.OwnerReferences)
	}
	if c.Namespace != "ns" || c.Name != "demo-child-0" || c.Labels[labelParentUID] != "u-demo" {
		t.Errorf("child %s/%s labels %v", c.Namespace, c.Name, c.Labels)
	}
	if got, ok := objecttrace.SpanContextFromObject(c); !ok || got.SpanID() != sc.SpanID() {
		t.Errorf("trace context %v, %v", got, ok)
	}
}

func TestReconcileMakesTheChildrenAndMarksTheParentReady(t *testing.T) {
	p := parent.DeepCopy()
	p.Annotations = map[string]string{annChildren: "2", objecttrace.AnnotationTraceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	extra := child("demo-child-5", "u-demo")
	extra.Labels = map[string]string{labelParentUID: "u-demo"}
	client := fake.NewClientset(p, &extra)
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := indexer.Add(p); err != nil {
		t.Fatal(err)
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	c := &controller{client: client, parents: corelisters.NewConfigMapLister(indexer), endTrace: true,
		objects: objecttrace.New(objecttrace.WithTracerProvider(tp)), tracer: tp.Tracer(name)}

	if err := c.reconcile(context.Background(), "ns/demo"); err != nil {
		t.Fatal(err)
	}
	list, err := client.CoreV1().ConfigMaps("ns").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, cm := range list.Items {
		names = append(names, cm.Name)
		if cm.Name == "demo" && (cm.Annotations[annReady] != "2" || cm.Annotations[objecttrace.AnnotationTraceparent] != "") {
			t.Errorf("parent annotations %v", cm.Annotations)
		}
	}
	if want := []string{"demo", "demo-child-0", "demo-child-1"}; !slices.Equal(names, want) {
		t.Errorf("ConfigMaps %v, want %v", names, want)
	}

	spans := rec.Ended()
	if len(spans) != 4 {
		t.Fatalf("%d spans", len(spans))
	}
	reconcile := spans[3]
	if reconcile.Name() != "reconcile" || !reconcile.Parent().IsRemote() {
		t.Errorf("last span %q, parent remote %v", reconcile.Name(), reconcile.Parent().IsRemote())
	}
	for _, s := range spans[:3] {
		if s.Parent().SpanID() != reconcile.SpanContext().SpanID() {
			t.Errorf("%s is not a child of reconcile", s.Name())
		}
	}
}
