package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubetrail/kubetrail/cmd/kubetrail/internal/trail"
	"github.com/kubetrail/kubetrail/internal/model"
)

// kubeFlags are kubectl's flags for reaching a cluster, shared by every subcommand that asks one.
type kubeFlags struct {
	kubeconfig, context, namespace string
	fs                             *pflag.FlagSet
	// wrap, when set, wraps the clients' transport (apply sends its trace context with it).
	wrap func(http.RoundTripper) http.RoundTripper
}

func (k *kubeFlags) add(fs *pflag.FlagSet, namespaceUsage string) {
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "Path to the kubeconfig file to use (default: $KUBECONFIG, then ~/.kube/config).")
	fs.StringVar(&k.context, "context", "", "The name of the kubeconfig context to use (default: the current context).")
	fs.StringVarP(&k.namespace, "namespace", "n", "", namespaceUsage)
	k.fs = fs
}

// namespaceSet tells whether -n was given, even empty (-n ""): the namespace is then the flag's.
func (k *kubeFlags) namespaceSet() bool { return k.fs != nil && k.fs.Changed("namespace") }

// explicit tells whether the user named a kubeconfig or a context: failing to load it is then
// an error, not the absence of a cluster.
func (k *kubeFlags) explicit() bool { return k.kubeconfig != "" || k.context != "" }

// namespaceFor is the namespace of an object of a kind: -n, else the context's, for namespaced
// kinds; none for cluster-scoped ones, as kubectl ignores -n for them.
func (k *kubeFlags) namespaceFor(namespaced bool, c *cluster) string {
	switch {
	case !namespaced:
		return ""
	case k.namespaceSet():
		return k.namespace
	case c != nil && c.namespace != "":
		return c.namespace
	}
	return metav1.NamespaceDefault
}

// cluster is what the commands use of a cluster.
type cluster struct {
	context   string // the kubeconfig context, for messages
	namespace string // the context's namespace ("default" when it names none)
	disc      discovery.CachedDiscoveryInterface
	mapper    meta.RESTMapper
	dynamic   dynamic.Interface
}

// errNoKubeconfig: no kubeconfig was given and none was found ($KUBECONFIG and ~/.kube/config
// missing or empty, not in a pod).
var errNoKubeconfig = errors.New("no kubeconfig: set --kubeconfig or $KUBECONFIG")

// requestTimeout bounds each request to the cluster: trace falls back to the backend when the
// cluster does not answer, and must not hang on a cluster that is gone.
const requestTimeout = 10 * time.Second

// connect loads the kubeconfig as kubectl does (--kubeconfig, else $KUBECONFIG, else
// ~/.kube/config, else the pod's service account; --context, else the current context) and makes
// the clients. It does not contact the cluster: discovery is deferred until a kind is mapped.
// Replaced in tests.
var connect = func(k *kubeFlags, warnings io.Writer) (*cluster, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: k.context})
	cfg, err := cc.ClientConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) && !k.explicit() {
			return nil, errNoKubeconfig
		}
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	name := k.context
	if raw, err := cc.RawConfig(); err == nil && name == "" {
		name = raw.CurrentContext
	}
	w := escapedWarnings{warnings}
	cfg.Timeout = requestTimeout
	// kubectl's client rate: apply --wait reads every object each second.
	cfg.QPS, cfg.Burst = 50, 300
	cfg.WarningHandler = w
	if k.wrap != nil {
		cfg.Wrap(k.wrap)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return newCluster(name, ns, dc, dyn, w.warn), nil
}

// newCluster makes the RESTMapper kubectl makes: discovery (asked once, kept in memory) with
// the short names the cluster announces expanded.
func newCluster(context, namespace string, dc discovery.DiscoveryInterface, dyn dynamic.Interface, warn func(string)) *cluster {
	cached := memory.NewMemCacheClient(dc)
	mapper := restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(cached), cached, warn)
	return &cluster{context: context, namespace: namespace, disc: cached, mapper: mapper, dynamic: dyn}
}

// escapedWarnings prints the apiserver's warnings (deprecated APIs, ambiguous short names) as
// kubectl does, escaped: their text is the server's.
type escapedWarnings struct{ w io.Writer }

func (e escapedWarnings) HandleWarningHeader(_ int, _, text string) { e.warn(text) }

func (e escapedWarnings) warn(text string) {
	if e.w != nil {
		fmt.Fprint(e.w, "Warning: "+trail.Escape(text)+"\n")
	}
}

// mapping is a kind as the cluster serves it.
type mapping struct {
	gvr        schema.GroupVersionResource
	kind       string
	namespaced bool
}

// errUnreachable wraps a discovery that failed: the cluster did not answer (or not usefully).
type errUnreachable struct{ err error }

func (e errUnreachable) Error() string { return e.err.Error() }
func (e errUnreachable) Unwrap() error { return e.err }

// resolve maps what the user typed — a resource, its singular or short name, a kind, with or
// without version and group (deploy, deployments, deployment, Deployment, deployments.apps,
// deployments.v1.apps) — through the cluster's discovery. A cluster that cannot be asked is
// an errUnreachable; a kind it does not serve is a meta.NoKindMatchError or NoResourceMatchError.
func (c *cluster) resolve(arg string) (mapping, error) {
	// One discovery first, so an unreachable cluster costs one failed request, not one per
	// mapper layer; a partial answer (an aggregated API down) is enough for the rest.
	if _, lists, err := c.disc.ServerGroupsAndResources(); err != nil && len(lists) == 0 {
		return mapping{}, errUnreachable{err}
	}
	full, gr := schema.ParseResourceArg(strings.ToLower(arg))
	var gvr schema.GroupVersionResource
	var err error = &meta.NoResourceMatchError{PartialResource: gr.WithVersion("")}
	if full != nil {
		gvr, err = c.mapper.ResourceFor(*full)
	}
	if err != nil {
		gvr, err = c.mapper.ResourceFor(gr.WithVersion(""))
	}
	if err != nil {
		return mapping{}, err
	}
	gvk, err := c.mapper.KindFor(gvr)
	if err != nil {
		return mapping{}, err
	}
	rm, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return mapping{}, err
	}
	return mapping{gvr: rm.Resource, kind: gvk.Kind, namespaced: rm.Scope.Name() == meta.RESTScopeNameNamespace}, nil
}

func (c *cluster) get(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (*unstructured.Unstructured, error) {
	var res dynamic.ResourceInterface = c.dynamic.Resource(gvr)
	if namespace != "" {
		res = c.dynamic.Resource(gvr).Namespace(namespace)
	}
	return res.Get(ctx, name, metav1.GetOptions{})
}

// identity is what the cluster tells of an object for kubetrail's trace IDs: its UID and its
// chain of controlling owners, the root last.
type identity struct {
	uid    string
	owners []ownerRef
}

type ownerRef struct{ kind, name, uid string }

// root is the UID of the top of the chain, in whose traces the processor puts the object's
// windows (the object's own when it has no controlling owner).
func (id identity) root() string {
	if len(id.owners) == 0 {
		return id.uid
	}
	return id.owners[len(id.owners)-1].uid
}

// identify reads the object and walks its controlling owners up, as the processor nests
// objects (ownerReferences with controller: true), at most model.MaxOwnerDepth of them. An
// owner that cannot be read (gone, recreated under its name, forbidden) ends the walk at its
// reference: the processor keyed its trace on that UID when it saw the reference, so it is the
// best guess of the root; the backend's spans tell the rest.
func (c *cluster) identify(ctx context.Context, m mapping, namespace, name string) (identity, error) {
	obj, err := c.get(ctx, m.gvr, namespace, name)
	if err != nil {
		return identity{}, err
	}
	id := identity{uid: string(obj.GetUID())}
	seen := map[string]bool{id.uid: true}
	for range model.MaxOwnerDepth {
		ref := metav1.GetControllerOfNoCopy(obj)
		if ref == nil || ref.UID == "" || seen[string(ref.UID)] {
			break
		}
		seen[string(ref.UID)] = true
		id.owners = append(id.owners, ownerRef{kind: ref.Kind, name: ref.Name, uid: string(ref.UID)})
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil {
			break
		}
		rm, err := c.mapper.RESTMapping(schema.GroupKind{Group: gv.Group, Kind: ref.Kind}, gv.Version)
		if err != nil {
			break
		}
		ns := namespace
		if rm.Scope.Name() != meta.RESTScopeNameNamespace {
			ns = ""
		}
		owner, err := c.get(ctx, rm.Resource, ns, ref.Name)
		if err != nil || owner.GetUID() != ref.UID {
			break
		}
		obj = owner
	}
	return id, nil
}
