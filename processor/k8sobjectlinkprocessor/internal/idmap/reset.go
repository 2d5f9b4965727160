package idmap

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// A Redis that restarts without persistence (the shipped `--save '' --appendonly no`), a
// FLUSHDB, or a failover to a replica that never received the records comes back empty, and
// the client reconnects without an error: nothing tells the replicas that their first-writer-wins
// records are gone. A replica that never held an object's assignment would then win it again
// and emit that object's window span a second time.
//
// Two things narrow that down:
//
//   - Every pipeline carries `GET <prefix>epoch` (a read: it costs no memory and is never refused
//     for OOM). The first replica to find no epoch record writes its own random token with
//     `SET … NX GET` (one more round trip, at the first start and after a loss); a replica that
//     has seen a token before and now finds none, or another one, knows that Redis lost its
//     records. Only the reply of the latest pipeline sent counts, so that concurrent batches
//     answered out of order do not make a token seem to change back and forth.
//   - Each replica remembers the records it used last (recentRecords, a ring of distinct keys).
//     When it notices the loss it writes them back in the background with the same
//     first-writer-wins command, so the objects that are active keep their single window span.
//
// Redis Cluster is left out: its records are spread over masters, a marker on one master would
// say nothing of the others and would put that master on every batch's path.
//
// What remains is documented in the README (Behaviour, "Redis restarted empty").

// EpochKey is the marker record, under the configured prefix. It has no expiry, so an LRU
// policy on volatile keys (the recommended volatile-lru) never evicts it.
const EpochKey = "epoch"

// recentRecordsSize is how many distinct records a replica can write back after a loss: the
// ring keeps the last ones the replica read, won or refreshed (assignments, relations, the name
// index; not duplicate marks or join records, which are per span).
const recentRecordsSize = 16384

func newEpochToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// recentRecords is a ring of the distinct records last used by this replica.
type recentRecords struct {
	mu    sync.Mutex
	ops   []Op // fixed length; Kind is always OpSetIfAbsent, Key "" for a free slot
	index map[string]int
	next  int
}

func newRecentRecords(size int) *recentRecords {
	return &recentRecords{ops: make([]Op, size), index: make(map[string]int, size)}
}

// remembered reports whether a record of this key is worth writing back after a loss.
func remembered(key string) bool {
	return len(key) > 2 && key[1] == ':' && (key[0] == 'a' || key[0] == 'r' || key[0] == 'n')
}

// add records a use of a record. A key already in the newer half of the ring is updated in
// place (most uses are of a few hot records, and moving them every time would cost a map write
// per use); one in the older half moves to the front, so a record in use never ages out.
func (r *recentRecords) add(key, value string, expireAt time.Time) {
	if !remembered(key) || expireAt.IsZero() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	size := len(r.ops)
	if i, ok := r.index[key]; ok {
		if age := (r.next - 1 - i + size) % size; age < size/2 { // 0: the newest slot
			r.ops[i].Value, r.ops[i].ExpireAt = value, expireAt
			return
		}
		r.ops[i] = Op{}
	}
	if old := r.ops[r.next].Key; old != "" {
		delete(r.index, old)
	}
	r.ops[r.next] = Op{Kind: OpSetIfAbsent, Key: key, Value: value, ExpireAt: expireAt}
	r.index[key] = r.next
	r.next = (r.next + 1) % size
}

// live returns the records not yet expired.
func (r *recentRecords) live(now time.Time) []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Op, 0, len(r.index))
	for _, op := range r.ops {
		if op.Key != "" && op.ExpireAt.After(now) {
			out = append(out, op)
		}
	}
	return out
}

// epochReply reads the answer to a pipeline's `GET epoch` (seq is the pipeline's send order)
// and reports whether Redis lost its records since this replica's last look, and whether the
// epoch record is missing (so that this replica should write one).
func (s *RedisStore) epochReply(cmd *redis.StringCmd, seq uint64) (lost, missing bool) {
	token, err := cmd.Result()
	switch {
	case errors.Is(err, redis.Nil):
		token = ""
	case err != nil:
		// A foreign record of another type under our name: losses go unnoticed until it is gone.
		s.runError(ReasonReply, "Redis epoch record unreadable; a Redis that lost its records will not be noticed", err, zap.String("key", s.epochKey))
		return false, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if seq < s.epochSeq {
		return false, false // a newer pipeline's answer has been applied already
	}
	s.epochSeq = seq
	lost = s.epoch != "" && token != s.epoch
	if token != "" {
		s.epoch = token
	}
	return lost, token == ""
}

// writeEpoch writes this replica's token when Redis has none (first writer wins) and adopts
// the token that stands.
func (s *RedisStore) writeEpoch(ctx context.Context) {
	v, err := s.client.Do(ctx, "SET", s.epochKey, s.token, "NX", "GET").Text()
	switch {
	case errors.Is(err, redis.Nil):
		v = s.token
	case err != nil:
		return // the next pipeline finds the record missing again and tries again
	}
	s.mu.Lock()
	s.epoch = v
	s.mu.Unlock()
}

// noticeLoss counts a loss and starts the write-back, one at a time.
func (s *RedisStore) noticeLoss(ctx context.Context) {
	s.tel.RedisReset(ctx)
	if !s.writingBack.CompareAndSwap(false, true) {
		return
	}
	s.background.Add(1)
	go func() {
		defer s.background.Done()
		defer s.writingBack.Store(false)
		s.writeBack()
	}()
}

// writeBack writes the remembered records back (first writer wins) once Redis is known to have
// lost them.
func (s *RedisStore) writeBack() {
	ops := s.recent.live(s.now())
	s.logger.Warn("Redis lost the ID map's records (restarted without persistence, flushed, or failed over to a replica without them); writing back the records this replica used last",
		zap.Int("records", len(ops)))
	// A loss noticed again while writing back needs nothing more: these records are going in.
	if _, err := s.reconcile(ops); err != nil {
		// What did not go in is replayed with the outage's pending writes.
		s.addPending(ops)
		s.markDown(err)
	}
}
