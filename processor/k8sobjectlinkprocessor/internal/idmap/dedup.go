package idmap

import (
	"encoding/binary"
	"math/bits"
	"time"
)

// dedupSet holds the duplicate marks of the memory store apart from its other records. Marks are
// by far the most numerous records (one per activity span, against one assignment per object and
// window) and carry no value, so in the LRU they would cost an entry each and, worse, push live
// assignments out. Here a mark is 8 bytes, and marks expire by generation: each generation holds
// the marks made during one eighth of their TTL and is dropped whole once its last mark has
// expired. A mark therefore lives up to an eighth of its TTL longer than asked, which only means a
// redelivery is still recognised a little later.
//
// Only the newest generation takes new marks, in a Go map (about 20 bytes a mark). When the next
// one begins it is sealed into a sealedMarks table of 10 bytes a mark, so that the seven older
// generations, most of the marks, cost half of what they would in maps.
type dedupSet struct {
	max   int
	gens  []dedupGen // oldest first; only the last one is open
	count int
	key   uint64 // random, so that no choice of span IDs makes a sealed table's probes long
}

type dedupGen struct {
	start  int64 // unix nanoseconds
	expire int64 // the latest expiry of its marks
	open   map[markID]struct{}
	sealed sealedMarks
}

func (g *dedupGen) len() int {
	if g.open != nil {
		return len(g.open)
	}
	return g.sealed.n
}

const dedupGenerations = 8

// markID is a mark as a key of the open generation's map: a map keyed by [8]byte takes 8
// bytes a slot where one keyed by uint64 takes 16 (measured, Go 1.26).
type markID [8]byte

func (id markID) u64() uint64 { return binary.LittleEndian.Uint64(id[:]) }

func (d *dedupSet) expireOld(now int64) {
	drop := 0
	for drop < len(d.gens) && d.gens[drop].expire <= now {
		d.count -= d.gens[drop].len()
		drop++
	}
	if drop > 0 {
		d.dropOldest(drop)
	}
}

func (d *dedupSet) dropOldest(n int) {
	d.gens = append(d.gens[:0], d.gens[n:]...)
	clear(d.gens[len(d.gens):cap(d.gens)]) // dropped tables must not stay reachable from the array
}

func (d *dedupSet) has(id markID, now int64) bool {
	d.expireOld(now)
	for i := len(d.gens) - 1; i >= 0; i-- {
		g := &d.gens[i]
		if g.open != nil {
			if _, ok := g.open[id]; ok {
				return true
			}
		} else if g.sealed.has(id.u64()) {
			return true
		}
	}
	return false
}

// add records a mark; it reports the number of marks evicted to stay within max.
func (d *dedupSet) add(id markID, now int64, expire time.Time) int {
	exp := expire.UnixNano()
	ttl := exp - now
	genLen := max(ttl/dedupGenerations, int64(time.Second))
	// A generation also ends once it holds its share of max, so that a burst inside one
	// generation can still be bounded by dropping the oldest.
	genMax := max(d.max/dedupGenerations, 1)
	if n := len(d.gens); n == 0 || now-d.gens[n-1].start >= genLen || len(d.gens[n-1].open) >= genMax {
		if n > 0 {
			d.gens[n-1].seal(d.key)
		}
		d.gens = append(d.gens, dedupGen{start: now, open: make(map[markID]struct{})})
	}
	g := &d.gens[len(d.gens)-1]
	if _, ok := g.open[id]; !ok {
		g.open[id] = struct{}{}
		d.count++
	}
	g.expire = max(g.expire, exp)
	evicted := 0
	for d.count > d.max && len(d.gens) > 1 {
		evicted += d.gens[0].len()
		d.count -= d.gens[0].len()
		d.dropOldest(1)
	}
	return evicted
}

func (d *dedupSet) remove(id markID) bool {
	found := false
	for i := range d.gens {
		g := &d.gens[i]
		if g.open != nil {
			if _, ok := g.open[id]; ok {
				delete(g.open, id)
				d.count--
				found = true
			}
		} else if g.sealed.remove(id.u64()) {
			d.count--
			found = true
		}
	}
	return found
}

// seal turns the open generation into its compact table.
func (g *dedupGen) seal(key uint64) {
	if g.open == nil {
		return
	}
	g.sealed = newSealedMarks(key, len(g.open))
	for id := range g.open {
		g.sealed.insert(id.u64())
	}
	g.open = nil
}

// sealedMarks is a generation that takes no more marks: an open-addressing table of the marks
// themselves, linear probing, filled to at most 80 %, so 10 bytes a mark with one cache line or
// two per lookup. 0 marks an empty slot; the mark 0 is held apart. A slot's home is a keyed hash
// of the mark.
type sealedMarks struct {
	slots []uint64
	n     int
	zero  bool
	key   uint64
}

func newSealedMarks(key uint64, n int) sealedMarks {
	return sealedMarks{slots: make([]uint64, n+n/4+1), key: key}
}

// home mixes the mark with the set's random key (murmur3's finaliser) and maps the result onto
// the table by its high bits.
func (s *sealedMarks) home(id uint64) int {
	h := id ^ s.key
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	hi, _ := bits.Mul64(h, uint64(len(s.slots)))
	return int(hi)
}

func (s *sealedMarks) next(i int) int {
	if i++; i == len(s.slots) {
		return 0
	}
	return i
}

// find returns the slot holding id, or the empty slot where it would go.
func (s *sealedMarks) find(id uint64) (int, bool) {
	for i := s.home(id); ; i = s.next(i) {
		switch s.slots[i] {
		case id:
			return i, true
		case 0:
			return i, false
		}
	}
}

func (s *sealedMarks) insert(id uint64) {
	if id == 0 {
		if !s.zero {
			s.zero = true
			s.n++
		}
		return
	}
	if i, ok := s.find(id); !ok {
		s.slots[i] = id
		s.n++
	}
}

func (s *sealedMarks) has(id uint64) bool {
	if id == 0 {
		return s.zero
	}
	if s.n == 0 {
		return false
	}
	_, ok := s.find(id)
	return ok
}

// remove deletes id by shifting back the marks probed past its slot, so no tombstones are left.
func (s *sealedMarks) remove(id uint64) bool {
	if id == 0 {
		was := s.zero
		if was {
			s.zero = false
			s.n--
		}
		return was
	}
	if s.n == 0 {
		return false
	}
	i, ok := s.find(id)
	if !ok {
		return false
	}
	for j := s.next(i); s.slots[j] != 0; j = s.next(j) {
		k := s.home(s.slots[j])
		// The mark at j stays if its home lies cyclically in (i, j].
		if (i < j && i < k && k <= j) || (i > j && (i < k || k <= j)) {
			continue
		}
		s.slots[i] = s.slots[j]
		i = j
	}
	s.slots[i] = 0
	s.n--
	return true
}
