package auditconv

import (
	"strconv"
	"sync"
	"unsafe"

	"github.com/kubetrail/kubetrail/internal/auditconv/internal/jsonscan"
)

// The reasons of otelcol_k8s_audit_diff_cache_evictions (ReasonEvicted*).
const (
	// reasonEvictedCount: the least recently used object left to keep diff_cache_size.
	reasonEvictedCount = "count"
	// reasonEvictedBytes: the least recently used object left to keep diff_cache_max_bytes.
	reasonEvictedBytes = "bytes"
	// reasonEvictedTooLarge: a body larger on its own than diff_cache_max_bytes was not kept.
	reasonEvictedTooLarge = "too_large"
)

// cacheEntry is everything the receiver remembers about one object: its last audited body
// (for diffs) and its last few writes (for conflict links).
type cacheEntry struct {
	key string // the object's name key: history must survive the UID being unknown in some events
	uid string
	// The last body as JSON, managedFields left out and redacted values tagged. While the entry
	// is among the hotIndexes most recently written, nodes is its index (see flatBody); other
	// bodies are indexed again when the next write is diffed against them.
	body   []byte
	nodes  []fnode
	hotGen uint64
	rv     string

	// lastDiff is the diff that produced body. The apiserver can deliver an event twice
	// (batch retries, webhook plus log file); the second copy reuses it instead of
	// diffing the object against itself.
	lastDiff *diffResult
	// lastSkipped says that the write that produced body was not diffed: it was based on a
	// resourceVersion the cache did not hold (diffSkippedBaseNotSeen). A redelivery says so again.
	lastSkipped bool

	history []write

	c    *objectCache // the cache the entry's bytes are charged to
	cost int64        // bytes charged for the entry (footprint at its last charge)

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

	// maxBytes bounds the bytes charged by all entries (0: no bound). Bodies vary from 1 KB
	// (a Deployment) to 1 MiB (a ConfigMap at etcd's limit): a count alone bounds nothing.
	maxBytes int64
	bytes    int64
	onBytes  func(delta int64)
	onEvict  func(reason string)

	hot    [hotIndexes]hotSlot // ring of the entries whose body keeps its index
	hotPos int
	gen    uint64

	// spare is the storage of the body last let go (an entry removed, evicted, or starting
	// afresh), at most maxSpareBytes, for the next object seen for the first time: a rollout
	// replaces Pods, and a new object's body takes the storage a gone one left.
	spare []byte
}

// maxSpareBytes bounds objectCache.spare, the one body's storage kept outside the cache's bytes.
const maxSpareBytes = 64 << 10

// letGo keeps the storage of a body no entry holds any longer as the spare. Callers hold mu.
func (c *objectCache) letGo(body []byte) {
	if body != nil && cap(body) <= maxSpareBytes {
		c.spare = body[:0]
	}
}

// storageFor is the storage a new body of e may take: e's own body once diffed, else the spare.
// Callers hold mu.
func (c *objectCache) storageFor(e *cacheEntry) []byte {
	if e.body != nil {
		return e.body
	}
	b := c.spare
	c.spare = nil
	return b
}

// hotIndexes is how many of the most recently written bodies keep their index. Controllers
// write the same object several times in a burst (a rollout updates a Deployment's status a
// dozen times in seconds, a Pod's status changes with each container): the next write of such
// an object is diffed without indexing the previous body again. An index is about 2.5 times its
// body (24 bytes per JSON value), so 256 of them are about 1.5 MB for Pods; they are charged to
// the cache's bytes like the bodies.
const hotIndexes = 256

type hotSlot struct {
	e   *cacheEntry
	gen uint64
}

// fnodeSize is what one node of an index takes.
var fnodeSize = int64(unsafe.Sizeof(fnode{}))

// setBody makes body (memory of the entry's own) the entry's body, with its index when nodes is
// not nil; the entry whose slot in the ring of hot indexes this takes loses its index. Least
// recently used entries leave until the bytes fit. Callers hold mu.
func (c *objectCache) setBody(e *cacheEntry, body []byte, nodes []fnode) {
	e.dropNodes()
	e.body, e.nodes = body, nodes
	if nodes != nil {
		c.gen++
		e.hotGen = c.gen
		slot := &c.hot[c.hotPos]
		if o := slot.e; o != nil && o != e && o.hotGen == slot.gen && o.nodes != nil {
			o.dropNodes()
			o.charge()
		}
		*slot = hotSlot{e: e, gen: c.gen}
		c.hotPos = (c.hotPos + 1) % hotIndexes
	}
	e.charge()
	c.fit(e)
}

// index returns the body indexed: its kept index while it has one, else indexed anew into the
// work's nodes.
func (e *cacheEntry) index(w *flatWork) (flatBody, bool) {
	if e.nodes != nil {
		return flatBody{d: e.body, nodes: e.nodes}, true
	}
	f, ok := flatten(e.body, w.nodesA)
	w.nodesA = f.nodes[:0]
	return f, ok
}

// dropNodes gives the entry's index back to nodePool.
func (e *cacheEntry) dropNodes() {
	if e.nodes != nil {
		putNodes(e.nodes)
		e.nodes = nil
	}
}

// Eviction reasons, as counted on the evictions metric.
const (
	evictCount    = reasonEvictedCount
	evictBytes    = reasonEvictedBytes
	evictTooLarge = reasonEvictedTooLarge
)

// fit evicts least recently used entries, never keep, until the charged bytes are within
// maxBytes. A body of keep that is larger on its own than the bound is not kept, before anything
// else is evicted: it would otherwise empty the cache of every other object and still not fit.
// Callers hold mu.
func (c *objectCache) fit(keep *cacheEntry) {
	if c.maxBytes <= 0 || c.bytes <= c.maxBytes {
		return
	}
	if keep.cost > c.maxBytes && keep.hasBody() {
		keep.dropBody()
		c.evicted(evictTooLarge)
	}
	for c.bytes > c.maxBytes {
		victim := c.root.prev
		if victim == keep {
			victim = keep.prev
		}
		if victim == &c.root {
			return
		}
		c.remove(victim)
		c.evicted(evictBytes)
	}
}

func (c *objectCache) evicted(reason string) {
	if c.onEvict != nil {
		c.onEvict(reason)
	}
}

// Sizes in bytes, for the byte bound. entryOverhead is the entry itself plus its share of the
// map (key header, pointer and the swiss table's control byte and slack, 64 bytes) and the
// bytes of its resourceVersion (an etcd revision: at most 20 digits, 16 bytes rounded up; the
// converter sets it after the body, so it is not measured per entry); changeSize one change of
// a kept diff. A write in the history is writeSize (history.go).
var (
	entryOverhead = int64(unsafe.Sizeof(cacheEntry{})) + 64 + 16
	changeSize    = int64(unsafe.Sizeof(change{}))
)

// footprint is the entry's estimated size: itself, its key and UID, its writes, its last diff
// and its body.
func (e *cacheEntry) footprint() int64 {
	n := entryOverhead + int64(len(e.key)+len(e.uid)) + int64(cap(e.history))*writeSize
	for i := range e.history {
		n += e.history[i].footprint()
	}
	if d := e.lastDiff; d != nil {
		n += int64(cap(d.Changes)) * changeSize
		for _, ch := range d.Changes {
			n += int64(len(ch.Path) + len(ch.Old) + len(ch.New))
		}
		n += int64(len(d.Base))
	}
	return n + int64(cap(e.body)) + int64(cap(e.nodes))*fnodeSize
}

// charge brings the bytes the cache counts for the entry up to date. Callers hold mu.
func (e *cacheEntry) charge() {
	if e.c == nil {
		return
	}
	n := e.footprint()
	e.c.addBytes(n - e.cost)
	e.cost = n
}

func (c *objectCache) addBytes(delta int64) {
	if delta == 0 {
		return
	}
	c.bytes += delta
	if c.onBytes != nil {
		c.onBytes(delta)
	}
}

func (e *cacheEntry) hasBody() bool { return e.body != nil }

// bodyTree returns the body parsed into a tree of the caller's own.
func (e *cacheEntry) bodyTree() (jsonscan.Tree, bool) {
	if e.body == nil {
		return nil, false
	}
	return parseBody(e.body)
}

// bodyJSON returns the body encoded as a snapshot shows it (see encodeFlat).
func (e *cacheEntry) bodyJSON() string {
	w := getFlatWork()
	defer w.put()
	f, ok := e.index(w)
	if !ok {
		return ""
	}
	return w.encode(&f)
}

// dropBody forgets the body and the diff that produced it. Callers hold mu.
func (e *cacheEntry) dropBody() {
	e.dropNodes()
	if e.c != nil {
		e.c.letGo(e.body)
	}
	e.body, e.lastDiff, e.lastSkipped = nil, nil, false
	e.charge()
}

func newObjectCache(maxEntries int, onSize func(int64)) *objectCache {
	c := &objectCache{max: maxEntries, entries: make(map[string]*cacheEntry), onSize: onSize}
	c.root.next, c.root.prev = &c.root, &c.root
	return c
}

// boundBytes sets the byte bound (0: none) and the observers of the charged bytes and of
// evictions. It is called before the cache is used.
func (c *objectCache) boundBytes(maxBytes int64, onBytes func(int64), onEvict func(string)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.maxBytes, c.onBytes, c.onEvict = maxBytes, onBytes, onEvict
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
			e.dropNodes()
			c.letGo(e.body)
			*e = cacheEntry{key: key, uid: uid, prev: e.prev, next: e.next, c: c, cost: e.cost}
		}
		if e.uid == "" {
			e.uid = uid
		}
		c.moveToFront(e)
		e.charge()
		return e
	}
	e = &cacheEntry{key: key, uid: uid, c: c}
	c.entries[key] = e
	c.insertFront(e)
	c.size(1)
	e.charge()
	if len(c.entries) > c.max {
		c.remove(c.root.prev)
		c.evicted(evictCount)
	}
	c.fit(e)
	return e
}

// remove forgets an entry. Callers hold mu.
func (c *objectCache) remove(e *cacheEntry) {
	if e == nil || e == &c.root {
		return
	}
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
	e.dropNodes()
	c.letGo(e.body)
	e.body, e.lastDiff, e.lastSkipped = nil, nil, false
	c.addBytes(-e.cost)
	e.cost, e.c = 0, nil
	delete(c.entries, e.key)
	c.size(-1)
}

// uidOf returns the UID of the object that currently holds the name key, if known.
func (c *objectCache) uidOf(key []byte) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[string(key)]; e != nil {
		return e.uid
	}
	return ""
}

// keyOf returns key as a string: the entry's own when the cache holds one, so that a known
// object's key costs no allocation. Callers hold mu.
func (c *objectCache) keyOf(key []byte) string {
	if e := c.entries[string(key)]; e != nil {
		return e.key
	}
	return string(key)
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

// diffCached diffs the body the cache keeps for e against cur; ok is false when that body is
// not a JSON object.
func diffCached(e *cacheEntry, cur *flatBody) (diffResult, bool) {
	w := getFlatWork()
	defer w.put()
	f, ok := e.index(w)
	if !ok {
		return diffResult{}, false
	}
	return w.diff(&f, cur), true
}
