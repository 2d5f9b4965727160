package auditconv

import (
	"bytes"
	"strconv"
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

// noisePaths change on every write and say nothing a reader wants to see in a diff.
var noisePaths = map[string]bool{
	"metadata.managedFields":   true,
	"metadata.resourceVersion": true,
	"metadata.generation":      true,
}

// diff compares two bodies leaf by leaf. Objects are compared key by key in sorted order and
// arrays index by index (or element by key, see listKey), so the result is stable; a subtree
// that appears or disappears as a whole is one change carrying the whole subtree.
func (w *flatWork) diff(old, cur *flatBody) diffResult {
	if cap(w.path) < 256 {
		w.path = make([]byte, 0, 512) // paths extend it in place, level by level
	}
	w.diffValue(old, cur, w.path[:0], 0, 0)
	d := w.d
	w.d = diffResult{}
	return d
}

// diffValue compares node ai of a with node bi of b (-1: absent on that side) at path.
func (w *flatWork) diffValue(a, b *flatBody, path []byte, ai, bi int) {
	if len(path) > 0 && noisePaths[string(path)] {
		return
	}
	if ai >= 0 && bi >= 0 {
		if bytes.Equal(a.raw(ai), b.raw(bi)) {
			return // the same text is the same value: most of an object is as it was
		}
		ak, bk := a.nodes[ai].kind, b.nodes[bi].kind
		switch {
		case ak == '{' && bk == '{':
			if w.diffAligned(a, b, path, ai, bi) {
				return
			}
			sa := w.pushMembers(a, ai)
			sb := w.pushMembers(b, bi)
			w.diffEntries(a, b, path, "", sa, sb)
			return
		case ak == '[' && bk == '[':
			if w.diffKeyedList(a, b, path, ai, bi) {
				return
			}
			ca, ea := ai+1, ai+int(a.nodes[ai].size)
			cb, eb := bi+1, bi+int(b.nodes[bi].size)
			for i := 0; ca < ea || cb < eb; i++ {
				na, nb := -1, -1
				if ca < ea {
					na = ca
					ca += int(a.nodes[ca].size)
				}
				if cb < eb {
					nb = cb
					cb += int(b.nodes[cb].size)
				}
				w.diffValue(a, b, appendIndex(path, i), na, nb)
			}
			return
		}
		if scalarEqual(a, b, ai, bi) {
			return
		}
	}
	w.d.Total++
	if len(w.d.Changes) >= maxDiffPaths {
		return
	}
	c := change{Path: string(path)}
	if ai >= 0 {
		c.Old = w.text(a, ai)
	}
	if bi >= 0 {
		c.New = w.text(b, bi)
	}
	w.d.Changes = append(w.d.Changes, c)
}

// maxAligned is how many differing members diffAligned walks; past it the objects were
// rewritten more than edited, and the sorted walk (diffEntries) takes them.
const maxAligned = 8

// diffAligned diffs two objects whose members have the same plain keys in the same order, as
// two bodies of one object from the apiserver have: only the members whose bytes differ are
// walked, sorted by key. That is the order diffEntries would reach them in, and a member whose
// bytes are equal adds no change, so the outcome is the same without sorting every member of
// both. It reports false, having diffed nothing, when the members are not aligned, when more
// than maxAligned differ, or when a differing member's key appears twice (a map keeps the last
// of them, which diffEntries compares).
func (w *flatWork) diffAligned(a, b *flatBody, path []byte, ai, bi int) bool {
	start := len(w.ents)
	ca, ea := ai+1, ai+int(a.nodes[ai].size)
	cb, eb := bi+1, bi+int(b.nodes[bi].size)
	for ; ca < ea && cb < eb; ca, cb = ca+int(a.nodes[ca].size), cb+int(b.nodes[cb].size) {
		na, nb := &a.nodes[ca], &b.nodes[cb]
		key := a.d[na.key:na.keyEnd] // quotes included
		if !na.plainKey || !nb.plainKey || !bytes.Equal(key, b.d[nb.key:nb.keyEnd]) {
			w.ents = w.ents[:start]
			return false
		}
		if bytes.Equal(a.d[na.start:na.end], b.d[nb.start:nb.end]) {
			continue
		}
		if len(w.ents)-start == 2*maxAligned {
			w.ents = w.ents[:start]
			return false
		}
		// A pair of entries: a's member, then b's.
		key = key[1 : len(key)-1]
		w.ents = append(w.ents, entry{key: key, node: int32(ca)}, entry{key: key, node: int32(cb)})
	}
	if ca < ea || cb < eb {
		w.ents = w.ents[:start]
		return false
	}
	pairs := w.ents[start:]
	for i := 0; i < len(pairs); i += 2 {
		for c := ai + 1; c < ea; c += int(a.nodes[c].size) {
			if int32(c) != pairs[i].node && bytes.Equal(a.keyOf(c), pairs[i].key) {
				w.ents = w.ents[:start]
				return false
			}
		}
		// Insertion sort by key, a pair at a time: the keys are distinct.
		for j := i; j > 0 && bytes.Compare(pairs[j-2].key, pairs[j].key) > 0; j -= 2 {
			pairs[j-2], pairs[j-1], pairs[j], pairs[j+1] = pairs[j], pairs[j+1], pairs[j-2], pairs[j-1]
		}
	}
	end := len(w.ents)
	for i := start; i < end; i += 2 {
		// Read from w.ents each time: walking a member pushes and pops above end and may move it.
		na, nb, key := int(w.ents[i].node), int(w.ents[i+1].node), w.ents[i].key
		w.diffValue(a, b, appendKey(path, key), na, nb)
	}
	w.ents = w.ents[:start]
	return true
}

// listKeys are the fields Kubernetes lists are keyed by, in order of preference: containers,
// volumes, env and most others by name, conditions by type.
var listKeys = []string{"name", "type"}

// diffKeyedList compares two lists element by element key, in key order
// (spec.template.spec.containers[name=web].image, status.conditions[type=Ready].status), when
// both are keyed by the same field of listKeys: every element an object with a distinct,
// non-empty string value for it. Compared by key, a reordered or inserted element does not make
// every later index look changed (conditions are reordered on every transition). It reports
// false, having compared nothing, for lists that must be compared by index.
func (w *flatWork) diffKeyedList(a, b *flatBody, path []byte, ai, bi int) bool {
	if a.nodes[ai].size == 1 && b.nodes[bi].size == 1 {
		return false // both empty
	}
	for _, field := range listKeys {
		sa, ok := w.pushKeyed(a, ai, field)
		if !ok {
			continue
		}
		sb, ok := w.pushKeyed(b, bi, field)
		if !ok {
			w.ents = w.ents[:sa]
			continue
		}
		w.diffEntries(a, b, path, field, sa, sb)
		return true
	}
	return false
}

// diffEntries diffs two keyed collections pushed on the entry stack (a's from sa, b's from sb
// to the top): an object's members (field "") or a keyed list's elements by field. It walks the
// union of their keys in sorted order, so the diff's paths come out in a stable order, and pops
// both.
func (w *flatWork) diffEntries(a, b *flatBody, path []byte, field string, sa, sb int) {
	ea, eb := sb, len(w.ents)
	ia, ib := sa, sb
	for ia < ea || ib < eb {
		cmp := 0
		switch {
		case ia == ea:
			cmp = 1
		case ib == eb:
			cmp = -1
		default:
			cmp = bytes.Compare(w.ents[ia].key, w.ents[ib].key)
		}
		na, nb := -1, -1
		var key []byte
		if cmp <= 0 {
			na, key = int(w.ents[ia].node), w.ents[ia].key
			ia++
		}
		if cmp >= 0 {
			nb, key = int(w.ents[ib].node), w.ents[ib].key
			ib++
		}
		var p []byte
		if field == "" {
			p = appendKey(path, key)
		} else {
			p = appendListKey(path, field, key)
		}
		w.diffValue(a, b, p, na, nb)
	}
	w.ents = w.ents[:sa]
}

// scalarEqual compares two values that are not both objects or both lists: equal JSON values of
// the same kind (numbers by their text, as json.Number compares them).
func scalarEqual(a, b *flatBody, ai, bi int) bool {
	ak, bk := a.nodes[ai].kind, b.nodes[bi].kind
	if ak != bk {
		return false
	}
	switch ak {
	case 'n', 't', 'f':
		return true
	case '0':
		return bytes.Equal(a.raw(ai), b.raw(bi))
	case '"':
		if bytes.Equal(a.raw(ai), b.raw(bi)) {
			return true
		}
		as, bs := a.str(ai), b.str(bi)
		if a.nodes[ai].plain && b.nodes[bi].plain {
			return isMaskAndTag(as, bs) // their raw bytes differ, so their texts do
		}
		return bytes.Equal(as, bs) || isMaskAndTag(as, bs)
	}
	return false
}

func appendListKey(path []byte, field string, key []byte) []byte {
	path = append(path, '[')
	path = append(path, field...)
	path = append(path, '=')
	if plainListKey(key) {
		path = append(path, key...)
	} else {
		path = strconv.AppendQuote(path, string(key))
	}
	return append(path, ']')
}

// plainListKey reports whether a list key can stand unquoted in a path: a plain key that may
// also hold dots and colons (an IP address, a port name, an image).
func plainListKey(k []byte) bool {
	if len(k) == 0 {
		return false
	}
	for _, c := range k {
		if !plainKeyByte(c) && c != '.' && c != ':' {
			return false
		}
	}
	return true
}

// appendKey extends a path the way people write them: spec.replicas for plain keys, and
// metadata.labels["app.kubernetes.io/name"] for keys a dot would make ambiguous.
func appendKey(path []byte, key []byte) []byte {
	if plainKey(key) {
		if len(path) > 0 {
			path = append(path, '.')
		}
		return append(path, key...)
	}
	path = append(path, '[')
	path = strconv.AppendQuote(path, string(key))
	return append(path, ']')
}

func appendIndex(path []byte, i int) []byte {
	path = append(path, '[')
	path = strconv.AppendInt(path, int64(i), 10)
	return append(path, ']')
}

func plainKey(k []byte) bool {
	if len(k) == 0 {
		return false
	}
	for _, c := range k {
		if !plainKeyByte(c) {
			return false
		}
	}
	return true
}

func plainKeyByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

func clip(s string) string { return clipTo(s, maxValueBytes) }

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
