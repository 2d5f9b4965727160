package auditconv

import (
	"encoding/json"
	"maps"
	"slices"

	"github.com/kubetrail/kubetrail/internal/auditconv/internal/jsonscan"
)

// The tree diff the receiver used before flat bodies, kept as the oracle of the differential
// tests (TestFlatMatchesTrees, FuzzFlat): same paths, same values, same order.

// treeDiff compares two bodies leaf by leaf. Objects are compared key by key in sorted order
// and arrays index by index, so the result is stable; a subtree that appears or disappears as
// a whole is one change carrying the whole subtree.
func treeDiff(old, cur jsonscan.Tree) diffResult {
	var d diffResult
	var path []byte
	treeDiffValue(&d, path, old, cur, true, true)
	return d
}

func treeDiffValue(d *diffResult, path []byte, a, b any, hasA, hasB bool) {
	if len(path) > 0 && noisePaths[string(path)] {
		return
	}
	if hasA && hasB {
		am, aok := a.(map[string]any)
		bm, bok := b.(map[string]any)
		if aok && bok {
			treeDiffEntries(d, am, bm, func(k string) []byte { return appendKey(path, []byte(k)) })
			return
		}
		as, aok := a.([]any)
		bs, bok := b.([]any)
		if aok && bok {
			if field := treeListKey(as, bs); field != "" {
				treeDiffKeyedList(d, path, field, as, bs)
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
				treeDiffValue(d, appendIndex(path, i), av, bv, i < len(as), i < len(bs))
			}
			return
		}
		if treeScalarEqual(a, b) {
			return
		}
	}
	d.Total++
	if len(d.Changes) >= maxDiffPaths {
		return
	}
	c := change{Path: string(path)}
	if hasA {
		c.Old = jsonscan.Marshal(a)
	}
	if hasB {
		c.New = jsonscan.Marshal(b)
	}
	d.Changes = append(d.Changes, c)
}

// listKey returns the field that identifies the elements of both lists, or "" when the lists
// must be compared by index: every element must be an object with a distinct, non-empty
// string value for the field. Compared by key, a reordered or inserted element does not make
// every later index look changed (conditions are reordered on every transition).
func treeListKey(as, bs []any) string {
	if len(as) == 0 && len(bs) == 0 {
		return ""
	}
	for _, field := range listKeys {
		if treeKeyedBy(as, field) && treeKeyedBy(bs, field) {
			return field
		}
	}
	return ""
}

func treeKeyedBy(list []any, field string) bool {
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
func treeDiffKeyedList(d *diffResult, path []byte, field string, as, bs []any) {
	index := func(list []any) map[string]any {
		m := make(map[string]any, len(list))
		for _, el := range list {
			m[el.(map[string]any)[field].(string)] = el
		}
		return m
	}
	treeDiffEntries(d, index(as), index(bs), func(k string) []byte { return appendListKey(path, field, []byte(k)) })
}

// diffEntries diffs two keyed collections (an object's fields, or a keyed list's items) over the
// union of their keys in sorted order, so the diff's paths come out in a stable order; pathOf
// gives an entry's path.
func treeDiffEntries(d *diffResult, am, bm map[string]any, pathOf func(key string) []byte) {
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
		treeDiffValue(d, pathOf(k), av, bv, ha, hb)
	}
}

func treeScalarEqual(a, b any) bool {
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
