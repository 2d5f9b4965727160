package auditconv

import (
	"bytes"
	"slices"
	"sync"
	"unsafe"

	"github.com/kubetrail/kubetrail/internal/auditconv/internal/jsonscan"
)

// The walks over indexed bodies (flat.go) share a pooled scratch, flatWork: the members of an
// object sorted by key, a keyed list's elements sorted by key, a value encoded as jsonscan.Marshal
// encodes its tree, and the changes a diff (diff.go) collects.

// change is one changed path. Old and New are JSON texts; "" means the path is absent on that
// side (a JSON text is never empty, so absent and the empty string "" stay distinct).
type change struct {
	Path, Old, New string
}

// diffResult is the outcome of comparing two bodies of one object.
type diffResult struct {
	Changes []change // sorted by path, at most maxDiffPaths
	Total   int      // every changed path, including those beyond maxDiffPaths
	// Base is the resourceVersion of the body the diff was computed from, set when the request
	// did not name the version it was based on (exported as attrDiffBase).
	Base string
}

// entry is a keyed child: an object's member by its key, or a keyed list's element by the
// value of its key field.
type entry struct {
	key  []byte
	node int32
}

// flatWork is the scratch of diffs and encodings, pooled: entries are a stack that each object
// being walked pushes its sorted members onto and pops when done.
type flatWork struct {
	ents   []entry
	nodesA []fnode // a cached body indexed again for its diff (cacheEntry.index)
	path   []byte  // the path being diffed
	buf    []byte  // the value being encoded
	d      diffResult
}

var flatWorkPool = sync.Pool{New: func() any { return new(flatWork) }}

func getFlatWork() *flatWork { return flatWorkPool.Get().(*flatWork) }

// put returns w to the pool; buffers that grew past a large body's needs are let go.
func (w *flatWork) put() {
	if cap(w.ents) > 1<<14 || cap(w.nodesA) > 1<<16 || cap(w.path) > 1<<12 || cap(w.buf) > 1<<16 {
		return
	}
	w.ents, w.d = w.ents[:0], diffResult{}
	flatWorkPool.Put(w)
}

// pushMembers pushes an object's members sorted by key, one per key (the last, as a map keeps
// it), and returns where they start.
func (w *flatWork) pushMembers(f *flatBody, obj int) int {
	start := len(w.ents)
	for c, end := obj+1, obj+int(f.nodes[obj].size); c < end; c += int(f.nodes[c].size) {
		w.ents = append(w.ents, entry{key: f.keyOf(c), node: int32(c)})
	}
	w.sortUnique(start)
	return start
}

// sortUnique sorts the entries from start by key, keeping the last of each run of equal keys.
func (w *flatWork) sortUnique(start int) {
	s := w.ents[start:]
	if !slices.IsSortedFunc(s, cmpEntry) {
		slices.SortStableFunc(s, cmpEntry)
	}
	out := start
	for i := start; i < len(w.ents); i++ {
		if i+1 < len(w.ents) && bytes.Equal(w.ents[i].key, w.ents[i+1].key) {
			continue
		}
		w.ents[out] = w.ents[i]
		out++
	}
	w.ents = w.ents[:out]
}

func cmpEntry(a, b entry) int { return bytes.Compare(a.key, b.key) }

// pushKeyed pushes a list's elements sorted by the string value of their field and reports
// whether the list is keyed by it: every element an object whose field is a distinct,
// non-empty string. When it is not, nothing stays pushed.
func (w *flatWork) pushKeyed(f *flatBody, list int, field string) (int, bool) {
	start := len(w.ents)
	for c, end := list+1, list+int(f.nodes[list].size); c < end; c += int(f.nodes[c].size) {
		if f.nodes[c].kind != '{' {
			w.ents = w.ents[:start]
			return start, false
		}
		m := f.member(c, field)
		if m < 0 || f.nodes[m].kind != '"' {
			w.ents = w.ents[:start]
			return start, false
		}
		k := f.str(m)
		if len(k) == 0 {
			w.ents = w.ents[:start]
			return start, false
		}
		w.ents = append(w.ents, entry{key: k, node: int32(c)})
	}
	s := w.ents[start:]
	slices.SortFunc(s, cmpEntry)
	for i := 1; i < len(s); i++ {
		if bytes.Equal(s[i-1].key, s[i].key) {
			w.ents = w.ents[:start]
			return start, false
		}
	}
	return start, true
}

// appendValue encodes node n as jsonscan.Marshal encodes the same value of a tree: keys sorted, one
// per key, strings quoted as jsonscan.AppendQuoted quotes them.
func (w *flatWork) appendValue(dst []byte, f *flatBody, n int) []byte {
	nd := &f.nodes[n]
	switch nd.kind {
	case '{':
		start := w.pushMembers(f, n)
		dst = append(dst, '{')
		for i := start; i < len(w.ents); i++ {
			if i > start {
				dst = append(dst, ',')
			}
			e := w.ents[i]
			c := &f.nodes[e.node]
			if c.plainKey {
				dst = append(dst, f.d[c.key:c.keyEnd]...)
			} else {
				dst = jsonscan.AppendQuoted(dst, string(e.key))
			}
			dst = append(dst, ':')
			dst = w.appendValue(dst, f, int(e.node))
		}
		w.ents = w.ents[:start]
		return append(dst, '}')
	case '[':
		dst = append(dst, '[')
		for c, end := n+1, n+int(nd.size); c < end; c += int(f.nodes[c].size) {
			if c > n+1 {
				dst = append(dst, ',')
			}
			dst = w.appendValue(dst, f, c)
		}
		return append(dst, ']')
	case '"':
		if nd.plain {
			return append(dst, f.d[nd.start:nd.end]...)
		}
		return jsonscan.AppendQuoted(dst, string(f.str(n)))
	default: // numbers and literals stand as they are
		return append(dst, f.d[nd.start:nd.end]...)
	}
}

// text encodes node n as a string (see appendValue).
func (w *flatWork) text(f *flatBody, n int) string {
	w.buf = w.appendValue(w.buf[:0], f, n)
	return string(w.buf)
}

// encodeFlat encodes a whole body as jsonscan.Marshal encodes its tree.
func encodeFlat(f *flatBody) string {
	w := getFlatWork()
	defer w.put()
	return w.encode(f)
}

func (w *flatWork) encode(f *flatBody) string {
	// Sized for the body without its managedFields, which the encoding leaves out.
	buf := w.appendValue(make([]byte, 0, len(f.d)-int(f.cut[1]-f.cut[0])), f, 0)
	return unsafe.String(unsafe.SliceData(buf), len(buf)) // buf is this string's alone
}
