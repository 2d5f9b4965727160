package k8sobjectlinkprocessor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

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
//   - Every pipeline carries `SET <prefix>epoch <token> NX GET`. The first replica to reach an
//     empty Redis writes its own random token; a replica whose last-seen token is no longer
//     there (the reply is nil, or another token) knows that Redis lost its records. The check
//     rides on round trips that happen anyway: no extra round trip, one small command.
//   - Each replica remembers the records it used last (recentRecords, a fixed ring). When it
//     notices the loss it writes them back with the same first-writer-wins command, at once, so
//     the objects that are active right now keep their single window span.
//
// What remains is documented in the README (Behaviour, "Redis restarted empty"): a replica
// that did not hold a record and writes it before a replica that held it has noticed.

// epochKey is the marker record, under the configured prefix. It has no expiry, so an LRU
// policy on volatile keys (the recommended volatile-lru) never evicts it.
const epochKey = "epoch"

// recentRecordsSize is how many records a replica can write back after a loss: the ring keeps
// the last ones the replica read, won or refreshed (assignments, relations, the name index; not
// duplicate marks or join records, which are per span). 16,384 entries hold a few MiB of keys.
const recentRecordsSize = 16384

func newEpochToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// recentRecords is a ring of the records last used by this replica.
type recentRecords struct {
	mu   sync.Mutex
	ops  []Op // fixed length; Kind is always OpSetIfAbsent
	next int
	n    int
}

func newRecentRecords(size int) *recentRecords {
	return &recentRecords{ops: make([]Op, size)}
}

// remembered reports whether a record of this key is worth writing back after a loss.
func remembered(key string) bool {
	return len(key) > 2 && key[1] == ':' && (key[0] == 'a' || key[0] == 'r' || key[0] == 'n')
}

func (r *recentRecords) add(key, value string, expireAt time.Time) {
	if !remembered(key) || expireAt.IsZero() {
		return
	}
	r.mu.Lock()
	r.ops[r.next] = Op{Kind: OpSetIfAbsent, Key: key, Value: value, ExpireAt: expireAt}
	r.next = (r.next + 1) % len(r.ops)
	r.n = min(r.n+1, len(r.ops))
	r.mu.Unlock()
}

// live returns the distinct records not yet expired, newest first.
func (r *recentRecords) live(now time.Time) []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Op, 0, r.n)
	seen := make(map[string]struct{}, r.n)
	for i := 1; i <= r.n; i++ {
		op := r.ops[(r.next-i+len(r.ops))%len(r.ops)]
		if _, dup := seen[op.Key]; dup || !op.ExpireAt.After(now) {
			continue
		}
		seen[op.Key] = struct{}{}
		out = append(out, op)
	}
	return out
}

// checkEpoch reads the answer to the pipeline's epoch command (nil when this replica wrote its
// token, the stored token otherwise) and reports whether Redis lost its records since this
// replica's last round trip.
func (s *redisStore) checkEpoch(reply string, wrote bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	current := reply
	if wrote {
		current = s.token
	}
	lost := s.epoch != "" && current != s.epoch
	s.epoch = current
	return lost
}

// afterLoss writes the remembered records back (first writer wins) once Redis is known to have
// lost them. It runs after the round trip that noticed, outside any lock.
func (s *redisStore) afterLoss(ctx context.Context) {
	s.tel.K8sObjectLinkRedisResets.Add(ctx, 1)
	ops := s.recent.live(s.now())
	s.logger.Warn("Redis lost the ID map's records (restarted without persistence, flushed, or failed over to a replica without them); writing back the records this replica used last",
		zap.Int("records", len(ops)))
	// A loss noticed again while writing back needs nothing more: these records are going in.
	if _, err := s.reconcile(ops); err != nil {
		s.markDown(err)
		// The write-back is retried with the outage's pending writes.
		s.mu.Lock()
		for _, op := range ops {
			if len(s.pending) >= s.maxPending {
				break
			}
			s.pending = append(s.pending, op)
		}
		s.mu.Unlock()
	}
}
