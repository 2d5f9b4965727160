package objecttrace_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubetrail/kubetrail/pkg/objecttrace"
)

// A controller reconciles a ConfigMap: its span lands in the ConfigMap's kubetrail trace, and
// the child it creates carries the span's context. In a real controller the provider exports
// OTLP to kubetrail's collector, and the clientset's rest.Config is wrapped with WrapTransport.
func Example() {
	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	tracer := objecttrace.New(objecttrace.WithTracerProvider(tp), objecttrace.WithControllerName("childmaker"))

	parent := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "demo", UID: "6f1c0d2e-5b8a-4c1e-9d3f-2a7b8c9d0e1f"}}
	ctx, span := tracer.StartSpanFromObject(context.Background(), parent, corev1.SchemeGroupVersion.WithKind("ConfigMap"), "reconcile")
	child := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "demo-child-0"}}
	objecttrace.EncodeContextIntoObject(ctx, child)
	// client.CoreV1().ConfigMaps("default").Create(ctx, child, metav1.CreateOptions{})
	span.End()

	s := recorder.Ended()[0]
	fmt.Println(s.Name(), "under the object span:", s.Parent().IsRemote())
	_, ok := objecttrace.SpanContextFromObject(child)
	fmt.Println("child carries the context:", ok)
	// Output:
	// reconcile under the object span: true
	// child carries the context: true
}

// A controller ends the object's trace once the object reached its desired state.
func ExampleRemoveSpanContextFromObject() {
	obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		objecttrace.AnnotationTraceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}}}
	sc, ok := objecttrace.SpanContextFromObject(obj)
	fmt.Println(sc.TraceID(), ok)
	fmt.Println(objecttrace.RemoveSpanContextFromObject(obj), len(obj.Annotations))
	// Output:
	// 4bf92f3577b34da6a3ce929d0e0e4736 true
	// true 0
}

// The requests a controller sends in a span's context carry traceparent and tracestate, so that
// the apiserver's spans join the object's trace. With client-go: cfg.Wrap(objecttrace.WrapTransport).
func ExampleWrapTransport() {
	apiserver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The member is kubetrail=1/<window>/<uid>/<cluster>, the window the current one.
		ts := r.Header.Get("tracestate")
		if m := strings.Split(ts, "/"); len(m) == 4 {
			m[1] = "<window>"
			ts = strings.Join(m, "/")
		}
		fmt.Println("tracestate:", ts)
	}))
	defer apiserver.Close()
	client := &http.Client{Transport: objecttrace.WrapTransport(nil)}
	defer client.CloseIdleConnections()

	tracer := objecttrace.New(objecttrace.WithTracerProvider(sdktrace.NewTracerProvider()), objecttrace.WithCluster("prod"))
	obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "demo", UID: "6f1c0d2e-5b8a-4c1e-9d3f-2a7b8c9d0e1f"}}
	ctx, span := tracer.StartSpanFromObject(context.Background(), obj, corev1.SchemeGroupVersion.WithKind("ConfigMap"), "reconcile")
	defer span.End()

	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, apiserver.URL+"/api/v1/namespaces/default/configmaps/demo", nil)
	if resp, err := client.Do(req); err == nil {
		resp.Body.Close()
	}
	// Output:
	// tracestate: kubetrail=1/<window>/6f1c0d2e-5b8a-4c1e-9d3f-2a7b8c9d0e1f/prod
}
