package k8sauditconnector

import (
	"container/list"
	"sync"
	"time"
)

// dedupEntryOverhead estimates what one remembered auditID costs besides its bytes: the map
// slot, the list element and the entry.
const dedupEntryOverhead = 112

// dedup remembers the auditIDs of events converted and accepted downstream, for a window and
// within a byte bound, so that a redelivered event is not converted twice.
type dedup struct {
	ttl      time.Duration
	maxBytes int64
	now      func() time.Time
	onBytes  func(delta int64)

	mu      sync.Mutex
	bytes   int64
	entries map[string]*list.Element
	order   list.List // of *dedupEntry, oldest first
}

type dedupEntry struct {
	id   string
	seen time.Time
}

func newDedup(ttl time.Duration, maxBytes int64, now func() time.Time, onBytes func(int64)) *dedup {
	return &dedup{ttl: ttl, maxBytes: maxBytes, now: now, onBytes: onBytes, entries: map[string]*list.Element{}}
}

func cost(id string) int64 { return int64(len(id)) + dedupEntryOverhead }

// seen reports whether id was remembered within the window.
func (d *dedup) seen(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.expire()
	_, ok := d.entries[id]
	return ok
}

// remember adds ids, evicting the oldest beyond the byte bound.
func (d *dedup) remember(ids []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	var delta int64
	for _, id := range ids {
		if el, ok := d.entries[id]; ok {
			el.Value.(*dedupEntry).seen = now
			d.order.MoveToBack(el)
			continue
		}
		d.entries[id] = d.order.PushBack(&dedupEntry{id: id, seen: now})
		delta += cost(id)
	}
	d.bytes += delta
	for d.bytes > d.maxBytes && d.order.Len() > 0 {
		delta -= d.drop(d.order.Front())
	}
	if d.onBytes != nil && delta != 0 {
		d.onBytes(delta)
	}
}

// expire drops what the window has passed. Callers hold mu.
func (d *dedup) expire() {
	cutoff := d.now().Add(-d.ttl)
	var delta int64
	for el := d.order.Front(); el != nil && el.Value.(*dedupEntry).seen.Before(cutoff); el = d.order.Front() {
		delta -= d.drop(el)
	}
	if d.onBytes != nil && delta != 0 {
		d.onBytes(delta)
	}
}

// drop forgets one entry and returns its cost. Callers hold mu.
func (d *dedup) drop(el *list.Element) int64 {
	e := d.order.Remove(el).(*dedupEntry)
	delete(d.entries, e.id)
	c := cost(e.id)
	d.bytes -= c
	return c
}

func (d *dedup) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.entries)
}
