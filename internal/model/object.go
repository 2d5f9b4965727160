package model

import (
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/kubetrail/kubetrail/internal/objid"
)

// Owner is an object's controlling owner, as its ownerReference names it.
type Owner struct {
	APIVersion string
	Kind       string
	Name       string
	UID        string
}

// IsZero reports whether no owner is known.
func (o Owner) IsZero() bool { return o.UID == "" && o.Name == "" }

// Object is the identity of one Kubernetes object as seen by one cluster.
type Object struct {
	Cluster   string
	Group     string // "" for the core group
	Version   string
	Resource  string // plural, lower case: "pods", "replicasets"
	Kind      string // "Pod", "ReplicaSet"
	Namespace string // "" for cluster-scoped objects
	Name      string
	UID       string // "" when not known
	Owner     Owner  // zero when no controlling owner is known
	// NoOwner says the object's own body was seen and names no controlling owner: a root,
	// definitively, not an object whose owner is merely unknown (which is worth waiting for).
	NoOwner bool
}

// Key identifies an object within all clusters. It is UID-based when the UID is known, so an
// object deleted and recreated under the same name is a different object; otherwise it is the
// object's name path, which the processor resolves to a UID through its name index.
type Key string

// Key returns the object's key: "<cluster>/uid/<uid>" or
// "<cluster>/name/<group>/<resource>/<namespace>/<name>".
func (o Object) Key() Key {
	if o.UID != "" {
		return UIDKey(o.Cluster, o.UID)
	}
	return Key(o.NameKey())
}

// UIDKey is the key of the object with the given UID in the given cluster.
func UIDKey(cluster, uid string) Key {
	return Key(objid.UIDKey(cluster, uid))
}

// NameKey is the object's name path, the key of the processor's name index.
func (o Object) NameKey() string {
	var buf [128]byte // most keys fit: the string is then the only allocation
	return string(o.AppendNameKey(buf[:0]))
}

// AppendNameKey appends NameKey to dst: a lookup by name needs no string of its own.
func (o Object) AppendNameKey(dst []byte) []byte {
	dst = append(dst, o.Cluster...)
	dst = append(dst, "/name/"...)
	dst = append(dst, o.Group...)
	dst = append(dst, '/')
	dst = append(dst, o.Resource...)
	dst = append(dst, '/')
	dst = append(dst, o.Namespace...)
	dst = append(dst, '/')
	return append(dst, o.Name...)
}

// HasUIDKey reports whether the key is UID-based.
func (k Key) HasUIDKey() bool {
	i := strings.IndexByte(string(k), '/')
	return i >= 0 && strings.HasPrefix(string(k[i:]), "/uid/")
}

// APIVersion is "group/version", or "version" for the core group.
func (o Object) APIVersion() string {
	if o.Group == "" {
		return o.Version
	}
	return o.Group + "/" + o.Version
}

// DisplayName is the object span's name: "<Kind> <namespace>/<name>", or "<Kind> <name>" for a
// cluster-scoped object. The kind falls back to the resource name when unknown.
func (o Object) DisplayName() string {
	kind := o.Kind
	if kind == "" {
		kind = o.Resource
	}
	if o.Namespace == "" {
		return kind + " " + o.Name
	}
	return kind + " " + o.Namespace + "/" + o.Name
}

// MaxOwnerDepth bounds an ownership chain: an object has at most this many owners above it.
// Real chains are two or three deep (CronJob → Job → Pod); anything deeper is a loop a cycle
// check missed or garbage. The processor makes the top of a longer chain a root, and
// `kubetrail trace` shows no deeper level of a tree read from a backend (which anyone who can
// write spans to it shapes).
const MaxOwnerDepth = 16

// OwnerObject returns the identity of o's controlling owner, and false when none is known.
// Owner references carry a UID but no resource name, so the resource comes from the mapper and
// stays empty when no mapper knows the kind (a guessed plural would be wrong for irregular kinds
// and would send owner look-ups to resources that do not exist; the key is the owner's UID
// either way). A namespaced object's owner is in the same namespace unless the mapper knows the
// owner's kind to be cluster-scoped.
func (o Object) OwnerObject(m Mapper) (Object, bool) {
	if o.Owner.IsZero() {
		return Object{}, false
	}
	group, version := SplitAPIVersion(o.Owner.APIVersion)
	owner := Object{
		Cluster:   o.Cluster,
		Group:     group,
		Version:   version,
		Kind:      o.Owner.Kind,
		Namespace: o.Namespace,
		Name:      o.Owner.Name,
		UID:       o.Owner.UID,
	}
	if m != nil {
		if info, ok := m.ByKind(group, o.Owner.Kind); ok {
			owner.Resource = info.Resource
			if !info.Namespaced {
				owner.Namespace = ""
			}
		}
	}
	return owner, true
}

// SplitAPIVersion splits "apps/v1" into ("apps", "v1") and "v1" into ("", "v1").
func SplitAPIVersion(apiVersion string) (group, version string) {
	if i := strings.LastIndexByte(apiVersion, '/'); i >= 0 {
		return apiVersion[:i], apiVersion[i+1:]
	}
	return "", apiVersion
}

// Identity is o without what a write says about it (its owner): the key of its Resource.
func (o Object) Identity() Object {
	o.Owner, o.NoOwner = Owner{}, false
	return o
}

// ServiceName is the service.name of o's spans: its kind, or its resource when the kind is not
// known.
func (o Object) ServiceName() string {
	if o.Kind != "" {
		return o.Kind
	}
	return o.Resource
}

// PutResource writes the object's identity onto the attributes of its spans' Resource
// (docs/span-model.md, Resource): the cluster, service.name, the k8s.object.* names, and the
// semantic-convention names of the kinds that have them (k8s.pod.name, k8s.pod.uid, …). Empty
// optional fields are left out rather than written as empty strings; the API group is always
// written, since "" is the meaningful name of the core group.
func (o Object) PutResource(attrs pcommon.Map) {
	attrs.EnsureCapacity(11)
	attrs.PutStr(AttrClusterName, o.Cluster)
	attrs.PutStr(AttrServiceName, o.ServiceName())
	attrs.PutStr(AttrObjectAPIGroup, o.Group)
	putNonEmpty(attrs, AttrObjectAPIVersion, o.APIVersion())
	putNonEmpty(attrs, AttrObjectResource, o.Resource)
	putNonEmpty(attrs, AttrObjectKind, o.Kind)
	putNonEmpty(attrs, AttrNamespaceName, o.Namespace)
	putNonEmpty(attrs, AttrObjectName, o.Name)
	putNonEmpty(attrs, AttrObjectUID, o.UID)
	o.putSemconv(attrs)
}

// PutOwner writes what the span's write or body said of the object's controlling owner onto
// the span's attributes: the owner's identity, or k8s.object.owner.none when the body named
// none. Owners change (adoption, orphaning), so they are the span's, not the Resource's.
func (o Object) PutOwner(attrs pcommon.Map) {
	if !o.Owner.IsZero() {
		putNonEmpty(attrs, AttrOwnerAPIVersion, o.Owner.APIVersion)
		putNonEmpty(attrs, AttrOwnerKind, o.Owner.Kind)
		putNonEmpty(attrs, AttrOwnerName, o.Owner.Name)
		putNonEmpty(attrs, AttrOwnerUID, o.Owner.UID)
	} else if o.NoOwner {
		attrs.PutBool(AttrOwnerNone, true)
	}
}

// ObjectFromAttributes reads an object's identity back from a span's Resource, and its owner
// from the span's attributes. A k8s.object.uid on the span overrides the Resource's: the
// processor puts it there when it resolved the UID of a request that named none. A Resource
// without a kind or resource is read as a span before span model 1.0, identity on the span. It
// reports false when the span carries no object identity: neither a UID nor a name with a
// resource or kind.
func ObjectFromAttributes(resource, attrs pcommon.Map) (Object, bool) {
	var o Object
	o.Cluster = str(resource, AttrClusterName)
	id, legacy := resource, false
	if _, ok := resource.Get(AttrObjectKind); !ok {
		if _, ok := resource.Get(AttrObjectResource); !ok {
			// A span of a kubetrail before span model 1.0 carries its identity itself: read it
			// there, so that a processor of this version nests the spans of older receivers
			// during an upgrade.
			id, legacy = attrs, true
		}
	}
	o.Group = str(id, AttrObjectAPIGroup)
	_, o.Version = SplitAPIVersion(str(id, AttrObjectAPIVersion))
	o.Resource = str(id, AttrObjectResource)
	o.Kind = str(id, AttrObjectKind)
	o.Name = str(id, AttrObjectName)
	if o.Group != "" || o.Kind != "Namespace" || legacy {
		// A Namespace's k8s.namespace.name on the Resource is its own name (the semantic
		// conventions'), not a namespace it is in.
		o.Namespace = str(id, AttrNamespaceName)
	}
	o.UID = str(id, AttrObjectUID)
	if uid := str(attrs, AttrObjectUID); uid != "" {
		o.UID = uid
	}
	o.Owner = Owner{
		APIVersion: str(attrs, AttrOwnerAPIVersion),
		Kind:       str(attrs, AttrOwnerKind),
		Name:       str(attrs, AttrOwnerName),
		UID:        str(attrs, AttrOwnerUID),
	}
	if v, ok := attrs.Get(AttrOwnerNone); ok && v.Bool() && o.Owner.IsZero() {
		o.NoOwner = true
	}
	if o.UID == "" && (o.Name == "" || (o.Resource == "" && o.Kind == "")) {
		return Object{}, false
	}
	return o, true
}

func str(m pcommon.Map, key string) string {
	if v, ok := m.Get(key); ok {
		return v.Str()
	}
	return ""
}

func putNonEmpty(m pcommon.Map, key, value string) {
	if value != "" {
		m.PutStr(key, value)
	}
}

// semconvName is the pair of semantic-convention attributes naming an object of one kind.
type semconvName struct{ name, uid string }

// semconvKinds are the kinds the OpenTelemetry semantic conventions name: an object of one of
// them also carries k8s.<kind>.name and k8s.<kind>.uid, which backends already index.
var semconvKinds = map[[2]string]semconvName{
	{"", "Pod"}:             {string(semconv.K8SPodNameKey), string(semconv.K8SPodUIDKey)},
	{"", "Node"}:            {string(semconv.K8SNodeNameKey), string(semconv.K8SNodeUIDKey)},
	{"apps", "Deployment"}:  {string(semconv.K8SDeploymentNameKey), string(semconv.K8SDeploymentUIDKey)},
	{"apps", "ReplicaSet"}:  {string(semconv.K8SReplicaSetNameKey), string(semconv.K8SReplicaSetUIDKey)},
	{"apps", "StatefulSet"}: {string(semconv.K8SStatefulSetNameKey), string(semconv.K8SStatefulSetUIDKey)},
	{"apps", "DaemonSet"}:   {string(semconv.K8SDaemonSetNameKey), string(semconv.K8SDaemonSetUIDKey)},
	{"batch", "Job"}:        {string(semconv.K8SJobNameKey), string(semconv.K8SJobUIDKey)},
	{"batch", "CronJob"}:    {string(semconv.K8SCronJobNameKey), string(semconv.K8SCronJobUIDKey)},
}

// semconvUIDKeys are the semantic conventions' k8s.<kind>.uid keys, the most specific kind
// first: a Pod's spans may carry its ReplicaSet's and Deployment's UIDs too (the k8sattributes
// processor adds them), and the Pod is the object they are about.
var semconvUIDKeys = []string{
	string(semconv.K8SPodUIDKey), string(semconv.K8SJobUIDKey), string(semconv.K8SReplicaSetUIDKey),
	string(semconv.K8SStatefulSetUIDKey), string(semconv.K8SDaemonSetUIDKey), string(semconv.K8SDeploymentUIDKey),
	string(semconv.K8SCronJobUIDKey), string(semconv.K8SNodeUIDKey),
}

// SemconvUID returns the UID of the object a span names by the semantic conventions
// (k8s.pod.uid, k8s.deployment.uid, …): the most specific key the span carries, else the most
// specific its Resource carries. The UID is as sent; the caller bounds it.
func SemconvUID(resource, attrs pcommon.Map) (uid, key string, ok bool) {
	for _, m := range [2]pcommon.Map{attrs, resource} {
		for _, k := range semconvUIDKeys {
			if v, found := m.Get(k); found && v.Type() == pcommon.ValueTypeStr && v.Str() != "" {
				return v.Str(), k, true
			}
		}
	}
	return "", "", false
}

// putSemconv writes the semantic-convention names of the object next to the generic
// k8s.object.* ones: k8s.pod.name and k8s.pod.uid for a Pod, k8s.deployment.* for a
// Deployment, …; a Namespace gets k8s.namespace.name (its own name). Other kinds get nothing.
func (o Object) putSemconv(attrs pcommon.Map) {
	if o.Group == "" && o.Kind == "Namespace" {
		putNonEmpty(attrs, AttrNamespaceName, o.Name)
		return
	}
	k, ok := semconvKinds[[2]string{o.Group, o.Kind}]
	if !ok {
		return
	}
	putNonEmpty(attrs, k.name, o.Name)
	putNonEmpty(attrs, k.uid, o.UID)
}

// ShortUser shortens Kubernetes user names: system:serviceaccount:kube-system:deployment-controller
// is deployment-controller, system:kube-scheduler is kube-scheduler, system:node:n1 is kubelet/n1.
func ShortUser(u string) string {
	switch {
	case strings.HasPrefix(u, "system:serviceaccount:"):
		parts := strings.Split(u, ":")
		return parts[len(parts)-1]
	case strings.HasPrefix(u, "system:node:"):
		return "kubelet/" + strings.TrimPrefix(u, "system:node:")
	case strings.HasPrefix(u, "system:"):
		return strings.TrimPrefix(u, "system:")
	case u == "":
		return "?"
	}
	return u
}
