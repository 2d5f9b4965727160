package trail

import (
	"strings"

	"github.com/kubetrail/kubetrail/internal/model"
)

// shortNames are the short names a Kubernetes 1.36 apiserver announces for its built-in
// resources (`kubectl api-resources`, SHORTNAMES): the table that stands in for discovery when
// the cluster cannot be asked.
var shortNames = map[string]string{
	"cs": "componentstatuses", "cm": "configmaps", "ep": "endpoints", "ev": "events", "limits": "limitranges",
	"ns": "namespaces", "no": "nodes", "pvc": "persistentvolumeclaims", "pv": "persistentvolumes", "po": "pods",
	"rc": "replicationcontrollers", "quota": "resourcequotas", "sa": "serviceaccounts", "svc": "services",
	"crd": "customresourcedefinitions", "crds": "customresourcedefinitions",
	"ds": "daemonsets", "deploy": "deployments", "rs": "replicasets", "sts": "statefulsets",
	"hpa": "horizontalpodautoscalers", "cj": "cronjobs", "csr": "certificatesigningrequests",
	"ing": "ingresses", "netpol": "networkpolicies", "ip": "ipaddresses", "pdb": "poddisruptionbudgets",
	"pc": "priorityclasses", "sc": "storageclasses", "vac": "volumeattributesclasses",
}

// ShortNames returns the built-in short names, for shell completion.
func ShortNames() map[string]string { return shortNames }

// groups are searched in this order for a kind given without its group.
var groups = []string{"", "apps", "batch", "autoscaling", "networking.k8s.io", "policy", "rbac.authorization.k8s.io",
	"discovery.k8s.io", "storage.k8s.io", "coordination.k8s.io", "scheduling.k8s.io", "node.k8s.io",
	"certificates.k8s.io", "admissionregistration.k8s.io", "apiextensions.k8s.io", "resource.k8s.io",
	"apiregistration.k8s.io", "flowcontrol.apiserver.k8s.io", "events.k8s.io"}

// Kind is a kind as the spans name it, with what the built-in table knows of it.
type Kind struct {
	Kind     string // "Deployment"
	Group    string // "apps"; "" for the core group or when not known
	Resource string // "deployments"; "" when not known
	// Namespaced tells whether its objects live in a namespace; Known whether the table knew the
	// kind at all (an unknown kind, a custom resource, is taken as namespaced, as most are).
	Namespaced, Known bool
}

// ResolveKind turns what a user types ("deployment", "deploy", "deployments.apps",
// "deployments.v1.apps", "Deployment") into the kind the spans carry, through the built-in
// table: what discovery answers when the cluster can be asked, without asking it. An unknown
// kind (a custom resource) is taken as typed, capitalised: kubetrail's spans name the kind
// exactly as the apiserver does.
func ResolveKind(s string) Kind {
	lower := strings.ToLower(s)
	name, grp, hasGroup := strings.Cut(lower, ".")
	if v, rest, ok := strings.Cut(grp, "."); ok && isVersion(v) {
		grp = rest // resource.version.group, as kubectl accepts it
	}
	if r, ok := shortNames[name]; ok {
		name = r
	}
	m := model.BuiltinMapper()
	try := groups
	if hasGroup {
		try = []string{grp}
	}
	for _, g := range try {
		for _, r := range []string{name, name + "s", name + "es", strings.TrimSuffix(name, "y") + "ies"} {
			if info, ok := m.ByResource(g, r); ok {
				return Kind{Kind: info.Kind, Group: info.Group, Resource: info.Resource, Namespaced: info.Namespaced, Known: true}
			}
		}
	}
	kind, _, _ := strings.Cut(s, ".")
	if kind != "" && kind == name {
		kind = strings.ToUpper(kind[:1]) + kind[1:]
	}
	if !hasGroup {
		grp = ""
	}
	return Kind{Kind: kind, Group: grp, Namespaced: true}
}

// isVersion tells an API version ("v1", "v2beta1") from a group's first label.
func isVersion(s string) bool {
	rest, ok := strings.CutPrefix(s, "v")
	if !ok || rest == "" || rest[0] < '1' || rest[0] > '9' {
		return false
	}
	rest = strings.TrimLeft(rest, "0123456789")
	for _, p := range []string{"alpha", "beta"} {
		if after, ok := strings.CutPrefix(rest, p); ok {
			return after != "" && strings.Trim(after, "0123456789") == ""
		}
	}
	return rest == ""
}
