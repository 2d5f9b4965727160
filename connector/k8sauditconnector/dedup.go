package k8sauditconnector

import (
	"hash/maphash"
	"sync"
	"time"
)

// dedupEntryBytes is what one remembered event costs in the heap, measured: a 16-byte key in a
// Go map takes 35 to 56 bytes (Go 1.26), as far as the map's tables are from their next growth;
// this is the top of that range. TestDedupEntryBytesIsMeasured fills a million keys and holds
// this figure to the heap they take.
const dedupEntryBytes = 56

// dedupGenerations is how many generations a window is cut into: an entry is remembered up to
// an eighth of dedup_window longer than asked, and eviction drops an eighth at a time.
const dedupGenerations = 8

// dedupKey stands for one event of one cluster: a 128-bit hash of the cluster and the
// auditID under two seeds drawn at start. Keys instead of the IDs themselves make an entry a
// third of what a string and its bookkeeping cost, whatever the ID's length. Two events share a
// key with a probability of about n²/2^129 for n remembered IDs (below 10^-26 at a million), and
// the seeds are the process's own, so no client can choose auditIDs that collide.
type dedupKey [2]uint64

// dedup remembers the events converted and accepted downstream, for a window and within a byte
// bound, so that a redelivered event is not converted twice. Entries are kept by generation:
// each holds the entries remembered during an eighth of the window (or an eighth of the bound)
// and is dropped whole once the window has passed its last entry, or, oldest first, when the
// bound is reached.
type dedup struct {
	ttl      time.Duration
	maxBytes int64
	now      func() time.Time
	onBytes  func(delta int64)
	seeds    [2]maphash.Seed

	mu    sync.Mutex
	gens  []dedupGen // oldest first
	count int
}

type dedupGen struct {
	start, last time.Time
	keys        map[dedupKey]struct{}
}

func newDedup(ttl time.Duration, maxBytes int64, now func() time.Time, onBytes func(int64)) *dedup {
	return &dedup{ttl: ttl, maxBytes: maxBytes, now: now, onBytes: onBytes,
		seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}}
}

// key is the dedup key of an event: its cluster and its auditID.
func (d *dedup) key(cluster, auditID string) dedupKey {
	var k dedupKey
	var h maphash.Hash
	for i, seed := range d.seeds {
		h.SetSeed(seed)
		_, _ = h.WriteString(cluster)
		_ = h.WriteByte('/')
		_, _ = h.WriteString(auditID)
		k[i] = h.Sum64()
	}
	return k
}

// seen reports whether k was remembered within the window.
func (d *dedup) seen(k dedupKey) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.expire()
	for i := len(d.gens) - 1; i >= 0; i-- {
		if _, ok := d.gens[i].keys[k]; ok {
			return true
		}
	}
	return false
}

// remember adds keys to the newest generation, dropping the oldest generations beyond the byte
// bound. A key already there stays; one in an older generation is added again, so that it
// lives a window from now, as a renewed entry should.
func (d *dedup) remember(keys []dedupKey) {
	if len(keys) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	before := d.count
	perGen := max(d.maxBytes/dedupEntryBytes/dedupGenerations, 1)
	for _, k := range keys {
		n := len(d.gens)
		if n == 0 || now.Sub(d.gens[n-1].start) >= d.ttl/dedupGenerations || int64(len(d.gens[n-1].keys)) >= perGen {
			d.gens = append(d.gens, dedupGen{start: now, keys: make(map[dedupKey]struct{})})
			n++
		}
		g := &d.gens[n-1]
		g.last = now
		if _, ok := g.keys[k]; !ok {
			g.keys[k] = struct{}{}
			d.count++
		}
	}
	for int64(d.count)*dedupEntryBytes > d.maxBytes && len(d.gens) > 1 {
		d.dropOldest()
	}
	d.report(before)
}

// expire drops the generations whose last entry the window has passed. Callers hold mu.
func (d *dedup) expire() {
	before := d.count
	cutoff := d.now().Add(-d.ttl)
	for len(d.gens) > 0 && d.gens[0].last.Before(cutoff) {
		d.dropOldest()
	}
	d.report(before)
}

// dropOldest forgets the oldest generation. Callers hold mu.
func (d *dedup) dropOldest() {
	d.count -= len(d.gens[0].keys)
	d.gens[0] = dedupGen{}
	d.gens = d.gens[1:]
}

// report hands the change of the held bytes since before entries to onBytes. Callers hold mu.
func (d *dedup) report(before int) {
	if delta := int64(d.count-before) * dedupEntryBytes; delta != 0 && d.onBytes != nil {
		d.onBytes(delta)
	}
}

func (d *dedup) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.count
}
