package model

import "sync"

// ResourceInfo describes one API resource: audit events name it by resource ("pods"), Events and
// ownerReferences by kind ("Pod").
type ResourceInfo struct {
	Group      string
	Version    string // the preferred version
	Resource   string
	Kind       string
	Namespaced bool
}

// Mapper translates between resources and kinds within an API group.
type Mapper interface {
	ByResource(group, resource string) (ResourceInfo, bool)
	ByKind(group, kind string) (ResourceInfo, bool)
}

// KindFor returns the kind of group/resource. When no mapper knows it, the resource name stands
// in for the kind: a guessed singular would be wrong for irregular plurals and CRDs.
func KindFor(m Mapper, group, resource string) string {
	if m != nil {
		if info, ok := m.ByResource(group, resource); ok {
			return info.Kind
		}
	}
	return resource
}

// Chain asks each mapper in turn and returns the first answer.
func Chain(mappers ...Mapper) Mapper { return chain(mappers) }

type chain []Mapper

func (c chain) ByResource(group, resource string) (ResourceInfo, bool) {
	for _, m := range c {
		if m == nil {
			continue
		}
		if info, ok := m.ByResource(group, resource); ok {
			return info, true
		}
	}
	return ResourceInfo{}, false
}

func (c chain) ByKind(group, kind string) (ResourceInfo, bool) {
	for _, m := range c {
		if m == nil {
			continue
		}
		if info, ok := m.ByKind(group, kind); ok {
			return info, true
		}
	}
	return ResourceInfo{}, false
}

// TableMapper is a fixed set of resources, safe for concurrent use once built.
type TableMapper struct {
	byResource map[[2]string]ResourceInfo
	byKind     map[[2]string]ResourceInfo
}

// NewTableMapper indexes the given resources by group+resource and group+kind.
func NewTableMapper(infos []ResourceInfo) *TableMapper {
	t := &TableMapper{
		byResource: make(map[[2]string]ResourceInfo, len(infos)),
		byKind:     make(map[[2]string]ResourceInfo, len(infos)),
	}
	for _, info := range infos {
		t.byResource[[2]string{info.Group, info.Resource}] = info
		if _, dup := t.byKind[[2]string{info.Group, info.Kind}]; !dup {
			t.byKind[[2]string{info.Group, info.Kind}] = info
		}
	}
	return t
}

// ByResource implements Mapper.
func (t *TableMapper) ByResource(group, resource string) (ResourceInfo, bool) {
	info, ok := t.byResource[[2]string{group, resource}]
	return info, ok
}

// ByKind implements Mapper.
func (t *TableMapper) ByKind(group, kind string) (ResourceInfo, bool) {
	info, ok := t.byKind[[2]string{group, kind}]
	return info, ok
}

var builtin = sync.OnceValue(func() *TableMapper { return NewTableMapper(builtinResources) })

// BuiltinMapper knows the standard resources a Kubernetes 1.36 apiserver serves. CRDs need
// discovery (see internal/k8sconfig).
func BuiltinMapper() Mapper { return builtin() }

// builtinResources lists the built-in API resources at their preferred versions.
var builtinResources = []ResourceInfo{
	{"", "v1", "bindings", "Binding", true},
	{"", "v1", "componentstatuses", "ComponentStatus", false},
	{"", "v1", "configmaps", "ConfigMap", true},
	{"", "v1", "endpoints", "Endpoints", true},
	{"", "v1", "events", "Event", true},
	{"", "v1", "limitranges", "LimitRange", true},
	{"", "v1", "namespaces", "Namespace", false},
	{"", "v1", "nodes", "Node", false},
	{"", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", true},
	{"", "v1", "persistentvolumes", "PersistentVolume", false},
	{"", "v1", "pods", "Pod", true},
	{"", "v1", "podtemplates", "PodTemplate", true},
	{"", "v1", "replicationcontrollers", "ReplicationController", true},
	{"", "v1", "resourcequotas", "ResourceQuota", true},
	{"", "v1", "secrets", "Secret", true},
	{"", "v1", "serviceaccounts", "ServiceAccount", true},
	{"", "v1", "services", "Service", true},
	{"admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", "MutatingWebhookConfiguration", false},
	{"admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", "ValidatingWebhookConfiguration", false},
	{"admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", "ValidatingAdmissionPolicy", false},
	{"admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings", "ValidatingAdmissionPolicyBinding", false},
	{"admissionregistration.k8s.io", "v1", "mutatingadmissionpolicies", "MutatingAdmissionPolicy", false},
	{"admissionregistration.k8s.io", "v1", "mutatingadmissionpolicybindings", "MutatingAdmissionPolicyBinding", false},
	{"apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", false},
	{"apiregistration.k8s.io", "v1", "apiservices", "APIService", false},
	{"apps", "v1", "controllerrevisions", "ControllerRevision", true},
	{"apps", "v1", "daemonsets", "DaemonSet", true},
	{"apps", "v1", "deployments", "Deployment", true},
	{"apps", "v1", "replicasets", "ReplicaSet", true},
	{"apps", "v1", "statefulsets", "StatefulSet", true},
	{"authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview", false},
	{"authentication.k8s.io", "v1", "tokenreviews", "TokenReview", false},
	{"authorization.k8s.io", "v1", "localsubjectaccessreviews", "LocalSubjectAccessReview", true},
	{"authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", false},
	{"authorization.k8s.io", "v1", "selfsubjectrulesreviews", "SelfSubjectRulesReview", false},
	{"authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", false},
	{"autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", true},
	{"batch", "v1", "cronjobs", "CronJob", true},
	{"batch", "v1", "jobs", "Job", true},
	{"certificates.k8s.io", "v1", "certificatesigningrequests", "CertificateSigningRequest", false},
	{"coordination.k8s.io", "v1", "leases", "Lease", true},
	{"discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", true},
	{"events.k8s.io", "v1", "events", "Event", true},
	{"flowcontrol.apiserver.k8s.io", "v1", "flowschemas", "FlowSchema", false},
	{"flowcontrol.apiserver.k8s.io", "v1", "prioritylevelconfigurations", "PriorityLevelConfiguration", false},
	{"networking.k8s.io", "v1", "ingressclasses", "IngressClass", false},
	{"networking.k8s.io", "v1", "ingresses", "Ingress", true},
	{"networking.k8s.io", "v1", "ipaddresses", "IPAddress", false},
	{"networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", true},
	{"networking.k8s.io", "v1", "servicecidrs", "ServiceCIDR", false},
	{"node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", false},
	{"policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", true},
	{"rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", false},
	{"rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", false},
	{"rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", true},
	{"rbac.authorization.k8s.io", "v1", "roles", "Role", true},
	{"resource.k8s.io", "v1", "deviceclasses", "DeviceClass", false},
	{"resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", true},
	{"resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", true},
	{"resource.k8s.io", "v1", "resourceslices", "ResourceSlice", false},
	{"scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", false},
	{"storage.k8s.io", "v1", "csidrivers", "CSIDriver", false},
	{"storage.k8s.io", "v1", "csinodes", "CSINode", false},
	{"storage.k8s.io", "v1", "csistoragecapacities", "CSIStorageCapacity", true},
	{"storage.k8s.io", "v1", "storageclasses", "StorageClass", false},
	{"storage.k8s.io", "v1", "volumeattachments", "VolumeAttachment", false},
	{"storage.k8s.io", "v1", "volumeattributesclasses", "VolumeAttributesClass", false},
}
