package auditconv

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// A body parsed into a tree: map[string]any, []any, string, json.Number, bool or nil. Numbers
// stay json.Number so that diffs print them exactly as the apiserver wrote them.
type tree = map[string]any

func child(t tree, key string) tree {
	m, _ := t[key].(map[string]any)
	return m
}

func str(t tree, key string) string {
	s, _ := t[key].(string)
	return s
}

// objectMeta is the part of a body's metadata that identifies the object.
type objectMeta struct {
	Kind            string
	APIVersion      string
	Name            string
	Namespace       string
	UID             string
	ResourceVersion string
	Owner           ownerRef
	// TraceContext is the value of the trace-context annotation (unparsed).
	TraceContext string
	// NodeName is a Pod's spec.nodeName; Target is a Binding's target.name.
	NodeName, Target string
	// Rollout is what the body says of the object's intended state and its revision.
	Rollout rollout
}

// rollout is what a body says of the rollout it belongs to (docs/span-model.md, Rollouts):
// metadata.generation and status.observedGeneration (0 when absent or not an integer), the
// deployment.kubernetes.io/revision annotation, and the pod-template-hash and
// controller-revision-hash labels (the template a ReplicaSet, or a Pod of a ReplicaSet,
// StatefulSet or DaemonSet, was made from).
type rollout struct {
	Generation, ObservedGeneration int64
	Revision                       string
	TemplateHash, RevisionHash     string
}

// Keys of the annotation and labels rollout reads.
const (
	annotationRevision = "deployment.kubernetes.io/revision"
	labelTemplateHash  = "pod-template-hash"
	labelRevisionHash  = "controller-revision-hash"
)

// treeInt is an integer member of t, 0 when absent or not an integer.
func treeInt(t tree, key string) int64 {
	n, _ := t[key].(json.Number)
	v, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil {
		return 0
	}
	return v
}

type ownerRef struct {
	APIVersion, Kind, Name, UID string
}

func metaOf(t tree, annotation string) objectMeta {
	md := child(t, "metadata")
	m := objectMeta{
		Kind:            str(t, "kind"),
		APIVersion:      str(t, "apiVersion"),
		Name:            str(md, "name"),
		Namespace:       str(md, "namespace"),
		UID:             str(md, "uid"),
		ResourceVersion: str(md, "resourceVersion"),
		TraceContext:    str(child(md, "annotations"), annotation),
		Rollout: rollout{
			Generation:         treeInt(md, "generation"),
			ObservedGeneration: treeInt(child(t, "status"), "observedGeneration"),
			Revision:           str(child(md, "annotations"), annotationRevision),
			TemplateHash:       str(child(md, "labels"), labelTemplateHash),
			RevisionHash:       str(child(md, "labels"), labelRevisionHash),
		},
	}
	if m.Kind == "Binding" {
		m.Target = str(child(t, "target"), "name")
	}
	if m.Kind == "Pod" {
		m.NodeName = str(child(t, "spec"), "nodeName")
	}
	refs, _ := md["ownerReferences"].([]any)
	for _, r := range refs {
		ref, _ := r.(map[string]any)
		if c, _ := ref["controller"].(bool); c {
			m.Owner = ownerRef{APIVersion: str(ref, "apiVersion"), Kind: str(ref, "kind"), Name: str(ref, "name"), UID: str(ref, "uid")}
			break
		}
	}
	return m
}

// stripNoise removes what changes on every write without meaning anything to a reader:
// managedFields (large, rewritten by every field manager) is dropped from bodies we keep or
// show; resourceVersion and generation are left in snapshots but skipped by the diff.
func stripNoise(t tree) {
	if md := child(t, "metadata"); md != nil {
		delete(md, "managedFields")
	}
}

func jsonUnmarshalNumbers(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return dec.Decode(v)
}

// compactJSON returns raw JSON without insignificant space, or raw as is when it is not JSON.
// Clients send patches compact: raw is then returned as it is, which is what json.Compact gives
// for such JSON (nothing to take out) and for invalid input (an error).
func compactJSON(raw []byte) string {
	if !spaceOutsideStrings(raw) {
		return string(raw)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return string(raw)
	}
	return buf.String()
}

// spaceOutsideStrings reports whether JSON text has whitespace between its tokens. For valid
// JSON it is exact; for anything else it may say either.
func spaceOutsideStrings(raw []byte) bool {
	in := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case in && c == '\\':
			i++
		case c == '"':
			in = !in
		case !in && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return true
		}
	}
	return false
}
