package auditconv

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/kubetrail/kubetrail/internal/auditconv/internal/jsonscan"
	"github.com/kubetrail/kubetrail/internal/model"
)

// A refused write (an admission denial, 422 Invalid, 409 Conflict, 403 Forbidden) changes
// nothing, so it gets no diff; its request still says what it tried. attempt applies that
// request to the object as the cache holds it and puts the difference on the span as a diff
// event marked attempted (model.AttrDiffAttempted): "tried spec.replicas 2→40".
//
// What is applied, for update and patch of the object, its status or its scale:
//   - an update's body is the object the client wanted, minus what the apiserver keeps on its
//     own: the status on the object's own path, everything but the status on /status, the
//     metadata the server sets (uid, creationTimestamp, deletion fields);
//   - a JSON patch (an array of operations) is applied as RFC 6902 says; one that does not
//     apply (a failed test, a missing path) gives no diff;
//   - any other patch (merge, strategic merge, apply) has the object's shape and is merged as
//     RFC 7386 merges: a null removes a member. A list whose elements on both sides are all
//     objects with a "name" is merged element by element by name, as a strategic-merge patch
//     merges containers, env and volumes ({"$patch": "delete"} removes one); other lists are
//     replaced. Other "$" directives are left out. For lists merged by another key (ports,
//     conditions) this shows the list replaced where the apiserver would have merged it;
//   - on the scale subresource only spec.replicas counts.
//
// No diff is made when the cache holds no body for the object, when the write names a base
// version other than the one held (the diff would show later writes undone: a 409 Conflict
// links to the write that won instead), or for a 404.

// attemptable reports whether the refused write may carry what it tried.
func attemptable(s *eventSpan) bool {
	ev := s.ev
	if !s.failed || s.code == http.StatusNotFound || (ev.Verb != "update" && ev.Verb != "patch") || !hasBody(ev.RequestObject) {
		return false
	}
	switch s.ref.Subresource {
	case "", "status", "scale":
		return true
	}
	return false
}

// attempt puts on a refused write's span the change it tried (see above). Callers hold the
// cache's lock.
func (c *Converter) attempt(s *eventSpan, key string) {
	e := c.cache.get(key)
	if e == nil || (s.obj.UID != "" && e.uid != "" && e.uid != s.obj.UID) {
		return
	}
	if s.shared != nil {
		// Another replica may hold a newer body than this one.
		c.shared.adopt(c.cache, s.shared, e, key, s.obj.UID, "", true)
	}
	if !e.hasBody() || (s.baseRV != "" && s.baseRV != e.rv) {
		return
	}
	tried, base, ok := c.triedBody(s, e)
	if !ok || (base != "" && base != e.rv) {
		return
	}
	f, ok := flatten([]byte(jsonscan.Marshal(tried)), getNodes())
	if !ok {
		return
	}
	defer putNodes(f.nodes)
	d, ok := diffCached(e, &f)
	if !ok || d.Total == 0 {
		return
	}
	if s.baseRV == "" {
		d.Base = e.rv
	}
	putDiff(s.span, d, s.endTS)
	ev := s.span.Events().At(s.span.Events().Len() - 1)
	ev.Attributes().PutBool(model.AttrDiffAttempted, true)
}

// triedBody is the object as the refused write would have left it, redacted values tagged as
// the cached body's are, and the resourceVersion an update's body names as its base (the
// objectRef does not carry it in every log: GKE's).
func (c *Converter) triedBody(s *eventSpan, e *cacheEntry) (tried jsonscan.Tree, base string, ok bool) {
	ev := s.ev
	cur, ok := e.bodyTree()
	if !ok {
		return nil, "", false
	}
	var req any
	if ev.Verb == "update" {
		b := lazyBody{raw: ev.RequestObject, red: c.red, whole: s.redact}
		t := b.tree()
		if t == nil {
			return nil, "", false
		}
		base = jsonscan.Str(jsonscan.Child(t, "metadata"), "resourceVersion")
		req = t
	} else {
		text := c.red.patchText(ev.RequestObject, s.redact, c.red.tags.mask)
		v, end, err := jsonscan.ParseValue([]byte(text), jsonscan.SkipSpace([]byte(text), 0), 0)
		if err != nil || jsonscan.SkipSpace([]byte(text), end) != len(text) {
			return nil, "", false
		}
		req = v
	}

	if s.ref.Subresource == "scale" {
		spec := jsonscan.Child(cur, "spec")
		replicas, ok := spec["replicas"]
		if !ok {
			return nil, "", false
		}
		scale := any(map[string]any{"spec": map[string]any{"replicas": replicas}})
		if ev.Verb == "update" {
			scale = req
		} else if scale, ok = applyPatch(scale, req); !ok {
			return nil, "", false
		}
		t, _ := scale.(map[string]any)
		to, ok := jsonscan.Child(t, "spec")["replicas"]
		if !ok {
			return nil, "", false
		}
		spec["replicas"] = to
		return cur, base, true
	}

	result := req
	if ev.Verb == "patch" {
		doc, _ := e.bodyTree() // cur stays as it was, for what the apiserver keeps
		if result, ok = applyPatch(doc, req); !ok {
			return nil, "", false
		}
	}
	t, ok := result.(map[string]any)
	if !ok {
		return nil, "", false
	}
	if s.ref.Subresource == "status" {
		// Only the status is written through /status.
		setOrDelete(cur, "status", t)
		return cur, base, true
	}
	setOrDelete(t, "status", cur)
	md, curMD := jsonscan.Child(t, "metadata"), jsonscan.Child(cur, "metadata")
	if md != nil {
		for _, k := range serverMetadata {
			setOrDelete(md, k, curMD)
		}
	}
	return t, base, true
}

// serverMetadata are the members of metadata the apiserver sets whatever a write says.
var serverMetadata = []string{"uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink", "resourceVersion", "generation", "managedFields"}

// setOrDelete makes dst[k] what from[k] is: the same value, or absent.
func setOrDelete(dst map[string]any, k string, from map[string]any) {
	if v, ok := from[k]; ok {
		dst[k] = v
	} else {
		delete(dst, k)
	}
}

// applyPatch applies a patch to doc: a JSON patch when it is an array of operations, a merge
// otherwise. doc may be changed in place.
func applyPatch(doc, patch any) (any, bool) {
	switch p := patch.(type) {
	case map[string]any:
		d, _ := doc.(map[string]any)
		if d == nil {
			d = map[string]any{}
		}
		return mergeObject(d, p), true
	case []any:
		return applyJSONPatch(doc, p)
	}
	return nil, false
}

// mergeObject merges patch into dst (see the comment at the top).
func mergeObject(dst, patch map[string]any) map[string]any {
	if patch["$patch"] == "replace" {
		dst = map[string]any{}
	}
	for k, v := range patch {
		if strings.HasPrefix(k, "$") {
			continue
		}
		switch pv := v.(type) {
		case nil:
			delete(dst, k)
		case map[string]any:
			d, _ := dst[k].(map[string]any)
			if d == nil {
				d = map[string]any{}
			}
			dst[k] = mergeObject(d, pv)
		case []any:
			if old, ok := dst[k].([]any); ok && namedList(pv) && (len(old) == 0 || namedList(old)) {
				dst[k] = mergeNamed(old, pv)
			} else {
				dst[k] = stripDirectives(pv)
			}
		default:
			dst[k] = v
		}
	}
	return dst
}

// namedList reports whether every element of l is an object with a string "name".
func namedList(l []any) bool {
	for _, x := range l {
		m, ok := x.(map[string]any)
		if !ok {
			return false
		}
		if _, ok := m["name"].(string); !ok {
			return false
		}
	}
	return len(l) > 0
}

func mergeNamed(dst, patch []any) []any {
	for _, x := range patch {
		m := x.(map[string]any)
		name := m["name"].(string)
		at := -1
		for i, y := range dst {
			if y.(map[string]any)["name"] == name {
				at = i
				break
			}
		}
		switch {
		case m["$patch"] == "delete":
			if at >= 0 {
				dst = append(dst[:at:at], dst[at+1:]...)
			}
		case at >= 0:
			dst[at] = mergeObject(dst[at].(map[string]any), m)
		default:
			dst = append(dst, mergeObject(map[string]any{}, m))
		}
	}
	return dst
}

// stripDirectives is a patch's list as a value: its objects without "$" members or nulls.
func stripDirectives(l []any) []any {
	out := make([]any, len(l))
	for i, x := range l {
		if m, ok := x.(map[string]any); ok {
			x = mergeObject(map[string]any{}, m)
		}
		out[i] = x
	}
	return out
}

// applyJSONPatch applies RFC 6902 operations to doc, in order; false when one does not apply.
func applyJSONPatch(doc any, ops []any) (any, bool) {
	for _, o := range ops {
		op, _ := o.(map[string]any)
		if op == nil {
			return nil, false
		}
		name, _ := op["op"].(string)
		path, ok := pointer(op["path"])
		if !ok {
			return nil, false
		}
		switch name {
		case "add", "replace", "test":
			v, has := op["value"]
			if !has {
				return nil, false
			}
			switch name {
			case "add":
				doc, ok = addAt(doc, path, deepCopyValue(v))
			case "replace":
				if doc, ok = removeAt(doc, path); ok {
					doc, ok = addAt(doc, path, deepCopyValue(v))
				}
			default:
				var got any
				if got, ok = valueAt(doc, path); ok {
					ok = jsonscan.Marshal(got) == jsonscan.Marshal(v)
				}
			}
		case "remove":
			doc, ok = removeAt(doc, path)
		case "move", "copy":
			from, fok := pointer(op["from"])
			if !fok {
				return nil, false
			}
			var v any
			if v, ok = valueAt(doc, from); ok {
				v = deepCopyValue(v)
				if name == "move" {
					doc, ok = removeAt(doc, from)
				}
				if ok {
					doc, ok = addAt(doc, path, v)
				}
			}
		default:
			return nil, false
		}
		if !ok {
			return nil, false
		}
	}
	return doc, true
}

// pointer splits a JSON pointer into its unescaped tokens.
func pointer(v any) ([]string, bool) {
	p, ok := v.(string)
	if !ok || (p != "" && p[0] != '/') {
		return nil, false
	}
	if p == "" {
		return nil, true
	}
	toks := strings.Split(p[1:], "/")
	for i, t := range toks {
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return toks, true
}

// index reads an array index token; "-" (past the end) only when end is allowed.
func index(tok string, n int, end bool) (int, bool) {
	if tok == "-" {
		return n, end
	}
	if tok == "" || (len(tok) > 1 && tok[0] == '0') {
		return 0, false
	}
	i, err := strconv.Atoi(tok)
	if err != nil || i < 0 || i > n || (i == n && !end) {
		return 0, false
	}
	return i, true
}

func valueAt(doc any, toks []string) (any, bool) {
	for _, t := range toks {
		switch n := doc.(type) {
		case map[string]any:
			v, ok := n[t]
			if !ok {
				return nil, false
			}
			doc = v
		case []any:
			i, ok := index(t, len(n), false)
			if !ok {
				return nil, false
			}
			doc = n[i]
		default:
			return nil, false
		}
	}
	return doc, true
}

// edit applies fn to the container that holds toks' last token, returning doc with the
// container fn returned in its place (an array may grow or shrink).
func edit(doc any, toks []string, fn func(c any, tok string) (any, bool)) (any, bool) {
	if len(toks) == 1 {
		return fn(doc, toks[0])
	}
	switch n := doc.(type) {
	case map[string]any:
		child, ok := n[toks[0]]
		if !ok {
			return nil, false
		}
		if n[toks[0]], ok = edit(child, toks[1:], fn); !ok {
			return nil, false
		}
		return n, true
	case []any:
		i, ok := index(toks[0], len(n), false)
		if !ok {
			return nil, false
		}
		if n[i], ok = edit(n[i], toks[1:], fn); !ok {
			return nil, false
		}
		return n, true
	}
	return nil, false
}

func addAt(doc any, toks []string, v any) (any, bool) {
	if len(toks) == 0 {
		return v, true
	}
	return edit(doc, toks, func(c any, tok string) (any, bool) {
		switch n := c.(type) {
		case map[string]any:
			n[tok] = v
			return n, true
		case []any:
			i, ok := index(tok, len(n), true)
			if !ok {
				return nil, false
			}
			n = append(n, nil)
			copy(n[i+1:], n[i:])
			n[i] = v
			return n, true
		}
		return nil, false
	})
}

func removeAt(doc any, toks []string) (any, bool) {
	if len(toks) == 0 {
		return nil, false
	}
	return edit(doc, toks, func(c any, tok string) (any, bool) {
		switch n := c.(type) {
		case map[string]any:
			if _, ok := n[tok]; !ok {
				return nil, false
			}
			delete(n, tok)
			return n, true
		case []any:
			i, ok := index(tok, len(n), false)
			if !ok {
				return nil, false
			}
			return append(n[:i:i], n[i+1:]...), true
		}
		return nil, false
	})
}

// deepCopyValue copies a parsed JSON value, so that a value added twice (copy, or a list
// merged) is never shared.
func deepCopyValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, y := range x {
			m[k] = deepCopyValue(y)
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, y := range x {
			l[i] = deepCopyValue(y)
		}
		return l
	}
	return v
}
