package auditconv

import (
	"github.com/kubetrail/kubetrail/internal/auditconv/internal/jsonscan"
)

// What identifies the object a body describes (objectMeta) and what else the conversion reads
// of a Kubernetes object, read three ways with the same rules: from a tree (metaOf), from the
// bytes without building anything (scanMeta, most bodies are only looked at for their identity)
// and from a body's index (flatBody.meta, a body indexed anyway for a diff, the cache or a
// snapshot).

// objectMeta is the part of a body's metadata that identifies the object.
type objectMeta struct {
	Kind            string
	APIVersion      string
	Name            string
	Namespace       string
	UID             string
	ResourceVersion string
	Owner           ownerRef
	// TraceContexts are the values of the trace-context annotations (unparsed).
	TraceContexts carriedList
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

type ownerRef struct {
	APIVersion, Kind, Name, UID string
}

func metaOf(t jsonscan.Tree, keys *contextKeys) objectMeta {
	md := jsonscan.Child(t, "metadata")
	m := objectMeta{
		Kind:            jsonscan.Str(t, "kind"),
		APIVersion:      jsonscan.Str(t, "apiVersion"),
		Name:            jsonscan.Str(md, "name"),
		Namespace:       jsonscan.Str(md, "namespace"),
		UID:             jsonscan.Str(md, "uid"),
		ResourceVersion: jsonscan.Str(md, "resourceVersion"),
		TraceContexts:   treeContexts(jsonscan.Child(md, "annotations"), keys),
		Rollout: rollout{
			Generation:         jsonscan.Int(md, "generation"),
			ObservedGeneration: jsonscan.Int(jsonscan.Child(t, "status"), "observedGeneration"),
			Revision:           jsonscan.Str(jsonscan.Child(md, "annotations"), annotationRevision),
			TemplateHash:       jsonscan.Str(jsonscan.Child(md, "labels"), labelTemplateHash),
			RevisionHash:       jsonscan.Str(jsonscan.Child(md, "labels"), labelRevisionHash),
		},
	}
	if m.Kind == "Binding" {
		m.Target = jsonscan.Str(jsonscan.Child(t, "target"), "name")
	}
	if m.Kind == "Pod" {
		m.NodeName = jsonscan.Str(jsonscan.Child(t, "spec"), "nodeName")
	}
	refs, _ := md["ownerReferences"].([]any)
	for _, r := range refs {
		ref, _ := r.(map[string]any)
		if c, _ := ref["controller"].(bool); c {
			m.Owner = ownerRef{APIVersion: jsonscan.Str(ref, "apiVersion"), Kind: jsonscan.Str(ref, "kind"), Name: jsonscan.Str(ref, "name"), UID: jsonscan.Str(ref, "uid")}
			break
		}
	}
	return m
}

// stripNoise removes what changes on every write without meaning anything to a reader:
// managedFields (large, rewritten by every field manager) is dropped from bodies we keep or
// show; resourceVersion and generation are left in snapshots but skipped by the diff.
func stripNoise(t jsonscan.Tree) {
	if md := jsonscan.Child(t, "metadata"); md != nil {
		delete(md, "managedFields")
	}
}

// parseBody parses an object body as jsonscan.ParseTree does, leaving out metadata.managedFields
// (large, rewritten by every field manager, never kept or shown: see stripNoise) without
// building it.
func parseBody(raw []byte) (jsonscan.Tree, bool) {
	i := jsonscan.SkipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil, false
	}
	t := make(jsonscan.Tree, 8)
	i++
	for first := true; ; first = false {
		key, next, done, err := jsonscan.ObjectNext(raw, i, first)
		if err != nil {
			return nil, false
		}
		if done {
			if jsonscan.SkipSpace(raw, next) != len(raw) {
				return nil, false
			}
			return t, true
		}
		var v any
		if string(key) == "metadata" && raw[next] == '{' {
			v, i, err = parseMetadata(raw, next)
		} else {
			v, i, err = jsonscan.ParseValue(raw, next, 1)
		}
		if err != nil {
			return nil, false
		}
		t[string(key)] = v
	}
}

func parseMetadata(d []byte, i int) (any, int, error) {
	m := make(map[string]any, 12)
	i++
	for first := true; ; first = false {
		key, next, done, err := jsonscan.ObjectNext(d, i, first)
		if err != nil {
			return nil, 0, err
		}
		if done {
			return m, next, nil
		}
		if string(key) == "managedFields" {
			if i, err = jsonscan.SkipValue(d, next, 2); err != nil {
				return nil, 0, err
			}
			delete(m, "managedFields")
			continue
		}
		var v any
		if v, i, err = jsonscan.ParseValue(d, next, 2); err != nil {
			return nil, 0, err
		}
		m[string(key)] = v
	}
}

// treeContexts reads the trace-context annotations of a parsed annotations object.
func treeContexts(a jsonscan.Tree, keys *contextKeys) carriedList {
	var l carriedList
	for k, v := range a {
		if pos, index, state, ok := keys.match([]byte(k)); ok {
			s, _ := v.(string)
			l = l.set(pos, index, state, s)
		}
	}
	return l
}

// scanMeta reads what metaOf reads from a body without parsing it into a tree: most bodies
// are only looked at to complete an identity or to find a write already seen. It returns what
// metaOf(jsonscan.ParseTree(raw), keys) returns, duplicate keys included (the last one counts),
// except that a Pod's node and a Binding's target are read only when no other kind precedes
// them (the apiserver writes kind first).
// keys are the trace-context annotation keys; the other annotations are skipped.
func scanMeta(raw []byte, keys *contextKeys) (objectMeta, bool) {
	i := jsonscan.SkipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return objectMeta{}, false
	}
	var m objectMeta
	i++
	for first := true; ; first = false {
		key, next, done, err := jsonscan.ObjectNext(raw, i, first)
		if err != nil {
			return objectMeta{}, false
		}
		if done {
			if m.Kind != "Pod" {
				m.NodeName = ""
			}
			if m.Kind != "Binding" {
				m.Target = ""
			}
			return m, jsonscan.SkipSpace(raw, next) == len(raw)
		}
		switch string(key) {
		case "kind":
			m.Kind, i, err = jsonscan.AnyString(raw, next)
		case "apiVersion":
			m.APIVersion, i, err = jsonscan.AnyString(raw, next)
		case "metadata":
			m = objectMeta{Kind: m.Kind, APIVersion: m.APIVersion, NodeName: m.NodeName, Target: m.Target,
				Rollout: rollout{ObservedGeneration: m.Rollout.ObservedGeneration}}
			i, err = scanMetadata(raw, next, &m, keys)
		case "status":
			m.Rollout.ObservedGeneration = 0
			i, err = jsonscan.ScanMembers(raw, next, 1, func(key []byte, d []byte, vi int) (int, bool, error) {
				if string(key) != "observedGeneration" {
					return 0, false, nil
				}
				var end int
				var err error
				m.Rollout.ObservedGeneration, end, err = jsonscan.AnyInt(d, vi)
				return end, true, err
			})
		case "spec":
			// A Pod's node (spec.nodeName). The apiserver writes kind first, so the spec of
			// any other kind is skipped whole, as before.
			m.NodeName = ""
			if m.Kind == "Pod" || m.Kind == "" {
				i, err = jsonscan.ScanMember(raw, next, 1, "nodeName", &m.NodeName)
			} else {
				i, err = jsonscan.SkipValue(raw, next, 1)
			}
		case "target":
			// A Binding's target node (pods/binding).
			m.Target = ""
			if m.Kind == "Binding" || m.Kind == "" {
				i, err = jsonscan.ScanMember(raw, next, 1, "name", &m.Target)
			} else {
				i, err = jsonscan.SkipValue(raw, next, 1)
			}
		default:
			i, err = jsonscan.SkipValue(raw, next, 1)
		}
		if err != nil {
			return objectMeta{}, false
		}
	}
}

// scanStatusDetails reads details.name and details.uid of a Status body (what a deletion answers when
// the object is gone at once); empty strings when it has none or does not parse.
func scanStatusDetails(raw []byte) (name, uid string) {
	i := jsonscan.SkipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return "", ""
	}
	_, err := jsonscan.ScanMembers(raw, i, 0, func(key, d []byte, vi int) (int, bool, error) {
		if string(key) != "details" {
			return 0, false, nil
		}
		end, err := jsonscan.ScanMembers(d, vi, 1, jsonscan.StringMembers("name", &name, "uid", &uid))
		return end, true, err
	})
	if err != nil {
		return "", ""
	}
	return name, uid
}

func scanMetadata(d []byte, i int, m *objectMeta, keys *contextKeys) (int, error) {
	if d[i] != '{' {
		return jsonscan.SkipValue(d, i, 1)
	}
	i++
	for first := true; ; first = false {
		key, next, done, err := jsonscan.ObjectNext(d, i, first)
		if err != nil || done {
			return next, err
		}
		switch string(key) {
		case "name":
			m.Name, i, err = jsonscan.AnyString(d, next)
		case "namespace":
			m.Namespace, i, err = jsonscan.AnyString(d, next)
		case "uid":
			m.UID, i, err = jsonscan.AnyString(d, next)
		case "resourceVersion":
			m.ResourceVersion, i, err = jsonscan.AnyString(d, next)
		case "ownerReferences":
			m.Owner = ownerRef{}
			i, err = scanOwners(d, next, &m.Owner)
		case "annotations":
			m.TraceContexts, m.Rollout.Revision = nil, ""
			i, err = jsonscan.ScanMembers(d, next, 2, func(key, d []byte, vi int) (int, bool, error) {
				if string(key) == annotationRevision {
					v, end, err := jsonscan.AnyString(d, vi)
					m.Rollout.Revision = v
					return end, true, err
				}
				pos, index, state, ok := keys.match(key)
				if !ok {
					return 0, false, nil
				}
				v, end, err := jsonscan.AnyString(d, vi)
				m.TraceContexts = m.TraceContexts.set(pos, index, state, v)
				return end, true, err
			})
		case "labels":
			m.Rollout.TemplateHash, m.Rollout.RevisionHash = "", ""
			i, err = jsonscan.ScanMembers(d, next, 2, jsonscan.StringMembers(labelTemplateHash, &m.Rollout.TemplateHash, labelRevisionHash, &m.Rollout.RevisionHash))
		case "generation":
			m.Rollout.Generation, i, err = jsonscan.AnyInt(d, next)
		default:
			i, err = jsonscan.SkipValue(d, next, 2)
		}
		if err != nil {
			return 0, err
		}
	}
}

// scanOwners finds the first controlling owner reference.
func scanOwners(d []byte, i int, owner *ownerRef) (int, error) {
	if d[i] != '[' {
		return jsonscan.SkipValue(d, i, 2)
	}
	found := false
	i++
	for first := true; ; first = false {
		next, done, err := jsonscan.ArrayNext(d, i, first)
		if err != nil || done {
			return next, err
		}
		if d[next] != '{' {
			if i, err = jsonscan.SkipValue(d, next, 3); err != nil {
				return 0, err
			}
			continue
		}
		var ref ownerRef
		controller := false
		i = next + 1
		for f := true; ; f = false {
			key, vi, done, err := jsonscan.ObjectNext(d, i, f)
			if err != nil {
				return 0, err
			}
			if done {
				i = vi
				break
			}
			switch string(key) {
			case "apiVersion":
				ref.APIVersion, i, err = jsonscan.AnyString(d, vi)
			case "kind":
				ref.Kind, i, err = jsonscan.AnyString(d, vi)
			case "name":
				ref.Name, i, err = jsonscan.AnyString(d, vi)
			case "uid":
				ref.UID, i, err = jsonscan.AnyString(d, vi)
			case "controller":
				controller = d[vi] == 't'
				i, err = jsonscan.SkipValue(d, vi, 4)
			default:
				i, err = jsonscan.SkipValue(d, vi, 4)
			}
			if err != nil {
				return 0, err
			}
		}
		if controller && !found {
			*owner, found = ref, true
		}
	}
}

// meta reads what scanMeta reads, from the index: a body that is indexed anyway (for the diff,
// the cache or a snapshot) is not scanned a second time for its identity. Duplicate keys count
// as in a map (the last one); a Pod's node and a Binding's target are read whatever the order of
// kind, as metaOf reads them.
func (f *flatBody) meta(keys *contextKeys) objectMeta {
	m := objectMeta{Kind: f.symMember(0, "kind"), APIVersion: f.symMember(0, "apiVersion")}
	if md := f.objectMember(0, "metadata"); md >= 0 {
		m.Name = f.strMember(md, "name")
		m.Namespace = f.symMember(md, "namespace")
		m.UID = f.strMember(md, "uid")
		m.ResourceVersion = f.strMember(md, "resourceVersion")
		if a := f.objectMember(md, "annotations"); a >= 0 {
			m.TraceContexts = f.contexts(a, keys)
			m.Rollout.Revision = f.strMember(a, annotationRevision)
		}
		if l := f.objectMember(md, "labels"); l >= 0 {
			m.Rollout.TemplateHash = f.strMember(l, labelTemplateHash)
			m.Rollout.RevisionHash = f.strMember(l, labelRevisionHash)
		}
		m.Rollout.Generation = f.intMember(md, "generation")
		if refs := f.member(md, "ownerReferences"); refs >= 0 && f.nodes[refs].kind == '[' {
			for r, end := refs+1, refs+int(f.nodes[refs].size); r < end; r += int(f.nodes[r].size) {
				if f.nodes[r].kind != '{' {
					continue
				}
				if c := f.member(r, "controller"); c >= 0 && f.nodes[c].kind == 't' {
					m.Owner = ownerRef{APIVersion: f.symMember(r, "apiVersion"), Kind: f.symMember(r, "kind"),
						Name: f.strMember(r, "name"), UID: f.strMember(r, "uid")}
					break
				}
			}
		}
	}
	if st := f.objectMember(0, "status"); st >= 0 {
		m.Rollout.ObservedGeneration = f.intMember(st, "observedGeneration")
	}
	switch m.Kind {
	case "Pod":
		if spec := f.objectMember(0, "spec"); spec >= 0 {
			m.NodeName = f.strMember(spec, "nodeName")
		}
	case "Binding":
		if target := f.objectMember(0, "target"); target >= 0 {
			m.Target = f.strMember(target, "name")
		}
	}
	return m
}
