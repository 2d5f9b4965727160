package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/trace"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/kubetrail/kubetrail/cmd/kubetrail/internal/trail"
	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/pkg/objecttrace"
)

// freshAnnotations returns the annotations that start a new trace: objecttrace's trace context
// annotation holding a fresh, sampled span context; and that context's trace ID.
func freshAnnotations() (map[string]string, string, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, "", err
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID(b[:16]), SpanID: trace.SpanID(b[16:]), TraceFlags: trace.FlagsSampled})
	var meta metav1.ObjectMeta
	objecttrace.EncodeContextIntoObject(trace.ContextWithSpanContext(context.Background(), sc), &meta)
	if meta.Annotations == nil {
		return nil, "", errors.New("no valid trace context drawn: try again")
	}
	return meta.Annotations, sc.TraceID().String(), nil
}

// annotateCommand is annotate's command line; cmd is the command as the user typed it.
func annotateCommand(cmd string, kube *kubeFlags) *command {
	c := newCommand(cmd,
		"Start a trace of the changes about to be made to an object: write a fresh "+objecttrace.AnnotationTraceparent+"\nannotation (a W3C traceparent, as KEP-5915 names it) on it and print its trace ID.",
		"The collector links every later write of the object, and the object's window span, to that trace.\nThe annotation is printed on stderr.",
		fmt.Sprintf(`  # Annotate a Deployment of the current context's namespace, keep the trace ID
  id=$(%[1]s deploy/web)

  # The same object in another namespace and context
  %[1]s deployment web -n shop --context prod-eu-1
`, cmd),
		"(TYPE/NAME | TYPE NAME) [options]")
	c.group("Cluster", func(fs *pflag.FlagSet) {
		kube.add(fs, "The object's namespace (default: the kubeconfig context's, then \"default\"; ignored for cluster-scoped kinds).")
	})
	return c
}

// runAnnotate is `kubetrail annotate`; cmd is the command as the user typed it, for the help.
func runAnnotate(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) error {
	var kube kubeFlags
	c := annotateCommand(cmd, &kube)
	pos, err := c.parse(args, stdout)
	if err != nil {
		return err
	}
	kindArg, name, err := objectArg(pos, cmd)
	if err != nil {
		return err
	}
	cl, err := connect(&kube, stderr)
	if err != nil {
		return err
	}
	m, err := cl.resolve(kindArg)
	switch {
	case meta.IsNoMatchError(err):
		return fmt.Errorf("unknown kind %q: the cluster (context %s) serves no such resource (try the name kubectl api-resources lists)", kindArg, cl.context)
	case err != nil:
		return fmt.Errorf("cluster (context %s) unreachable: %w", cl.context, err)
	}
	namespace := kube.namespaceFor(m.namespaced, cl)
	annotations, traceID, err := freshAnnotations()
	if err != nil {
		return err
	}
	// The fresh context replaces whatever the object carried: a trace state of another context
	// and the older key (null deletes them in a merge patch).
	patched := map[string]any{objecttrace.AnnotationTracestate: nil, model.AnnotationLegacyTraceContext: nil}
	for k, v := range annotations {
		patched[k] = v
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": patched}})
	var res dynamic.ResourceInterface = cl.dynamic.Resource(m.gvr)
	if namespace != "" {
		res = cl.dynamic.Resource(m.gvr).Namespace(namespace)
	}
	if _, err := res.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "kubetrail"}); err != nil {
		if apierrors.IsNotFound(err) {
			if namespace == "" {
				return fmt.Errorf("%s %q not found: check the name", m.gvr.Resource, name)
			}
			return fmt.Errorf("%s %q not found in namespace %q: check the name and -n", m.gvr.Resource, name, namespace)
		}
		return fmt.Errorf("annotating %s/%s: %w", m.gvr.Resource, name, err)
	}
	fmt.Fprintln(stdout, traceID)
	fmt.Fprintf(stderr, "%s/%s annotated %s=%s\n", m.gvr.Resource, trail.Escape(name), objecttrace.AnnotationTraceparent, annotations[objecttrace.AnnotationTraceparent])
	return nil
}
