package main

import (
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"
)

var traceparentRE = regexp.MustCompile(`^00-([0-9a-f]{32})-[0-9a-f]{16}-01$`)

func TestAnnotateWritesAFreshTraceparentAndPrintsItsTraceID(t *testing.T) {
	deployments := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, meta.RESTScopeNamespace)
	web := &unstructured.Unstructured{}
	web.SetAPIVersion("apps/v1")
	web.SetKind("Deployment")
	web.SetNamespace("shop")
	web.SetName("web")
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{deployments: "DeploymentList"}, web)
	prev := newAnnotateClients
	t.Cleanup(func() { newAnnotateClients = prev })
	newAnnotateClients = func(string, string) (*annotateClients, string, error) {
		return &annotateClients{mapper: mapper, dynamic: dyn}, "default", nil
	}

	var ids []string
	for range 2 {
		code, out, errOut := kubetrail(t, "annotate", "deploy/web", "-n", "shop")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		got, err := dyn.Resource(deployments).Namespace("shop").Get(t.Context(), "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		m := traceparentRE.FindStringSubmatch(got.GetAnnotations()[AnnotationTraceContext])
		if m == nil {
			t.Fatalf("annotation %q is not a W3C traceparent", got.GetAnnotations()[AnnotationTraceContext])
		}
		if strings.TrimSpace(out) != m[1] {
			t.Fatalf("printed %q, annotation's trace ID %s", out, m[1])
		}
		ids = append(ids, m[1])
	}
	if ids[0] == ids[1] {
		t.Fatal("two annotations got the same trace ID: each must be fresh")
	}

	code, _, errOut := kubetrail(t, "annotate", "deployment/missing", "-n", "shop")
	if code != 1 || !strings.Contains(errOut, `"missing" not found in namespace "shop"`) {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	code, _, errOut = kubetrail(t, "annotate", "gizmo/x", "-n", "shop")
	if code != 1 || !strings.Contains(errOut, `unknown kind "gizmo"`) {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}
