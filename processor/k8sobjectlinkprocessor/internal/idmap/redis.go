package idmap

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/kubetrail/kubetrail/internal/redisconf"
	"github.com/kubetrail/kubetrail/internal/retry"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/loglimit"
)

// RedisStore is the ID map shared by collector replicas. Every batch becomes at most one
// explicit pipeline (one round trip): reads that the memory cache in front cannot answer, and
// first-writer-wins writes as `SET key value NX GET PXAT ms`, which returns the existing value
// when another replica wrote first. Expiries are absolute (PXAT), derived from the window, so
// every replica sets the same one.
//
// During an outage the store answers from memory (a replica then behaves like the memory
// backend), keeps the writes it made in a bounded list, and a background goroutine probes with
// backoff; when Redis answers again the list is replayed with the same first-writer-wins
// commands, and where another replica's record won, the cache adopts it from then on.
type RedisStore struct {
	client  redis.UniversalClient
	prefix  string
	timeout time.Duration
	cache   *MemoryStore
	now     func() time.Time
	tel     Telemetry
	logger  *zap.Logger

	maxBackoff time.Duration
	maxPending int

	roundTrips atomic.Int64 // for benchmarks and tests: pipelines sent

	// Noticing a Redis that lost its records (reset.go); off for Redis Cluster.
	epochCheck  bool
	epochKey    string
	token       string         // this replica's epoch token, written when it finds none
	recent      *recentRecords // the records used last, written back when Redis lost them
	sent        atomic.Uint64  // pipelines sent, in order, so that only the latest answer counts
	writingBack atomic.Bool
	background  sync.WaitGroup // the write-back after a loss

	logs *loglimit.Limiter // every run-time error is logged, at most once per reason per minute

	mu         sync.Mutex
	epoch      string // the epoch token seen last; "" before the first
	epochSeq   uint64 // the pipeline whose answer set epoch
	down       bool
	downReason string // the reason last reported through componentstatus
	pending    []Op
	onStatus   func(err error) // nil error: healthy again
	stopProbe  chan struct{}
	probeDone  chan struct{}
	probeAwake chan struct{}
}

// NewRedisStore returns the store of cfg's Redis, with cache in front of it (closed with it). It
// does not reach Redis yet: Start does.
func NewRedisStore(cfg RedisConfig, cache *MemoryStore, now func() time.Time, tel Telemetry, logger *zap.Logger) (*RedisStore, error) {
	client, err := cfg.NewClient("id_map.redis", "kubetrail-k8s_object_link")
	if err != nil {
		return nil, err
	}
	s := &RedisStore{
		client:     client,
		prefix:     cfg.KeyPrefix,
		timeout:    cfg.Timeout,
		cache:      cache,
		now:        now,
		tel:        tel,
		logger:     logger,
		maxBackoff: cfg.RetryMaxBackoff,
		maxPending: cfg.MaxPendingWrites,
		epochKey:   cfg.KeyPrefix + EpochKey,
		token:      newEpochToken(),
		recent:     newRecentRecords(recentRecordsSize),
		onStatus:   func(error) {},
		logs:       loglimit.New(time.Minute),
		stopProbe:  make(chan struct{}),
		probeDone:  make(chan struct{}),
		probeAwake: make(chan struct{}, 1),
	}
	_, cluster := s.client.(*redis.ClusterClient)
	s.epochCheck = !cluster
	go s.probeLoop()
	return s, nil
}

// Start checks Redis once, at the processor's Start. A reply saying that the configuration is
// wrong (a wrong password, a user without the needed permissions, a database number the server
// does not have) fails Start with that reply: it will not fix itself, and running on would
// quietly give every replica its own memory and its own trace IDs. An unreachable server does
// not fail Start: the store begins in the outage state (memory, recoverable status, reconnection
// with backoff), as it would if Redis went away later.
func (s *RedisStore) Start() error {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	err := s.client.Ping(ctx).Err()
	cancel()
	if err == nil {
		return nil
	}
	if redisconf.IsConfigError(err) {
		s.tel.RedisError(ReasonAuth)
		return fmt.Errorf("id_map.redis: Redis refused the configured credentials or database: %w", err)
	}
	s.markDown(err)
	return nil
}

// errorReason classifies a failed round trip or ping.
func errorReason(err error) string {
	switch {
	case redisconf.IsConfigError(err):
		return ReasonAuth
	case errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout
	default:
		return ReasonUnavailable
	}
}

// runError counts a run-time error by reason and logs it, at most once per reason per minute
// (with the number of errors of that reason not logged since).
func (s *RedisStore) runError(reason, msg string, err error, fields ...zap.Field) {
	s.tel.RedisError(reason)
	if suppressed, ok := s.logs.Allow(reason, s.now()); ok {
		s.logger.Warn(msg, append(fields, zap.String("reason", reason), zap.Int("similar_errors_not_logged", suppressed), zap.Error(err))...)
	}
}

// SetStatusReporter sets what is told when Redis goes away (the error) and comes back (nil):
// the processor reports it through componentstatus. It is called before Start, when the host
// is known.
func (s *RedisStore) SetStatusReporter(f func(error)) {
	s.mu.Lock()
	s.onStatus = f
	s.mu.Unlock()
}

// Do implements Store.
func (s *RedisStore) Do(ctx context.Context, ops []Op) error {
	now := s.now()
	// The cache answers what it can: assignments never change once written, so a cached one is
	// final; a cached dedup mark is a real duplicate; relations and the name index are refreshed
	// by writes, which still go to Redis.
	remote := make([]int, 0, len(ops))
	for i := range ops {
		op := &ops[i]
		switch op.Kind {
		case OpGet, OpSetIfAbsent:
			if op.Kind == OpGet && isNameKey(op.Key) {
				// Another replica may have seen the name recreated under a new UID; name look-ups
				// are rare (spans without a UID), so they always ask Redis.
				break
			}
			if v, exp, ok := s.cache.peek(op.Key); ok {
				op.Found, op.Value = true, v
				s.recent.add(op.Key, v, exp)
				continue
			}
		case OpSet:
			// A refresh is only worth a write once half of the record's life is gone; a write
			// that shortens it (a deleted object's relation) always goes.
			if v, exp, ok := s.cache.peek(op.Key); ok && v == op.Value && exp.Sub(now) > op.ExpireAt.Sub(now)/2 && !exp.After(op.ExpireAt) {
				op.Found = true
				s.recent.add(op.Key, v, exp)
				continue
			}
		}
		remote = append(remote, i)
	}
	if len(remote) == 0 {
		return nil
	}
	s.mu.Lock()
	down := s.down
	s.mu.Unlock()
	if !down {
		lost, err := s.roundTrip(ctx, ops, remote)
		if err == nil {
			if lost {
				s.noticeLoss(ctx)
			}
			return nil
		}
		s.markDown(err)
	}
	s.fromMemory(ops, remote)
	return nil
}

// Local implements Store: the cache answers, Redis is not asked.
func (s *RedisStore) Local(ops []Op) bool {
	for i := range ops {
		if ops[i].Kind != OpGet || isNameKey(ops[i].Key) {
			continue
		}
		var exp time.Time
		ops[i].Value, exp, ops[i].Found = s.cache.peek(ops[i].Key)
		if ops[i].Found {
			s.recent.add(ops[i].Key, ops[i].Value, exp)
		}
	}
	return false
}

// roundTrip sends the ops at the given indexes as one pipeline and writes the answers back. The
// pipeline also carries the epoch check; lost reports that Redis lost its records since this
// replica last looked.
func (s *RedisStore) roundTrip(ctx context.Context, ops []Op, idx []int) (lost bool, err error) {
	// The caller's cancellation (a webhook request the apiserver gave up on) says nothing about
	// Redis; only our own timeout bounds the call, so that only Redis's failure marks it down.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer cancel()
	pipe := s.client.Pipeline()
	var epoch *redis.StringCmd
	if s.epochCheck {
		epoch = pipe.Get(ctx, s.epochKey)
	}
	seq := s.sent.Add(1)
	cmds := make([]redis.Cmder, len(idx), len(idx)+1)
	for j, i := range idx {
		op := &ops[i]
		key := s.prefix + op.Key
		switch op.Kind {
		case OpGet:
			cmds[j] = pipe.Get(ctx, key)
		case OpSetIfAbsent:
			cmds[j] = pipe.Do(ctx, "SET", key, op.Value, "NX", "GET", "PXAT", pxat(op.ExpireAt, time.Now()))
		case OpSet:
			cmds[j] = pipe.Do(ctx, "SET", key, op.Value, "PXAT", pxat(op.ExpireAt, time.Now()))
		case OpDelete:
			cmds[j] = pipe.Del(ctx, key)
		case OpIncr:
			delta, _ := strconv.ParseInt(op.Value, 10, 64)
			cmds[j] = pipe.IncrBy(ctx, key, delta)
			pipe.PExpireAt(ctx, key, time.UnixMilli(pxat(op.ExpireAt, time.Now())))
		}
	}
	start := time.Now()
	_, err = pipe.Exec(ctx)
	s.tel.RedisRoundTrip(ctx, time.Since(start))
	s.roundTrips.Add(1)
	// Exec reports only the first failed command; an outage is any command failing for another
	// reason than a missing key or a record of the wrong type. Other reply errors (OOM, READONLY,
	// LOADING, NOPERM, CLUSTERDOWN, a syntax error from a Redis < 7) concern the server: taken
	// per record, every SET NX would "win" and every batch emit its object spans again.
	// When the round trip itself fails (no connection: a dial refused, a password refused on
	// reconnection), Exec returns that error and the commands carry none: every SET NX would
	// seem to have won. So Exec's own error counts first.
	if err != nil && !errors.Is(err, redis.Nil) && !isRecordError(err) {
		return false, err
	}
	if err != nil {
		all := cmds
		if epoch != nil {
			all = append(all, epoch)
		}
		for _, c := range all {
			if cerr := c.Err(); cerr != nil && !errors.Is(cerr, redis.Nil) && !isRecordError(cerr) {
				return false, cerr
			}
		}
	}
	if epoch != nil {
		var missing bool
		if lost, missing = s.epochReply(epoch, seq); missing {
			s.writeEpoch(ctx)
		}
	}
	for j, i := range idx {
		op := &ops[i]
		cerr := cmds[j].Err()
		if cerr != nil && !errors.Is(cerr, redis.Nil) {
			// A reply error (a key of the wrong type under our prefix) concerns one record: treat
			// it as absent and keep the batch going.
			s.runError(ReasonReply, "Redis rejected a record operation; the record is taken as absent", cerr, zap.String("key", s.prefix+op.Key))
			continue
		}
		switch op.Kind {
		case OpGet:
			if v, err := cmds[j].(*redis.StringCmd).Result(); err == nil {
				op.Found, op.Value = true, v
				// Only a read that says how long its record lives is cached (assignments);
				// a zero expiry would store the record already expired.
				if !op.ExpireAt.IsZero() {
					s.cacheSet(v, op)
				}
			}
		case OpSetIfAbsent:
			// SET … NX GET answers nil when it wrote, and the old value when it did not.
			if v, err := cmds[j].(*redis.Cmd).Text(); err == nil {
				op.Found, op.Value = true, v
			}
			s.cacheSet(op.Value, op)
		case OpSet:
			s.cacheSet(op.Value, op)
		case OpDelete:
			_ = s.cache.Do(ctx, []Op{{Kind: OpDelete, Key: op.Key}})
		case OpIncr:
			if v, err := cmds[j].(*redis.IntCmd).Result(); err == nil {
				op.Found, op.Value = v != 0, strconv.FormatInt(v, 10)
			}
		}
	}
	return lost, nil
}

func (s *RedisStore) cacheSet(v string, op *Op) {
	_ = s.cache.Do(context.Background(), []Op{{Kind: OpSet, Key: op.Key, Value: v, ExpireAt: op.ExpireAt}})
	s.recent.add(op.Key, v, op.ExpireAt)
}

func isNameKey(key string) bool { return len(key) > 2 && key[:2] == "n:" }

// isRecordError reports a reply error that concerns one key: a foreign record of another type
// under our prefix.
func isRecordError(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "WRONGTYPE")
}

// pxat is the absolute expiry in Unix milliseconds, never in the past of Redis's own (wall)
// clock: a PXAT that has already passed deletes the key at once, which would lose a first write.
func pxat(t, now time.Time) int64 {
	if !t.After(now) {
		t = now.Add(time.Second)
	}
	return t.UnixMilli()
}

// fromMemory answers the remote part of a batch from the memory cache while Redis is away and
// remembers the writes for reconciliation.
func (s *RedisStore) fromMemory(ops []Op, idx []int) {
	local := make([]Op, 0, len(idx))
	for _, i := range idx {
		local = append(local, ops[i])
	}
	_ = s.cache.Do(context.Background(), local)
	var writes []Op
	for j, i := range idx {
		sent := ops[i] // an increment is replayed as the amount added, not the local total
		ops[i].Found, ops[i].Value = local[j].Found, local[j].Value
		if ops[i].Kind == OpGet || (ops[i].Kind == OpSetIfAbsent && local[j].Found) {
			continue
		}
		if ops[i].Kind == OpIncr {
			writes = append(writes, sent)
			continue
		}
		writes = append(writes, ops[i])
	}
	s.addPending(writes)
}

var errPendingFull = errors.New("pending writes full")

// addPending keeps writes for the replay after an outage, up to max_pending_writes; the rest are
// counted and logged.
func (s *RedisStore) addPending(ops []Op) {
	s.mu.Lock()
	room := max(0, min(len(ops), s.maxPending-len(s.pending)))
	s.pending = append(s.pending, ops[:room]...)
	s.mu.Unlock()
	for range ops[room:] {
		s.runError(ReasonPendingFull, "Redis outage outlasts id_map.redis.max_pending_writes; this record will not be replayed to Redis", errPendingFull)
	}
}

// markDown records a failed round trip or ping: counted and logged (rate-limited) every time,
// and reported through componentstatus as a recoverable error when Redis goes down or the
// reason changes (a network outage that turns into a refused password after a restart).
func (s *RedisStore) markDown(err error) {
	reason := errorReason(err)
	s.runError(reason, "Redis ID map unavailable; continuing from memory until it returns", err)
	s.mu.Lock()
	wasDown := s.down
	changed := s.downReason != reason
	s.down, s.downReason = true, reason
	report := s.onStatus
	s.mu.Unlock()
	if !wasDown || changed {
		report(fmt.Errorf("redis id map unavailable (%s): %w", reason, err))
	}
	if !wasDown {
		select {
		case s.probeAwake <- struct{}{}:
		default:
		}
	}
}

// probeLoop waits for an outage, then pings with exponential backoff and reconciles.
func (s *RedisStore) probeLoop() {
	defer close(s.probeDone)
	const minBackoff = 100 * time.Millisecond
	for {
		select {
		case <-s.stopProbe:
			return
		case <-s.probeAwake:
		}
		backoff := retry.Exponential(minBackoff, s.maxBackoff)
		for {
			t := time.NewTimer(backoff.Step())
			select {
			case <-s.stopProbe:
				t.Stop()
				return
			case <-t.C:
			}
			if s.tryRecover() {
				break
			}
		}
	}
}

// tryRecover pings Redis and replays the pending writes; it reports whether Redis is back.
func (s *RedisStore) tryRecover() bool {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	err := s.client.Ping(ctx).Err()
	cancel()
	if err != nil {
		s.markDown(err)
		return false
	}
	for {
		s.mu.Lock()
		batch := s.pending
		s.pending = nil
		if len(batch) == 0 {
			s.down, s.downReason = false, ""
			report := s.onStatus
			s.mu.Unlock()
			s.logger.Info("Redis ID map available again; pending records reconciled")
			report(nil)
			return true
		}
		s.mu.Unlock()
		lost, err := s.reconcile(batch)
		if lost {
			s.noticeLoss(context.Background())
		}
		if err != nil {
			s.mu.Lock()
			s.pending = append(batch, s.pending...)
			s.mu.Unlock()
			s.markDown(err)
			return false
		}
	}
}

// reconcile replays writes made in memory during an outage (or remembered records after Redis
// lost them). A first-writer-wins record that another replica wrote meanwhile stays theirs in
// Redis, and the cache adopts it so later spans join the shared trace. lost reports an epoch
// change seen on the way.
func (s *RedisStore) reconcile(batch []Op) (lost bool, err error) {
	const chunk = 1000
	for len(batch) > 0 {
		n := min(chunk, len(batch))
		part := batch[:n]
		original := make([]string, n)
		idx := make([]int, n)
		for i := range part {
			original[i] = part[i].Value
			part[i].Found = false
			idx[i] = i
		}
		l, err := s.roundTrip(context.Background(), part, idx)
		if err != nil {
			return lost, err
		}
		lost = lost || l
		for i := range part {
			result := ResultWritten
			if part[i].Kind == OpSetIfAbsent && part[i].Found && part[i].Value != original[i] {
				result = ResultConflict
			}
			s.tel.RedisReconciled(result)
		}
		batch = batch[n:]
	}
	return lost, nil
}

// Close implements Store.
func (s *RedisStore) Close(ctx context.Context) error {
	close(s.stopProbe)
	<-s.probeDone
	s.background.Wait()
	return errors.Join(s.client.Close(), s.cache.Close(ctx))
}

// What tests and benchmarks read of the store's state.

// RoundTrips is the number of pipelines sent so far.
func (s *RedisStore) RoundTrips() int64 { return s.roundTrips.Load() }

// Client is the Redis client the store built from its configuration.
func (s *RedisStore) Client() redis.UniversalClient { return s.client }

// Down reports whether the store takes Redis as unavailable (answering from memory).
func (s *RedisStore) Down() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.down
}

// Reconciled reports whether Redis is available and no write made in memory waits for it.
func (s *RedisStore) Reconciled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.down && len(s.pending) == 0
}

// WritingBack reports whether the write-back after a loss is under way.
func (s *RedisStore) WritingBack() bool { return s.writingBack.Load() }

// Cached reports whether the memory cache in front holds a live record of key.
func (s *RedisStore) Cached(key string) bool {
	_, _, ok := s.cache.peek(key)
	return ok
}
