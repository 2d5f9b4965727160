package auditconv

import (
	"math"
	"slices"
	"sync"
	"unsafe"

	"github.com/kubetrail/kubetrail/internal/auditconv/internal/jsonscan"
)

// A flatBody is an object body indexed in place: one pass over its bytes records where every
// value stands, in document order, without building maps or copying strings. Diffs, snapshots
// and the object cache work on it instead of on map trees, which cost a map and an interface
// value per node, several times the body's size in garbage, and a marshal to turn back into
// text. It reads as a tree does (metadata.managedFields left out, the last of duplicate keys
// counting) and encodes as jsonscan.Marshal encodes that tree, byte for byte.
type flatBody struct {
	d     []byte
	nodes []fnode

	// cut is the byte range the first metadata.managedFields member takes in d, with one comma,
	// so that the rest is still JSON: the cache keeps d without it (compactInto).
	cut [2]int32

	// base is where d starts in the buffer being indexed, while flattenAt indexes a body in
	// place in a larger document; offsets are relative to it.
	base int

	// cost, while flattenAt indexes a body of a webhook request, is charged for the nodes
	// before their storage grows (see decodeCost.nodes), so that a body of millions of tiny
	// values is refused before it holds more than the budget grants.
	cost *decodeCost
}

// fnode is one value of a flatBody. Children follow their parent: the first at index+1, each
// next sibling size nodes after the one before.
type fnode struct {
	start, end int32 // the value is d[start:end]
	key        int32 // the member's key is d[key:keyEnd], quotes included; key is -1 for elements and the root
	keyEnd     int32
	size       int32 // nodes in the subtree, this one included
	kind       byte  // '{', '[', '"', '0' (a number), 't', 'f', 'n'
	plain      bool  // a string whose bytes between the quotes are its value (jsonscan.ScanString)
	plainKey   bool
}

// nodeBytes is what each node of a response body indexed while decoding holds, twice over for
// the slice's growth.
const nodeBytes = 2 * int64(unsafe.Sizeof(fnode{}))

// Where a value stands decides what flatten leaves out.
const (
	inBody = iota
	inRoot
	inMetadata
)

// flatten indexes an object body into nodes (reusing their storage); ok is false for anything
// but one JSON object.
func flatten(d []byte, nodes []fnode) (f flatBody, ok bool) {
	i := jsonscan.SkipSpace(d, 0)
	if i >= len(d) || d[i] != '{' || len(d) > math.MaxInt32 {
		return flatBody{}, false
	}
	f = flatBody{d: d, nodes: nodes[:0]}
	end, err := f.add(i, jsonscan.MemberKey{At: -1}, 0, inRoot)
	if err != nil || jsonscan.SkipSpace(d, end) != len(d) {
		return flatBody{}, false
	}
	return f, true
}

// flattenAt indexes the object at d[i] (nesting depth), a body inside a larger document, and
// returns it as a flatBody of its own bytes and the offset after it. Its errors are jsonscan.SkipValue's,
// and errValuesOverBudget when cost refuses room for more nodes (cost may be nil).
func flattenAt(d []byte, i, depth int, nodes []fnode, cost *decodeCost) (flatBody, int, error) {
	if len(d) > math.MaxInt32 {
		end, err := jsonscan.SkipValue(d, i, depth)
		putNodes(nodes)
		return flatBody{}, end, err
	}
	if cost != nil {
		cost.nodes = 0
	}
	f := flatBody{d: d, nodes: nodes[:0], base: i, cost: cost}
	end, err := f.add(i, jsonscan.MemberKey{At: -1}, depth, inRoot)
	if err == nil {
		err = cost.nodesHeld(len(f.nodes))
	}
	if err != nil {
		putNodes(f.nodes)
		return flatBody{}, 0, err
	}
	f.d, f.base, f.cost = d[i:end:end], 0, nil
	return f, end, nil
}

// add indexes the value at d[i] and returns the offset after it.
func (f *flatBody) add(i int, key jsonscan.MemberKey, depth, where int) (int, error) {
	d := f.d
	if i >= len(d) {
		return 0, jsonscan.ErrorAt(i, "unexpected end of input")
	}
	at := len(f.nodes)
	n := fnode{start: int32(i - f.base), key: -1, plainKey: key.Plain}
	if key.At >= 0 {
		n.key, n.keyEnd = int32(key.At-f.base), int32(key.End-f.base)
	}
	if f.cost != nil && len(f.nodes) == cap(f.nodes) {
		// Charged before the storage grows: the new array and the old one, until it is
		// collected, are what nodeBytes per node stands for.
		next := max(2*cap(f.nodes), 256)
		if err := f.cost.nodesHeld(next); err != nil {
			return 0, err
		}
		f.nodes = slices.Grow(f.nodes, next-len(f.nodes))
	}
	f.nodes = append(f.nodes, n)
	var end int
	var err error
	switch c := d[i]; c {
	case '"':
		var plain bool
		end, plain, err = jsonscan.ScanString(d, i)
		f.nodes[at].kind, f.nodes[at].plain = '"', plain
	case '{':
		f.nodes[at].kind = '{'
		end, err = f.addMembers(i, depth, where)
	case '[':
		f.nodes[at].kind = '['
		if depth >= jsonscan.MaxDepth {
			return 0, jsonscan.ErrorAt(i, "nested too deeply")
		}
		end = i + 1
		for first := true; ; first = false {
			next, done, aerr := jsonscan.ArrayNext(d, end, first)
			if aerr != nil || done {
				end, err = next, aerr
				break
			}
			if end, err = f.add(next, jsonscan.MemberKey{At: -1}, depth+1, inBody); err != nil {
				break
			}
		}
	case 't':
		f.nodes[at].kind = 't'
		end, err = jsonscan.ScanLiteral(d, i, "true")
	case 'f':
		f.nodes[at].kind = 'f'
		end, err = jsonscan.ScanLiteral(d, i, "false")
	case 'n':
		f.nodes[at].kind = 'n'
		end, err = jsonscan.ScanLiteral(d, i, "null")
	default:
		f.nodes[at].kind = '0'
		end, err = jsonscan.ScanNumber(d, i)
	}
	if err != nil {
		return 0, err
	}
	f.nodes[at].end, f.nodes[at].size = int32(end-f.base), int32(len(f.nodes)-at)
	return end, nil
}

// addMembers indexes the members of the object at d[i]. The root's metadata leaves out
// managedFields, whose place is remembered in cut.
func (f *flatBody) addMembers(i, depth, where int) (int, error) {
	d := f.d
	if depth >= jsonscan.MaxDepth {
		return 0, jsonscan.ErrorAt(i, "nested too deeply")
	}
	end := i + 1
	for first := true; ; first = false {
		prev := end
		key, next, done, err := jsonscan.ObjectMember(d, end, first)
		if err != nil || done {
			return next, err
		}
		switch {
		case where == inRoot && d[next] == '{' && jsonscan.KeyIs(d, key, "metadata"):
			end, err = f.add(next, key, depth+1, inMetadata)
		case where == inMetadata && jsonscan.KeyIs(d, key, "managedFields"):
			if end, err = jsonscan.SkipValue(d, next, depth+1); err == nil && f.cut[1] == 0 {
				f.cut = memberCut(d, key.At, prev, end, first)
				f.cut[0], f.cut[1] = f.cut[0]-int32(f.base), f.cut[1]-int32(f.base)
			}
		default:
			end, err = f.add(next, key, depth+1, inBody)
		}
		if err != nil {
			return 0, err
		}
	}
}

// memberCut is the range to remove for a member from its key at to its value's end, so that
// what is left is still JSON: the comma before it, or, for a first member, the one after it.
func memberCut(d []byte, at, prevEnd, end int, first bool) [2]int32 {
	if !first {
		return [2]int32{int32(prevEnd), int32(end)}
	}
	if j := jsonscan.SkipSpace(d, end); j < len(d) && d[j] == ',' {
		return [2]int32{int32(at), int32(j + 1)}
	}
	return [2]int32{int32(at), int32(end)}
}

// compactInto copies the body without its managedFields (what the object cache keeps), into
// dst's storage (the object's previous body, no longer needed once diffed) when it fits and is
// not more than twice the size: objects change little from one write to the next, and a body
// that shrank a lot gets storage of its size.
func (f *flatBody) compactInto(dst []byte) []byte {
	a, b := int(f.cut[0]), int(f.cut[1])
	n := len(f.d) - (b - a)
	if cap(dst) < n || cap(dst) > 2*n {
		// Grown as append grows: to the allocator's size class, memory the body takes anyway,
		// so the next write's slightly larger body (a status filled in) still fits.
		dst = slices.Grow([]byte(nil), n)
	}
	dst = append(dst[:0], f.d[:a]...)
	return append(dst, f.d[b:]...)
}

// keyOf is a member's key, decoded.
func (f *flatBody) keyOf(n int) []byte {
	return jsonscan.MemberKey{At: int(f.nodes[n].key), End: int(f.nodes[n].keyEnd), Plain: f.nodes[n].plainKey}.Value(f.d)
}

// str is a string node's value, decoded.
func (f *flatBody) str(n int) []byte {
	nd := &f.nodes[n]
	inner := f.d[nd.start+1 : nd.end-1]
	if nd.plain {
		return inner
	}
	return jsonscan.Unquote(inner)
}

// raw is a node's bytes as they stand in the body.
func (f *flatBody) raw(n int) []byte { return f.d[f.nodes[n].start:f.nodes[n].end] }

// member returns the node of an object's member (the last one of that key), or -1.
func (f *flatBody) member(obj int, name string) int {
	found := -1
	for c, end := obj+1, obj+int(f.nodes[obj].size); c < end; c += int(f.nodes[c].size) {
		if jsonscan.KeyIs(f.d, jsonscan.MemberKey{At: int(f.nodes[c].key), End: int(f.nodes[c].keyEnd), Plain: f.nodes[c].plainKey}, name) {
			found = c
		}
	}
	return found
}

// keptNodes copies the index into dst's storage as it stands for compact's bytes: offsets past
// the managedFields that compact cuts move back by the cut's width.
func (f *flatBody) keptNodes(dst []fnode) []fnode {
	dst = append(dst[:0], f.nodes...)
	a, b := f.cut[0], f.cut[1]
	if b == 0 {
		return dst
	}
	width := b - a
	for i := range dst {
		n := &dst[i]
		if n.start >= b {
			n.start -= width
		}
		if n.end >= b {
			n.end -= width
		}
		if n.key >= b {
			n.key -= width
			n.keyEnd -= width
		}
	}
	return dst
}

// nodePool holds node slices for the bodies of one event at a time (a Pod is some 200 nodes)
// and for the cache's hot indexes.
var nodePool = sync.Pool{New: func() any { s := make([]fnode, 0, 256); return &s }}

func getNodes() []fnode { return (*nodePool.Get().(*[]fnode))[:0] }

// putNodes returns a node slice to nodePool, unless it has no storage or an unusually large
// body grew it.
func putNodes(s []fnode) {
	if cap(s) > 0 && cap(s) <= 1<<16 {
		p := new([]fnode) // allocated here, not on every call (s itself must not escape)
		*p = s[:0]
		nodePool.Put(p)
	}
}

// strMember is the string value of an object's member, "" when absent or not a string.
func (f *flatBody) strMember(obj int, name string) string {
	if n := f.member(obj, name); n >= 0 && f.nodes[n].kind == '"' {
		return string(f.str(n))
	}
	return ""
}

// intMember is the integer value of an object's member, 0 when absent or not an integer.
func (f *flatBody) intMember(obj int, name string) int64 {
	if n := f.member(obj, name); n >= 0 && f.nodes[n].kind == '0' {
		nd := &f.nodes[n]
		return jsonscan.ParseInt(f.d[nd.start:nd.end])
	}
	return 0
}

// symMember is strMember for values that recur from body to body (kinds, API versions,
// namespaces): their strings come from symbols.
func (f *flatBody) symMember(obj int, name string) string {
	if n := f.member(obj, name); n >= 0 && f.nodes[n].kind == '"' {
		nd := &f.nodes[n]
		return symbols.ofQuoted(f.d[nd.start+1:nd.end-1], nd.plain)
	}
	return ""
}

// objectMember is an object's member that is itself an object, or -1.
func (f *flatBody) objectMember(obj int, name string) int {
	if n := f.member(obj, name); n >= 0 && f.nodes[n].kind == '{' {
		return n
	}
	return -1
}

// nodesHeld charges the index of the response body being indexed (flattenAt) for n nodes, when
// it has been charged for fewer: before the node storage grows to n, and for the nodes it holds
// once it is complete. A refusal is errValuesOverBudget. The count starts afresh for the next
// body.
func (c *decodeCost) nodesHeld(n int) error {
	if c == nil || n <= c.nodes {
		return nil
	}
	more := n - c.nodes
	c.nodes = n
	if err := c.add(int64(more) * nodeBytes); err != nil {
		return errValuesOverBudget
	}
	return nil
}

// contexts reads the trace-context annotations of an annotations object, as scanMetadata does
// (a value that is not a string counts as "").
func (f *flatBody) contexts(obj int, keys *contextKeys) carriedList {
	var l carriedList
	for c, end := obj+1, obj+int(f.nodes[obj].size); c < end; c += int(f.nodes[c].size) {
		k := jsonscan.MemberKey{At: int(f.nodes[c].key), End: int(f.nodes[c].keyEnd), Plain: f.nodes[c].plainKey}
		pos, index, state, ok := keys.match(k.Value(f.d))
		if !ok {
			continue
		}
		v := ""
		if f.nodes[c].kind == '"' {
			v = string(f.str(c))
		}
		l = l.set(pos, index, state, v)
	}
	return l
}
