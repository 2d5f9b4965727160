package k8sauditreceiver

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
)

const (
	// maxDiffPaths bounds one diff event: a rewrite of a whole object would otherwise put
	// thousands of attribute values on one span.
	maxDiffPaths = 128
	// maxValueBytes bounds each old or new value; longer values are cut and marked.
	maxValueBytes = 512
	// maxPathBytes bounds each path the same way: a label or annotation key may be long, and a
	// path through it is exported whole otherwise.
	maxPathBytes = 512
)

// change is one changed path. Old and New are JSON texts; "" means the path is absent on that
// side (a JSON text is never empty, so absent and the empty string "" stay distinct).
type change struct {
	Path, Old, New string
}

// diffResult is the outcome of comparing two bodies of one object.
type diffResult struct {
	Changes []change // sorted by path, at most maxDiffPaths
	Total   int      // every changed path, including those beyond maxDiffPaths
}

// noisePaths change on every write and say nothing a reader wants to see in a diff.
var noisePaths = map[string]bool{
	"metadata.managedFields":   true,
	"metadata.resourceVersion": true,
	"metadata.generation":      true,
}

// diffTrees compares two bodies leaf by leaf. Objects are compared key by key in sorted order
// and arrays index by index, so the result is stable; a subtree that appears or disappears as
// a whole is one change carrying the whole subtree.
func diffTrees(old, cur tree) diffResult {
	var d diffResult
	var path []byte
	diffValue(&d, path, old, cur, true, true)
	return d
}

func diffValue(d *diffResult, path []byte, a, b any, hasA, hasB bool) {
	if len(path) > 0 && noisePaths[string(path)] {
		return
	}
	if hasA && hasB {
		am, aok := a.(map[string]any)
		bm, bok := b.(map[string]any)
		if aok && bok {
			diffEntries(d, am, bm, func(k string) []byte { return appendKey(path, k) })
			return
		}
		as, aok := a.([]any)
		bs, bok := b.([]any)
		if aok && bok {
			if field := listKey(as, bs); field != "" {
				diffKeyedList(d, path, field, as, bs)
				return
			}
			for i := 0; i < max(len(as), len(bs)); i++ {
				var av, bv any
				if i < len(as) {
					av = as[i]
				}
				if i < len(bs) {
					bv = bs[i]
				}
				diffValue(d, appendIndex(path, i), av, bv, i < len(as), i < len(bs))
			}
			return
		}
		if scalarEqual(a, b) {
			return
		}
	}
	d.Total++
	if len(d.Changes) >= maxDiffPaths {
		return
	}
	c := change{Path: string(path)}
	if hasA {
		c.Old = marshalJSON(a)
	}
	if hasB {
		c.New = marshalJSON(b)
	}
	d.Changes = append(d.Changes, c)
}

// listKeys are the fields Kubernetes lists are keyed by, in order of preference: containers,
// volumes, env and most others by name, conditions by type.
var listKeys = []string{"name", "type"}

// listKey returns the field that identifies the elements of both lists, or "" when the lists
// must be compared by index: every element must be an object with a distinct, non-empty
// string value for the field. Compared by key, a reordered or inserted element does not make
// every later index look changed (conditions are reordered on every transition).
func listKey(as, bs []any) string {
	if len(as) == 0 && len(bs) == 0 {
		return ""
	}
	for _, field := range listKeys {
		if keyedBy(as, field) && keyedBy(bs, field) {
			return field
		}
	}
	return ""
}

func keyedBy(list []any, field string) bool {
	seen := make(map[string]bool, len(list))
	for _, el := range list {
		m, ok := el.(map[string]any)
		if !ok {
			return false
		}
		k, ok := m[field].(string)
		if !ok || k == "" || seen[k] {
			return false
		}
		seen[k] = true
	}
	return true
}

// diffKeyedList compares two lists element by element key, in key order:
// spec.template.spec.containers[name=web].image, status.conditions[type=Ready].status.
func diffKeyedList(d *diffResult, path []byte, field string, as, bs []any) {
	index := func(list []any) map[string]any {
		m := make(map[string]any, len(list))
		for _, el := range list {
			m[el.(map[string]any)[field].(string)] = el
		}
		return m
	}
	diffEntries(d, index(as), index(bs), func(k string) []byte { return appendListKey(path, field, k) })
}

// diffEntries diffs two keyed collections (an object's fields, or a keyed list's items) over the
// union of their keys in sorted order, so the diff's paths come out in a stable order; pathOf
// gives an entry's path.
func diffEntries(d *diffResult, am, bm map[string]any, pathOf func(key string) []byte) {
	keys := slices.Collect(maps.Keys(am))
	for k := range bm {
		if _, dup := am[k]; !dup {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		av, ha := am[k]
		bv, hb := bm[k]
		diffValue(d, pathOf(k), av, bv, ha, hb)
	}
}

func appendListKey(path []byte, field, key string) []byte {
	path = append(path, '[')
	path = append(path, field...)
	path = append(path, '=')
	if plainKey(strings.ReplaceAll(strings.ReplaceAll(key, ".", "-"), ":", "-")) {
		path = append(path, key...)
	} else {
		path = strconv.AppendQuote(path, key)
	}
	return append(path, ']')
}

func scalarEqual(a, b any) bool {
	switch av := a.(type) {
	case nil:
		return b == nil
	case string:
		bv, ok := b.(string)
		return ok && av == bv
	case bool:
		bv, ok := b.(bool)
		return ok && av == bv
	case json.Number:
		bv, ok := b.(json.Number)
		return ok && av == bv
	}
	return false
}

// appendKey extends a path the way people write them: spec.replicas for plain keys, and
// metadata.labels["app.kubernetes.io/name"] for keys a dot would make ambiguous.
func appendKey(path []byte, key string) []byte {
	if plainKey(key) {
		if len(path) > 0 {
			path = append(path, '.')
		}
		return append(path, key...)
	}
	path = append(path, '[')
	path = strconv.AppendQuote(path, key)
	return append(path, ']')
}

func appendIndex(path []byte, i int) []byte {
	path = append(path, '[')
	path = strconv.AppendInt(path, int64(i), 10)
	return append(path, ']')
}

func plainKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func clip(s string) string { return clipTo(s, maxValueBytes) }

// clipTo cuts s to at most limit bytes on a character boundary and marks the cut with the
// original length, so that two long strings cut alike still tell their sizes apart.
func clipTo(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8Start(s[cut]) {
		cut--
	}
	return s[:cut] + "…(" + strconv.Itoa(len(s)) + " bytes)"
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// exported prepares a diff for export: redaction tags become the constant mask first, then
// long values and paths are clipped, so a clip can never cut a tag in half and leave part of it
// behind. pathsCut reports whether any path was clipped.
func (d diffResult) exported(tagged bool) (out []change, pathsCut bool) {
	out = make([]change, len(d.Changes))
	for i, c := range d.Changes {
		if tagged {
			c.Old, c.New = untag(c.Old), untag(c.New)
		}
		whole := validText(c.Path)
		path := clipTo(whole, maxPathBytes)
		pathsCut = pathsCut || len(path) != len(whole)
		out[i] = change{Path: path, Old: clip(validText(c.Old)), New: clip(validText(c.New))}
	}
	return out, pathsCut
}
