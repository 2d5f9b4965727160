package idmap

import "time"

// dedupSet holds the duplicate marks of the memory store apart from its other records. Marks are
// by far the most numerous records (one per activity span, against one assignment per object and
// window) and carry no value, so in the LRU they would cost an entry each and, worse, push live
// assignments out. Here a mark is 8 bytes in a hash set, and marks expire by generation: each
// generation holds the marks made during one eighth of their TTL and is dropped whole once its
// last mark has expired. A mark therefore lives up to an eighth of its TTL longer than asked,
// which only means a redelivery is still recognised a little later.
type dedupSet struct {
	max   int
	gens  []dedupGen // oldest first
	count int
}

type dedupGen struct {
	start  int64 // unix nanoseconds
	expire int64 // the latest expiry of its marks
	marks  map[[8]byte]struct{}
}

const dedupGenerations = 8

func dedupID(key string) ([8]byte, bool) {
	var id [8]byte
	if len(key) != 2+len(id) || key[:2] != "d:" {
		return id, false
	}
	copy(id[:], key[2:])
	return id, true
}

func (d *dedupSet) expireOld(now int64) {
	drop := 0
	for drop < len(d.gens) && d.gens[drop].expire <= now {
		d.count -= len(d.gens[drop].marks)
		drop++
	}
	if drop > 0 {
		d.gens = append(d.gens[:0], d.gens[drop:]...)
	}
}

func (d *dedupSet) has(id [8]byte, now int64) bool {
	d.expireOld(now)
	for i := len(d.gens) - 1; i >= 0; i-- {
		if _, ok := d.gens[i].marks[id]; ok {
			return true
		}
	}
	return false
}

// add records a mark; it reports the number of marks evicted to stay within max.
func (d *dedupSet) add(id [8]byte, now int64, expire time.Time) int {
	exp := expire.UnixNano()
	ttl := exp - now
	genLen := max(ttl/dedupGenerations, int64(time.Second))
	// A generation also ends once it holds its share of max, so that a burst inside one
	// generation can still be bounded by dropping the oldest.
	genMax := max(d.max/dedupGenerations, 1)
	if n := len(d.gens); n == 0 || now-d.gens[n-1].start >= genLen || len(d.gens[n-1].marks) >= genMax {
		d.gens = append(d.gens, dedupGen{start: now, marks: make(map[[8]byte]struct{})})
	}
	g := &d.gens[len(d.gens)-1]
	if _, ok := g.marks[id]; !ok {
		g.marks[id] = struct{}{}
		d.count++
	}
	g.expire = max(g.expire, exp)
	evicted := 0
	for d.count > d.max && len(d.gens) > 1 {
		evicted += len(d.gens[0].marks)
		d.count -= len(d.gens[0].marks)
		d.gens = append(d.gens[:0], d.gens[1:]...)
	}
	return evicted
}

func (d *dedupSet) remove(id [8]byte) bool {
	found := false
	for i := range d.gens {
		if _, ok := d.gens[i].marks[id]; ok {
			delete(d.gens[i].marks, id)
			d.count--
			found = true
		}
	}
	return found
}
