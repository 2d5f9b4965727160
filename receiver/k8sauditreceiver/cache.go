package k8sauditreceiver

import (
	"strconv"
	"sync"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// historyLen is how many successful writes per object are kept for conflict links. A 409 is
// linked to the write that moved the resourceVersion the loser had read, which in practice is
// one of the last few writes: controllers retry conflicts within milliseconds.
const historyLen = 8

// write is a successful write of an object, kept so that a later 409 Conflict can link to it.
type write struct {
	auditID string
	baseRV  string // the resourceVersion the request was based on (objectRef.resourceVersion)
	newRV   string // the resourceVersion in the response, when the body was audited
	traceID pcommon.TraceID
	spanID  pcommon.SpanID
}

// hotTrees is how many of the most recently written bodies are kept parsed. Controllers write
// the same object several times in a burst (a rollout updates a Deployment's status a dozen
// times in seconds); keeping those bodies as trees spares a parse and a marshal per write. Other
// bodies are kept as JSON, which is about five times smaller: a Pod of the fixtures is 2.3 KB
// as JSON and 11 KB parsed, so 512 trees are about 6 MB.
const hotTrees = 512

type hotSlot struct {
	e   *cacheEntry
	gen uint64
}

// cacheEntry is everything the receiver remembers about one object: its last audited body
// (for diffs) and its last few writes (for conflict links).
type cacheEntry struct {
	key string // the object's name key: history must survive the UID being unknown in some events
	uid string
	// The last body, managedFields stripped and redacted values tagged: parsed (tree) while it
	// is among the hotTrees most recent, else as JSON (body).
	tree   tree
	body   []byte
	hotGen uint64
	rv     string

	// lastDiff is the diff that produced body. The apiserver can deliver an event twice
	// (batch retries, webhook plus log file); the second copy reuses it instead of
	// diffing the object against itself.
	lastDiff *diffResult

	history []write

	prev, next *cacheEntry
}

// objectCache is a bounded LRU of cacheEntry by object name key. It is the receiver's only
// state: with several replicas behind one Service, a diff needs the previous write of the
// object to have reached the same replica.
type objectCache struct {
	mu      sync.Mutex
	max     int
	entries map[string]*cacheEntry
	root    cacheEntry // sentinel: root.next is the most recently used
	onSize  func(delta int64)

	hot    [hotTrees]hotSlot // ring of the entries whose body is a tree
	hotPos int
	gen    uint64
}

// setBody makes t the entry's body, kept parsed; the entry that held the oldest hot slot has
// its tree turned into JSON. Callers hold mu and never modify t afterwards.
func (c *objectCache) setBody(e *cacheEntry, t tree) {
	e.tree, e.body = t, nil
	c.gen++
	e.hotGen = c.gen
	slot := &c.hot[c.hotPos]
	if o := slot.e; o != nil && o.hotGen == slot.gen && o.tree != nil {
		o.body, o.tree = []byte(marshalJSON(o.tree)), nil
	}
	*slot = hotSlot{e: e, gen: c.gen}
	c.hotPos = (c.hotPos + 1) % hotTrees
}

func (e *cacheEntry) hasBody() bool { return e.tree != nil || e.body != nil }

// bodyTree returns the body parsed. A hot tree is shared: callers only read it.
func (e *cacheEntry) bodyTree() (tree, bool) {
	if e.tree != nil {
		return e.tree, true
	}
	if e.body != nil {
		return parseTree(e.body)
	}
	return nil, false
}

func (e *cacheEntry) bodyJSON() string {
	if e.tree != nil {
		return marshalJSON(e.tree)
	}
	return string(e.body)
}

func (e *cacheEntry) dropBody() { e.tree, e.body, e.hotGen = nil, nil, 0 }

func newObjectCache(maxEntries int, onSize func(int64)) *objectCache {
	c := &objectCache{max: maxEntries, entries: make(map[string]*cacheEntry), onSize: onSize}
	c.root.next, c.root.prev = &c.root, &c.root
	return c
}

// get returns the entry of key, or nil. Callers hold mu.
func (c *objectCache) get(key string) *cacheEntry {
	e := c.entries[key]
	if e != nil {
		c.moveToFront(e)
	}
	return e
}

// entry returns the entry of key for an object with the given UID, creating it or, when the
// name now belongs to a different object (deleted and recreated), starting it afresh.
// Callers hold mu.
func (c *objectCache) entry(key, uid string) *cacheEntry {
	e := c.entries[key]
	if e != nil {
		if uid != "" && e.uid != "" && uid != e.uid {
			*e = cacheEntry{key: key, uid: uid, prev: e.prev, next: e.next}
		}
		if e.uid == "" {
			e.uid = uid
		}
		c.moveToFront(e)
		return e
	}
	e = &cacheEntry{key: key, uid: uid}
	c.entries[key] = e
	c.insertFront(e)
	c.size(1)
	if len(c.entries) > c.max {
		c.remove(c.root.prev)
	}
	return e
}

// remove forgets an entry. Callers hold mu.
func (c *objectCache) remove(e *cacheEntry) {
	if e == nil || e == &c.root {
		return
	}
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
	e.dropBody()
	delete(c.entries, e.key)
	c.size(-1)
}

// uidOf returns the UID of the object that currently holds the name key, if known.
func (c *objectCache) uidOf(key string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[key]; e != nil {
		return e.uid
	}
	return ""
}

func (c *objectCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

func (c *objectCache) moveToFront(e *cacheEntry) {
	if c.root.next == e {
		return
	}
	e.prev.next, e.next.prev = e.next, e.prev
	c.insertFront(e)
}

func (c *objectCache) insertFront(e *cacheEntry) {
	e.prev, e.next = &c.root, c.root.next
	c.root.next.prev = e
	c.root.next = e
}

func (c *objectCache) size(delta int64) {
	if c.onSize != nil {
		c.onSize(delta)
	}
}

// record appends a successful write to the entry's history.
func (e *cacheEntry) record(w write) {
	for _, h := range e.history {
		if h.auditID == w.auditID {
			return // redelivered
		}
	}
	if len(e.history) == historyLen {
		copy(e.history, e.history[1:])
		e.history = e.history[:historyLen-1]
	}
	e.history = append(e.history, w)
}

// conflictWinner finds the write that moved the object away from resourceVersion rv, which
// a request that failed with 409 Conflict had read. In order of confidence: a successful
// write based on the same rv (both read rv, it committed first); the write right after the
// one that produced rv; the earliest write with a larger rv. resourceVersions are opaque by
// contract, but every apiserver backed by etcd makes them increasing integers, and the last
// rule only applies where they are.
func (e *cacheEntry) conflictWinner(rv string) (write, bool) {
	for _, w := range e.history {
		if w.baseRV == rv {
			return w, true
		}
	}
	for i, w := range e.history {
		if w.newRV == rv && i+1 < len(e.history) {
			return e.history[i+1], true
		}
	}
	if n, ok := rvNumber(rv); ok {
		for _, w := range e.history {
			if m, ok := rvNumber(w.newRV); ok && m > n {
				return w, true
			}
		}
	}
	return write{}, false
}

func rvNumber(rv string) (uint64, bool) {
	n, err := strconv.ParseUint(rv, 10, 64)
	return n, err == nil
}

// rvOlder reports whether a is known to be older than b. Unknown orders count as not older,
// so an opaque resourceVersion never suppresses a diff.
func rvOlder(a, b string) bool {
	x, ok1 := rvNumber(a)
	y, ok2 := rvNumber(b)
	return ok1 && ok2 && x < y
}
