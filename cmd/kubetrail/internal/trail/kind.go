package trail

import (
	"strings"

	"github.com/kubetrail/kubetrail/internal/model"
)

// shortNames are kubectl's short names of the built-in kinds people trace most.
var shortNames = map[string]string{
	"deploy": "deployments", "rs": "replicasets", "po": "pods", "sts": "statefulsets", "ds": "daemonsets",
	"cj": "cronjobs", "svc": "services", "cm": "configmaps", "ns": "namespaces", "no": "nodes",
	"pvc": "persistentvolumeclaims", "pv": "persistentvolumes", "sa": "serviceaccounts", "hpa": "horizontalpodautoscalers",
	"ing": "ingresses", "pdb": "poddisruptionbudgets", "ep": "endpoints", "rc": "replicationcontrollers",
}

// groups are searched in this order for a kind given without its group.
var groups = []string{"", "apps", "batch", "autoscaling", "networking.k8s.io", "policy", "rbac.authorization.k8s.io",
	"discovery.k8s.io", "storage.k8s.io", "coordination.k8s.io", "scheduling.k8s.io", "node.k8s.io",
	"certificates.k8s.io", "admissionregistration.k8s.io", "apiextensions.k8s.io", "resource.k8s.io"}

// ResolveKind turns what a user types ("deployment", "deploy", "deployments.apps", "Deployment")
// into the kind the spans carry, with its group and resource when the built-in table knows it.
// An unknown kind (a custom resource) is taken as typed, capitalised: kubetrail's spans name the
// kind exactly as the apiserver does.
func ResolveKind(s string) (kind, group, resource string) {
	lower := strings.ToLower(s)
	name, grp, hasGroup := strings.Cut(lower, ".")
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
				return info.Kind, info.Group, info.Resource
			}
		}
	}
	if s == lower {
		s = strings.ToUpper(s[:1]) + s[1:]
	}
	if hasGroup {
		s, grp, _ = strings.Cut(s, ".")
		return s, grp, ""
	}
	return s, "", ""
}
