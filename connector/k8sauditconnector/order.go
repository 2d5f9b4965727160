package k8sauditconnector

import (
	"context"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/collector/client"
)

// The reasons of otelcol_k8s_audit_offset_order_skips.
const (
	// orderSkipGap: a call went on without the offsets before it, after waiting max_wait for
	// them (a message the receiver never hands on, one slower than max_wait, or a partition that
	// came back at a later offset).
	orderSkipGap = "gap"
	// orderSkipLate: a call came after a later offset of its partition was converted (a
	// redelivery, or one that a gap left behind). Its diffs may say out_of_order.
	orderSkipLate = "late"
)

// maxOrderedPartitions bounds how many partitions the sequencer remembers; past it, the ones
// with nothing in flight are forgotten (a partition met again starts afresh).
const maxOrderedPartitions = 4096

// sequencer converts the calls of one Kafka partition in offset order. The kafka receiver puts
// each message's topic, partition and offset in its call's context; with
// partition_processing.max_in_flight.records above 1 it runs several messages of a partition at
// once, and two writes of one object in neighbouring messages could then be diffed in the wrong
// order (the later one says base_not_seen, the earlier out_of_order). Only the conversion is in
// order: the calls decode, and hand their spans on, together.
//
// A call waits until every offset below it was converted, for at most maxWait: the receiver
// never hands on a message it could not decode, so a missing offset is given up after maxWait.
// A call whose offset is below one already converted goes at once (it is late: a redelivery).
// The first calls of a partition new to the sequencer wait maxWait, the lowest then going first:
// which offset a partition resumes at is not known until its messages arrive. Calls without a
// Kafka offset in their context are never held.
type sequencer struct {
	maxWait time.Duration
	now     func() time.Time
	onSkip  func(ctx context.Context, reason string)

	mu    sync.Mutex
	parts map[partitionKey]*partitionOrder
}

// partitionOrder is what the sequencer knows of one partition.
type partitionOrder struct {
	next       int64 // the lowest offset not converted yet; -1 until the first call converts
	converting bool  // the call at next is converting: nothing else of the partition may
	waiting    []int64
	// changed is closed, and replaced, whenever next, converting or waiting changes.
	changed chan struct{}
}

// orderTicket is a call's place in its partition; its zero value (no Kafka offset) holds nothing.
type orderTicket struct {
	part   *partitionOrder
	offset int64
	late   bool
}

func newSequencer(maxWait time.Duration, now func() time.Time, onSkip func(context.Context, string)) *sequencer {
	return &sequencer{maxWait: maxWait, now: now, onSkip: onSkip, parts: map[partitionKey]*partitionOrder{}}
}

// partitionKey names a Kafka partition: its topic (empty when the metadata names none) and number.
type partitionKey struct {
	topic     string
	partition int32
}

// maxTopicBytes is Kafka's own bound on a topic name: metadata that names a longer one did not
// come from a Kafka record (an OTLP receiver with include_metadata passes on a client's headers),
// and is not kept.
const maxTopicBytes = 249

// kafkaOffset reads the kafka receiver's record metadata from ctx: its partition and offset.
// Anything else (a value twice, as when a record's own headers repeat a key; a topic longer than
// Kafka allows; a partition or offset that is no number of Kafka's range) orders nothing.
func kafkaOffset(ctx context.Context) (partitionKey, int64, bool) {
	md := client.FromContext(ctx).Metadata
	topic, partition, offset := md.Get("kafka.topic"), md.Get("kafka.partition"), md.Get("kafka.offset")
	if len(partition) != 1 || len(offset) != 1 || len(topic) > 1 {
		return partitionKey{}, 0, false
	}
	o, err := strconv.ParseInt(offset[0], 10, 64)
	if err != nil || o < 0 {
		return partitionKey{}, 0, false
	}
	n, err := strconv.ParseInt(partition[0], 10, 32)
	if err != nil || n < 0 {
		return partitionKey{}, 0, false
	}
	key := partitionKey{partition: int32(n)}
	if len(topic) == 1 {
		if len(topic[0]) > maxTopicBytes {
			return partitionKey{}, 0, false
		}
		key.topic = topic[0]
	}
	return key, o, true
}

// wait returns once the call of ctx may convert: every offset of its partition below its own
// was converted, maxWait passed, or ctx ended. The caller must call done with the ticket.
func (s *sequencer) wait(ctx context.Context) orderTicket {
	key, offset, ok := kafkaOffset(ctx)
	if !ok {
		return orderTicket{}
	}
	s.mu.Lock()
	p := s.partition(key)
	if offset < p.next {
		s.mu.Unlock()
		s.onSkip(ctx, orderSkipLate)
		return orderTicket{part: p, offset: offset, late: true}
	}
	p.waiting = insertSorted(p.waiting, offset)
	deadline := s.now().Add(s.maxWait)
	gap := false
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if !p.converting {
			if offset == p.next {
				break
			}
			// The offsets below the lowest waiting call are given up once its wait is over:
			// that call goes next, the others stay in order behind it.
			if p.waiting[0] == offset && !s.now().Before(deadline) {
				// A partition met for the first time (assigned to this replica, or forgotten)
				// starts at the lowest offset that arrived within maxWait: no gap.
				gap = p.next >= 0
				p.next = offset
				break
			}
		}
		changed := p.changed
		s.mu.Unlock()
		var expired <-chan time.Time
		if d := deadline.Sub(s.now()); d > 0 {
			if timer == nil {
				timer = time.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			expired = timer.C
		}
		select {
		case <-changed:
		case <-expired:
		case <-ctx.Done():
			s.mu.Lock()
			p.waiting = removeSorted(p.waiting, offset)
			p.signal()
			s.mu.Unlock()
			// Converting now, out of order, beats failing the call: the caller's own work
			// notices ctx. A late call is what the sequencer would have made of it anyway.
			return orderTicket{part: p, offset: offset, late: true}
		}
		s.mu.Lock()
		if offset < p.next {
			// The same offset was converted by another call while this one slept (a message
			// delivered twice at once): this one goes now, late.
			p.waiting = removeSorted(p.waiting, offset)
			p.signal()
			s.mu.Unlock()
			s.onSkip(ctx, orderSkipLate)
			return orderTicket{part: p, offset: offset, late: true}
		}
	}
	p.waiting = removeSorted(p.waiting, offset)
	p.converting = true
	p.signal()
	s.mu.Unlock()
	if gap {
		s.onSkip(ctx, orderSkipGap)
	}
	return orderTicket{part: p, offset: offset}
}

// done ends the conversion of a call that waited: the next offset of its partition may go.
// A call that was refused before converting calls it too, so that later ones do not wait for it.
func (s *sequencer) done(t orderTicket) {
	if t.part == nil || t.late {
		return
	}
	s.mu.Lock()
	t.part.converting = false
	if t.offset >= t.part.next {
		t.part.next = t.offset + 1
	}
	t.part.signal()
	s.mu.Unlock()
}

// partition returns key's state, making it. Callers hold mu.
func (s *sequencer) partition(key partitionKey) *partitionOrder {
	if p, ok := s.parts[key]; ok {
		return p
	}
	if len(s.parts) >= maxOrderedPartitions {
		for k, p := range s.parts {
			if !p.converting && len(p.waiting) == 0 {
				delete(s.parts, k)
			}
		}
	}
	p := &partitionOrder{next: -1, changed: make(chan struct{})}
	s.parts[key] = p
	return p
}

// signal wakes the partition's waiting calls. Callers hold mu.
func (p *partitionOrder) signal() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func insertSorted(s []int64, v int64) []int64 {
	i := len(s)
	for i > 0 && s[i-1] > v {
		i--
	}
	s = append(s, 0)
	copy(s[i+1:], s[i:])
	s[i] = v
	return s
}

func removeSorted(s []int64, v int64) []int64 {
	for i, x := range s {
		if x == v {
			return append(s[:i], s[i+1:]...)
		}
	}
	return s
}
