package idmap

import (
	"context"
	"encoding/binary"
	"hash/maphash"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"
	"unsafe"
)

// MemoryStore is the in-memory ID map: a hash map into a slab of entries threaded on an LRU
// list. It is both the `memory` backend and the cache in front of Redis.
//
// Keys are kept as 128-bit hashes rather than strings: an object key with a UUID is ~60 bytes,
// the hash 16, and that is most of what keeps a live object-window under 200 bytes. Two
// independent 64-bit maphash seeds make a collision among a million entries about as likely as
// a cosmic-ray bit flip, and a collision costs at worst one misplaced span, not a crash.
type MemoryStore struct {
	now        func() time.Time
	maxEntries int
	maxBytes   int64
	onEvict    func(reason string)

	mu     sync.Mutex
	seed1  maphash.Seed
	seed2  maphash.Seed
	index  map[memKey]int32
	chunks []*[chunkSize]memEntry // fixed-size chunks: growing never copies or doubles the slab
	used   int32                  // entries handed out so far (free ones are reused first)
	cursor int32                  // the next slot the slab sweep checks (see sweep)
	free   int32                  // head of the free list threaded through entries[].next, -1 when empty
	head   int32                  // most recently used, -1 when empty
	tail   int32                  // least recently used
	bytes  int64
	closed bool
	dedup  dedupSet // duplicate marks, kept apart (see dedupSet)
	grafts dedupSet // graft marks, kept apart the same way (see marks)
	conts  dedupSet // continuation marks, likewise
}

type memKey [16]byte

// chunkSize entries are allocated at once (192 KiB), so the slab wastes at most one chunk.
const chunkSize = 4096

func (m *MemoryStore) at(idx int32) *memEntry { return &m.chunks[idx/chunkSize][idx%chunkSize] }

type memEntry struct {
	key        memKey
	val        string
	expire     int64 // unix nanoseconds
	prev, next int32
}

// entryOverhead approximates what one entry costs beyond its value bytes: the slab slot plus
// its share of the hash map's groups and control bytes.
const entryOverhead = int64(unsafe.Sizeof(memEntry{})) + 32

// sweepPerOp is how many least-recently-used entries, and how many slots of the slab, each
// operation checks for expiry, so expired records are reclaimed without a stop-the-world scan.
const sweepPerOp = 2

// freeSlot marks a slab slot on the free list (prev is -1 for the most recently used entry).
const freeSlot = -2

// NewMemoryStore returns an empty memory store bounded by cfg. onEvict (may be nil) is told the
// reason (ReasonMaxEntries, ReasonMaxBytes) of every record pushed out to stay within them.
func NewMemoryStore(cfg MemoryConfig, now func() time.Time, onEvict func(reason string)) *MemoryStore {
	if onEvict == nil {
		onEvict = func(string) {}
	}
	return &MemoryStore{
		now:        now,
		maxEntries: cfg.MaxEntries,
		maxBytes:   cfg.MaxBytes,
		onEvict:    onEvict,
		seed1:      maphash.MakeSeed(),
		seed2:      maphash.MakeSeed(),
		index:      make(map[memKey]int32),
		dedup:      dedupSet{max: cfg.MaxEntries, key: rand.Uint64()},
		grafts:     dedupSet{max: cfg.MaxEntries, key: rand.Uint64()},
		conts:      dedupSet{max: cfg.MaxEntries, key: rand.Uint64()},
		free:       -1,
		head:       -1,
		tail:       -1,
	}
}

func (m *MemoryStore) hash(key string) memKey {
	var k memKey
	h1, h2 := maphash.String(m.seed1, key), maphash.String(m.seed2, key)
	for i := range 8 {
		k[i] = byte(h1 >> (8 * i))
		k[8+i] = byte(h2 >> (8 * i))
	}
	return k
}

// Do implements Store.
func (m *MemoryStore) Do(_ context.Context, ops []Op) error {
	now := m.now().UnixNano()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	for i := range ops {
		m.apply(&ops[i], now)
	}
	m.sweep(now, sweepPerOp*len(ops))
	return nil
}

func (m *MemoryStore) apply(op *Op, now int64) {
	if set, id, ok := m.marks(op.Key); ok {
		applyMark(set, op, id, now, m.onEvict)
		return
	}
	k := m.hash(op.Key)
	idx, ok := m.index[k]
	if ok && m.at(idx).expire <= now {
		m.remove(idx)
		ok = false
	}
	switch op.Kind {
	case OpGet:
		op.Found = ok
		if ok {
			op.Value = m.at(idx).val
			m.touch(idx)
		}
	case OpSetIfAbsent:
		op.Found = ok
		if ok {
			op.Value = m.at(idx).val
			m.touch(idx)
			return
		}
		m.insert(k, op.Value, op.ExpireAt.UnixNano())
	case OpSet:
		op.Found = ok
		if ok {
			e := m.at(idx)
			m.bytes += int64(len(op.Value)) - int64(len(e.val))
			e.val, e.expire = op.Value, op.ExpireAt.UnixNano()
			m.touch(idx)
			m.evict()
			return
		}
		m.insert(k, op.Value, op.ExpireAt.UnixNano())
	case OpDelete:
		op.Found = ok
		if ok {
			m.remove(idx)
		}
	case OpIncr:
		delta, _ := strconv.ParseInt(op.Value, 10, 64)
		op.Found = ok
		if !ok {
			m.insert(k, op.Value, op.ExpireAt.UnixNano())
			return
		}
		e := m.at(idx)
		cur, _ := strconv.ParseInt(e.val, 10, 64)
		v := strconv.FormatInt(cur+delta, 10)
		m.bytes += int64(len(v)) - int64(len(e.val))
		e.val, op.Value = v, v
		m.touch(idx)
		m.evict()
	}
}

// marks returns the set that keeps key's record apart from the LRU, and the record's ID there.
// Duplicate marks (one per span), graft marks (one or two per assignment) and continuation marks
// (one per object whose spans overflow its trace) are as numerous as the records they come
// with, or more, and carry no value: as LRU entries they would cost about 90 bytes each, in a set
// 10 to 21. Each kind has its own set, as each has its own life. A graft mark names a 16-byte
// derived trace or an 8-byte span ID, so its set keeps a keyed 64-bit hash of the key: two marks
// that hash alike only make a trace context that names one of them link to its trace instead of
// nesting there (a chance of about 3 in 10^8 among a million marks); a hash never hides a mark.
func (m *MemoryStore) marks(key string) (*dedupSet, markID, bool) {
	var id markID
	if len(key) < 2 || key[1] != ':' {
		return nil, id, false
	}
	switch key[0] {
	case 'd', 'e':
		if len(key) != 2+len(id) {
			return nil, id, false
		}
		copy(id[:], key[2:])
		if key[0] == 'd' {
			return &m.dedup, id, true
		}
		return &m.conts, id, true
	case 'g':
		binary.LittleEndian.PutUint64(id[:], maphash.String(m.seed1, key))
		return &m.grafts, id, true
	}
	return nil, id, false
}

// applyMark carries out op on a mark of set. Marks have no value; OpIncr does not apply to them.
func applyMark(set *dedupSet, op *Op, id markID, now int64, onEvict func(reason string)) {
	switch op.Kind {
	case OpGet:
		op.Found = set.has(id, now)
	case OpSetIfAbsent, OpSet:
		op.Found = set.has(id, now)
		if !op.Found || op.Kind == OpSet {
			for range set.add(id, now, op.ExpireAt) {
				onEvict(ReasonMaxEntries)
			}
		}
	case OpDelete:
		op.Found = set.remove(id)
	}
	op.Value = ""
}

// Local implements Store: memory is the whole truth.
func (m *MemoryStore) Local(ops []Op) bool {
	_ = m.Do(context.Background(), ops)
	return true
}

// peek returns a live entry's value and expiry without touching the LRU order.
func (m *MemoryStore) peek(key string) (string, time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if set, id, ok := m.marks(key); ok {
		// The exact expiry of a mark is not kept: "far enough".
		return "", time.Unix(1<<40, 0), set.has(id, m.now().UnixNano())
	}
	idx, ok := m.index[m.hash(key)]
	if !ok || m.at(idx).expire <= m.now().UnixNano() {
		return "", time.Time{}, false
	}
	return m.at(idx).val, time.Unix(0, m.at(idx).expire), true
}

func (m *MemoryStore) insert(k memKey, val string, expire int64) {
	var idx int32
	if m.free >= 0 {
		idx = m.free
		m.free = m.at(idx).next
	} else {
		if m.used%chunkSize == 0 {
			m.chunks = append(m.chunks, new([chunkSize]memEntry))
		}
		idx = m.used
		m.used++
	}
	*m.at(idx) = memEntry{key: k, val: val, expire: expire, prev: -1, next: m.head}
	if m.head >= 0 {
		m.at(m.head).prev = idx
	}
	m.head = idx
	if m.tail < 0 {
		m.tail = idx
	}
	m.index[k] = idx
	m.bytes += entryOverhead + int64(len(val))
	m.evict()
}

func (m *MemoryStore) evict() {
	for len(m.index) > m.maxEntries && m.tail >= 0 {
		m.remove(m.tail)
		m.onEvict(ReasonMaxEntries)
	}
	for m.bytes > m.maxBytes && m.tail >= 0 {
		m.remove(m.tail)
		m.onEvict(ReasonMaxBytes)
	}
}

// sweep reclaims expired records. The least recently used end of the list is where records of
// one life expire first, but lives differ (an assignment's window, a relation's day, a deleted
// object's minutes): one live record there would keep every expired record behind it until the
// bounds pushed it out. So the sweep also walks the slab, n slots an operation, round and round:
// an expired record is reclaimed within as many operations as half the slots the slab has.
func (m *MemoryStore) sweep(now int64, n int) {
	for i := n; i > 0 && m.tail >= 0 && m.at(m.tail).expire <= now; i-- {
		m.remove(m.tail)
	}
	for ; n > 0 && m.used > 0; n-- {
		if m.cursor >= m.used {
			m.cursor = 0
		}
		if e := m.at(m.cursor); e.prev != freeSlot && e.expire <= now {
			m.remove(m.cursor)
		}
		m.cursor++
	}
}

func (m *MemoryStore) unlink(idx int32) {
	e := m.at(idx)
	if e.prev >= 0 {
		m.at(e.prev).next = e.next
	} else {
		m.head = e.next
	}
	if e.next >= 0 {
		m.at(e.next).prev = e.prev
	} else {
		m.tail = e.prev
	}
}

func (m *MemoryStore) touch(idx int32) {
	if m.head == idx {
		return
	}
	m.unlink(idx)
	e := m.at(idx)
	e.prev, e.next = -1, m.head
	m.at(m.head).prev = idx
	m.head = idx
	if m.tail < 0 {
		m.tail = idx
	}
}

func (m *MemoryStore) remove(idx int32) {
	m.unlink(idx)
	e := m.at(idx)
	delete(m.index, e.key)
	m.bytes -= entryOverhead + int64(len(e.val))
	*e = memEntry{next: m.free, prev: freeSlot}
	m.free = idx
}

// Len is the number of records held, marks included.
func (m *MemoryStore) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.index) + m.markTotal()
}

// markTotal is the number of marks of every kind; m.mu is held.
func (m *MemoryStore) markTotal() int { return m.dedup.count + m.grafts.count + m.conts.count }

// MarkCounts is how many marks of each kind the memory store holds.
type MarkCounts struct{ Duplicate, Graft, Continuation int }

// Marks is the number of marks held, by kind (expired ones not dropped yet included): each kind
// is bounded by max_entries apart from the records.
func (m *MemoryStore) Marks() MarkCounts {
	m.mu.Lock()
	defer m.mu.Unlock()
	return MarkCounts{Duplicate: m.dedup.count, Graft: m.grafts.count, Continuation: m.conts.count}
}

// Size is the number of records held and their estimated bytes, marks apart: what max_entries
// and max_bytes bound (expired records not swept yet included).
func (m *MemoryStore) Size() (records int, bytes int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.index), m.bytes
}

// Record is a record as Records returns it: keys are kept as hashes, so they are not.
type Record struct {
	Value  string
	Expire time.Time
}

// Records returns every record held (expired ones not yet reclaimed included) and the number of
// marks, which have no value: what a test checks the bounds of.
func (m *MemoryStore) Records() (records []Record, marks int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, idx := range m.index {
		e := m.at(idx)
		records = append(records, Record{Value: e.val, Expire: time.Unix(0, e.expire)})
	}
	return records, m.markTotal()
}

// Close implements Store.
func (m *MemoryStore) Close(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	m.index, m.chunks, m.dedup.gens, m.grafts.gens, m.conts.gens = nil, nil, nil, nil, nil
	return nil
}
