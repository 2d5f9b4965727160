package main

import (
	"regexp"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/pkg/objecttrace"
)

var traceparentRE = regexp.MustCompile(`^00-([0-9a-f]{32})-[0-9a-f]{16}-01$`)

func TestAnnotateWritesAFreshTraceparentAndPrintsItsTraceID(t *testing.T) {
	web := object("apps/v1", "Deployment", "shop", "web", "6f1c2f9e-0000-4000-8000-000000000001")
	// A context of the older key and a stale trace state: the fresh context replaces both.
	web.SetAnnotations(map[string]string{"keep": "me", model.AnnotationLegacyTraceContext: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", objecttrace.AnnotationTracestate: "old=1"})
	fc := withFakeCluster(t, "shop", web)

	var ids []string
	// TYPE/NAME and TYPE NAME, the namespace from the context and from -n.
	for _, args := range [][]string{{"annotate", "deploy/web"}, {"annotate", "deployment", "web", "-n", "shop"}} {
		code, out, errOut := kubetrail(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		got, err := fc.dynamic.Resource(deploymentsGVR).Namespace("shop").Get(t.Context(), "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		m := traceparentRE.FindStringSubmatch(got.GetAnnotations()[objecttrace.AnnotationTraceparent])
		if m == nil {
			t.Fatalf("annotation %q is not a W3C traceparent", got.GetAnnotations()[objecttrace.AnnotationTraceparent])
		}
		if strings.TrimSpace(out) != m[1] {
			t.Fatalf("printed %q, annotation's trace ID %s", out, m[1])
		}
		if a := got.GetAnnotations(); len(a) != 2 || a["keep"] != "me" {
			t.Fatalf("annotations %v: want the fresh traceparent and the others kept, the older key and the stale state gone", a)
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

// Without a kubeconfig, annotate has nothing to write to: it says where a kubeconfig comes from.
func TestAnnotateWithoutAKubeconfigSaysHowToGiveOne(t *testing.T) {
	code, _, errOut := kubetrail(t, "annotate", "deploy/web")
	if code != 1 || !strings.Contains(errOut, "no kubeconfig: set --kubeconfig or $KUBECONFIG") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}
