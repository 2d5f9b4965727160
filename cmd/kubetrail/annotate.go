package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubetrail/kubetrail/internal/model"
)

// AnnotationTraceContext is the annotation of the object-lifecycle tracing proposal that carries
// a W3C traceparent on an object, so the changes that follow can be read as one trace; k8s_audit
// reads the same key by default.
const AnnotationTraceContext = model.DefaultTraceContextAnnotation

// annotateClients are what annotate needs from a cluster; tests give fakes.
type annotateClients struct {
	mapper  meta.RESTMapper
	dynamic dynamic.Interface
}

// newAnnotateClients builds the clients from a kubeconfig; replaced in tests.
var newAnnotateClients = func(kubeconfig, kubecontext string) (*annotateClients, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubecontext})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w (set --kubeconfig or $KUBECONFIG)", err)
	}
	ns, _, _ := cc.Namespace()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, "", err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, "", err
	}
	return &annotateClients{mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)), dynamic: dyn}, ns, nil
}

// newTraceparent returns a fresh W3C traceparent (version 00, sampled) and its trace ID.
func newTraceparent() (traceparent, traceID string, err error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", err
	}
	traceID = hex.EncodeToString(b[:16])
	return "00-" + traceID + "-" + hex.EncodeToString(b[16:]) + "-01", traceID, nil
}

// runAnnotate is `kubetrail annotate`; cmd is the command as the user typed it, for the usage text.
func runAnnotate(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var namespace, kubeconfig, kubecontext string
	fs.StringVar(&namespace, "n", "", "namespace of the object (default: the kubeconfig context's)")
	fs.StringVar(&namespace, "namespace", "", "same as -n")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&kubecontext, "context", "", "kubeconfig context")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: "+cmd+" KIND/NAME -n NAMESPACE [--kubeconfig FILE] [--context NAME]")
		fmt.Fprintln(stderr, "Writes a fresh "+AnnotationTraceContext+" (W3C traceparent) on the object and prints its trace ID.")
		fs.PrintDefaults()
	}
	kindArg, name, err := parseObjectArg(fs, args, "annotate")
	if err != nil || kindArg == "" {
		return err
	}
	c, defaultNS, err := newAnnotateClients(kubeconfig, kubecontext)
	if err != nil {
		return err
	}
	if namespace == "" {
		namespace = defaultNS
	}
	gvr, namespaced, err := resourceFor(c.mapper, kindArg)
	if err != nil {
		return err
	}
	tp, traceID, err := newTraceparent()
	if err != nil {
		return err
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{AnnotationTraceContext: tp}}})
	ri := c.dynamic.Resource(gvr)
	var res dynamic.ResourceInterface = ri
	if namespaced {
		res = ri.Namespace(namespace)
	}
	if _, err := res.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "kubetrail"}); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%s %q not found in namespace %q: check the name and -n", gvr.Resource, name, namespace)
		}
		return fmt.Errorf("annotating %s/%s: %w", gvr.Resource, name, err)
	}
	fmt.Fprintln(stdout, traceID)
	fmt.Fprintf(stderr, "%s/%s annotated %s=%s\n", gvr.Resource, name, AnnotationTraceContext, tp)
	return nil
}

// resourceFor maps "deployment", "deploy", "deployments.apps" to the resource through discovery.
func resourceFor(m meta.RESTMapper, kindArg string) (schema.GroupVersionResource, bool, error) {
	res, group, _ := strings.Cut(strings.ToLower(kindArg), ".")
	var candidates []string
	candidates = append(candidates, res)
	if full, ok := kubectlShort[res]; ok {
		candidates = append([]string{full}, candidates...)
	}
	var lastErr error
	for _, r := range candidates {
		gvr, err := m.ResourceFor(schema.GroupVersionResource{Group: group, Resource: r})
		if err != nil {
			lastErr = err
			continue
		}
		gvk, err := m.KindFor(gvr)
		if err != nil {
			return gvr, true, nil
		}
		mapping, err := m.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return gvr, true, nil
		}
		return gvr, mapping.Scope.Name() == meta.RESTScopeNameNamespace, nil
	}
	return schema.GroupVersionResource{}, false, fmt.Errorf("unknown kind %q: %v (try the resource name as kubectl api-resources lists it)", kindArg, lastErr)
}

var kubectlShort = map[string]string{"deploy": "deployments", "rs": "replicasets", "po": "pods", "sts": "statefulsets",
	"ds": "daemonsets", "cj": "cronjobs", "svc": "services", "cm": "configmaps", "ns": "namespaces", "no": "nodes"}
