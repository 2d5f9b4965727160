package auditconv

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/kubetrail/kubetrail/internal/redisconf"
)

// Results of the shared diff base, as counted on otelcol_k8s_audit_diff_base_records.
const (
	// ReasonSharedAdopted: a body read from Redis, newer than this replica's, became the base.
	ReasonSharedAdopted = "adopted"
	// ReasonSharedWritten: a body this replica left became the shared one.
	ReasonSharedWritten = "written"
	// ReasonSharedSuperseded: Redis already held a newer body of the object than this one.
	ReasonSharedSuperseded = "superseded"
	// ReasonSharedTooLarge: a body larger compressed than max_record_bytes was not shared, or
	// a record over max_record_bytes in Redis was not read (getRecords answers its length)
	// and the next write of the object replaces it.
	ReasonSharedTooLarge = "too_large"
	// ReasonSharedUnreadable: a record in Redis that is not one this component wrote: not of
	// its format, or of a resourceVersion implausibly far (maxRVLead) ahead of the write that
	// read it. It is not adopted, and the next write of the object replaces it.
	ReasonSharedUnreadable = "unreadable"
	// ReasonSharedFailed: a record not read or not written because Redis did not answer.
	ReasonSharedFailed = "failed"
)

// sharedKeyPart follows the key prefix in the key of an object's shared body; the object's name
// key (cluster, group, resource, namespace, name) completes it.
const sharedKeyPart = "diffbase:"

// maxRVLead is how far a shared record's resourceVersion may be ahead of the write that reads it
// (or of the record that replaces it) and still be taken for a newer write of the object. A
// resourceVersion is the cluster's etcd revision, one step per write of any object: a record
// ahead by more than 2^24 would have been written some 16.7 million writes later, half an hour
// at over 9,000 writes a second, longer than a record lives (the window). Such a record is
// forged or broken: adopted, it would make every later write of the object out_of_order, on
// every replica, even after the key expired.
const maxRVLead = 1 << 24

// setIfNewer writes each record (KEYS[i], resourceVersion ARGV[2i+1], value ARGV[2i+2]; expiry
// ARGV[1] ms, max_record_bytes ARGV[2]) unless Redis holds one of a newer resourceVersion, and
// answers 1 (written) or 0 per key. Records start with "<resourceVersion>\n"; versions made only
// of digits (every etcd-backed apiserver's) compare as numbers, other versions always replace.
// It reads only the record's first 64 bytes and its length: a record over max_record_bytes, or
// more than maxRVLead ahead of the new one, is replaced whatever its version (a 100 MB record
// under a key costs Redis no copy). One call carries a batch's records on a server that holds
// every key; a Redis Cluster gets one call per key. Lua's numbers are doubles: exact for the
// revisions of any real etcd (below 2^53), and a forged 30-digit version still compares as far
// ahead.
var setIfNewer = redis.NewScript(`
local out = {}
local maxBytes = tonumber(ARGV[2])
for i, key in ipairs(KEYS) do
  local new, val = ARGV[2*i+1], ARGV[2*i+2]
  local head = redis.pcall('GETRANGE', key, 0, 63)
  if type(head) ~= 'string' then head = '' end -- a value of another type: replaced
  local rv = string.match(head, '^([^\n]*)\n')
  local newer = rv and string.match(rv, '^%d+$') and string.match(new, '^%d+$') and (#rv > #new or (#rv == #new and rv >= new))
  if newer and (redis.call('STRLEN', key) > maxBytes or tonumber(rv) - tonumber(new) > ` + strconv.Itoa(maxRVLead) + `) then
    newer = false
  end
  if newer then
    out[i] = 0
  else
    redis.call('SET', key, val, 'PX', ARGV[1])
    out[i] = 1
  end
end
return out
`)

// sharedBases is the shared diff base: one pipelined read before a batch is converted (the
// bodies of the objects it updates or patches) and one pipelined write after (the bodies it
// left). A failed round trip costs diffs, never spans: the batch is converted against this
// replica's own cache, which then says base_not_seen where it lacks a base, as without sharing.
type sharedBases struct {
	cfg     SharedDiffBase
	client  redis.UniversalClient
	cluster bool // a Redis Cluster: a batch's keys live on several nodes
	ttl     time.Duration
	records metric.Int64Counter
	logger  *zap.Logger
	enc     *zstd.Encoder
	dec     *zstd.Decoder

	// After a failed round trip Redis is not asked again for a pause that doubles from
	// minPause to maxPause while it keeps failing: a Redis that does not answer then costs a
	// batch nothing, rather than its two timeouts. The records of the batches in between count
	// as failed.
	now      func() time.Time
	mu       sync.Mutex
	askAfter time.Time
	pause    time.Duration
}

const (
	minPause = time.Second
	maxPause = 30 * time.Second
)

// asking reports whether Redis is to be asked now.
func (s *sharedBases) asking() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.now().Before(s.askAfter)
}

// answered records how a round trip went.
func (s *sharedBases) answered(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		s.pause = 0
		return
	}
	s.pause = min(max(2*s.pause, minPause), maxPause)
	s.askAfter = s.now().Add(s.pause)
}

// zstdCodecs are the encoder and decoder every shared diff base uses: EncodeAll and DecodeAll
// are safe for concurrent use, and each holds some hundreds of KB of tables.
var zstdCodecs = sync.OnceValues(func() (*zstd.Encoder, *zstd.Decoder) {
	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	// A record is at most max_record_bytes compressed; what it decodes to is bounded too.
	dec, _ := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(16<<20))
	return enc, dec
})

func newSharedBases(cfg SharedDiffBase, ttl time.Duration, records metric.Int64Counter, logger *zap.Logger) *sharedBases {
	enc, dec := zstdCodecs()
	return &sharedBases{cfg: cfg, ttl: ttl, records: records, logger: logger, enc: enc, dec: dec, now: time.Now}
}

func (s *sharedBases) count(result string, n int) {
	if s.records != nil && n > 0 {
		s.records.Add(context.Background(), int64(n), withResult(result))
	}
}

// withResult is the measurement option of the diff-base counter's attribute, which the
// components' metadata.yaml name `result` (diff_base_result's name_override): what became of a
// record, not why something failed.
func withResult(result string) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(attribute.String("result", result)))
}

// start connects. A reply saying that the configuration is wrong (a wrong password, a missing
// permission) fails the component's start: it would not fix itself. An unreachable server does
// not: batches are converted against this replica's cache until it answers.
func (s *sharedBases) start(ctx context.Context) error {
	client, err := s.cfg.Redis.NewClient("shared_diff_base.redis", "kubetrail-k8s_audit")
	if err != nil {
		return err
	}
	s.client = client
	_, s.cluster = client.(*redis.ClusterClient)
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Redis.Timeout)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		if redisconf.IsConfigError(err) {
			_ = client.Close()
			s.client = nil
			return fmt.Errorf("shared_diff_base.redis: %w", err)
		}
		s.logger.Warn("Redis of the shared diff base does not answer; diffs use this replica's own bodies until it does", zap.Error(err))
	}
	return nil
}

func (s *sharedBases) close() error {
	if s.client == nil {
		return nil
	}
	err := s.client.Close()
	s.client = nil
	return err
}

func (s *sharedBases) key(name string) string { return s.cfg.Redis.KeyPrefix + sharedKeyPart + name }

// sharedBatch is what one batch read from the shared base and which objects' bodies it left.
type sharedBatch struct {
	records map[string][]byte // by name key: the record read, taken by the object's first write
	touched map[string]bool   // name keys whose cached body the batch set
	order   []string
}

func (b *sharedBatch) touch(key string) {
	if b.touched == nil {
		b.touched = map[string]bool{}
	}
	if !b.touched[key] {
		b.touched[key] = true
		b.order = append(b.order, key)
	}
}

// read fetches, in one round trip, the shared bodies of the objects the batch updates or patches:
// the writes diffed against a previous body, a refused one's against the body it would have
// changed (attempt).
func (s *sharedBases) read(c *Converter, cluster string, events []Event) *sharedBatch {
	b := &sharedBatch{}
	if s.client == nil {
		return b
	}
	var keys []string
	seen := map[string]bool{}
	var buf [128]byte
	for i := range events {
		ev := &events[i]
		ref := ev.ObjectRef
		if ev.Invalid != "" || ref == nil || ref.Name == "" || (ev.Verb != "update" && ev.Verb != "patch") ||
			(ev.ResponseStatus != nil && ev.ResponseStatus.Code >= 400 && !hasBody(ev.RequestObject)) || c.filterReason(ev) != "" {
			continue
		}
		obj := c.objectOf(cluster, ref)
		(*cuts)(nil).boundIdentity(&obj) // the key remember makes of the span's identity
		k := string(obj.AppendNameKey(buf[:0]))
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return b
	}
	if !s.asking() {
		s.count(ReasonSharedFailed, len(keys))
		return b
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Redis.Timeout)
	defer cancel()
	values, err := s.getAll(ctx, keys)
	s.answered(err)
	if err != nil {
		s.count(ReasonSharedFailed, len(keys))
		c.logger.Warn("Reading the shared diff base failed; this batch is diffed against this replica's own bodies, and Redis is asked again after a pause", zap.Error(err))
		return b
	}
	b.records = make(map[string][]byte, len(keys))
	for i, v := range values {
		if v != nil {
			b.records[keys[i]] = v
		}
	}
	return b
}

// adopt makes the shared body of the object the entry's, when it is newer than the entry's and
// belongs to the same object, before the object's first write of the batch is diffed. newRV is
// the version that write left: a record of that version is this very write, received by
// another replica too, and is not a base. A refused write (attempt) left no version and takes
// the record when it is newer than the entry's. Callers hold the cache's lock.
func (s *sharedBases) adopt(c *objectCache, b *sharedBatch, e *cacheEntry, key, uid, newRV string, refused bool) {
	rec, ok := b.records[key]
	if !ok {
		return
	}
	delete(b.records, key)
	if newRV == "" && !refused {
		// A write whose response tells no version has nothing to judge the record by, and
		// is diffed against nothing (remember stops before the diff).
		return
	}
	rv, recUID, z, ok := parseSharedRecord(rec)
	if !ok || (newRV != "" && farAhead(rv, newRV)) {
		s.count(ReasonSharedUnreadable, 1)
		return
	}
	if uid == "" {
		uid = e.uid
	}
	switch {
	case rv == newRV || rv == e.rv:
		return
	case e.hasBody() && !rvOlder(e.rv, rv):
		return // this replica's body is as new, or the versions do not compare
	case uid != "" && recUID != "" && uid != recUID:
		return // another object that held the name
	}
	// Decoded into memory of its own: a record that fails part way must not have overwritten
	// the entry's body.
	body, err := s.dec.DecodeAll(z, nil)
	if err != nil {
		s.count(ReasonSharedUnreadable, 1)
		return
	}
	if e.uid == "" {
		e.uid = recUID
	}
	e.lastDiff, e.lastSkipped = nil, false
	c.setBody(e, body, nil)
	e.rv = rv
	s.count(ReasonSharedAdopted, 1)
}

// write shares, in one round trip, the bodies the batch left, each unless Redis holds a newer
// one. Redacted values leave as the constant mask: the tags that let one replica's diffs see a
// secret change are keyed per process (see tagger), and a tag compares equal to the mask.
func (s *sharedBases) write(c *objectCache, b *sharedBatch) {
	if s.client == nil || len(b.order) == 0 {
		return
	}
	type rec struct {
		key, rv string
		val     []byte
	}
	// The header and a copy of each body are taken under the cache's lock (a later write may
	// reuse a body's storage); the compression, which costs more, is done after it.
	recs := make([]rec, 0, len(b.order))
	bodies := make([][]byte, 0, len(b.order))
	c.mu.Lock()
	for _, k := range b.order {
		e := c.entries[k]
		if e == nil || !e.hasBody() || e.rv == "" {
			continue
		}
		val := make([]byte, 0, len(e.rv)+len(e.uid)+2+len(e.body)/2)
		val = append(append(append(append(val, e.rv...), '\n'), e.uid...), '\n')
		recs = append(recs, rec{key: k, rv: e.rv, val: val})
		bodies = append(bodies, bytes.Clone(e.body))
	}
	c.mu.Unlock()
	kept := recs[:0]
	for i, r := range recs {
		body := bodies[i]
		if bytes.Contains(body, []byte(tagPrefix)) {
			body = []byte(untag(string(body)))
		}
		if r.val = s.enc.EncodeAll(body, r.val); len(r.val) > s.cfg.MaxRecordBytes {
			s.count(ReasonSharedTooLarge, 1)
			continue
		}
		kept = append(kept, r)
	}
	recs = kept
	if len(recs) == 0 {
		return
	}
	if !s.asking() {
		s.count(ReasonSharedFailed, len(recs))
		return
	}
	keys := make([]string, len(recs))
	args := make([]any, 2, 2+2*len(recs))
	args[0], args[1] = s.ttl.Milliseconds(), s.cfg.MaxRecordBytes
	for i, r := range recs {
		keys[i] = s.key(r.key)
		args = append(args, r.rv, r.val)
	}
	written, err := s.setAll(keys, args)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Redis.Timeout)
		err = setIfNewer.Load(ctx, s.client).Err()
		cancel()
		if err == nil {
			written, err = s.setAll(keys, args)
		}
	}
	s.answered(err)
	if err != nil {
		s.count(ReasonSharedFailed, len(recs))
		s.logger.Warn("Writing the shared diff base failed; other replicas diff these objects' next writes without them", zap.Error(err))
		return
	}
	s.count(ReasonSharedWritten, written)
	s.count(ReasonSharedSuperseded, len(recs)-written)
}

// getRecords answers, for each key (KEYS[i]), its record when it is at most max_record_bytes
// (ARGV[1]) long, else a number: 0 for no record, -1 for a value of another type, and the
// record's length when it is longer. It reads the length first, so a record of any size under a
// key costs one STRLEN, never a copy: MGET would fetch it whole on every batch. One call reads a
// batch's records on a server that holds every key; a Redis Cluster gets one call per key.
var getRecords = redis.NewScript(`
local out = {}
local maxBytes = tonumber(ARGV[1])
for i, key in ipairs(KEYS) do
  local n = redis.pcall('STRLEN', key)
  if type(n) ~= 'number' then
    out[i] = -1
  elseif n == 0 or n > maxBytes then
    out[i] = n
  else
    out[i] = redis.call('GET', key)
  end
end
return out
`)

// getAll reads the records of keys (their name keys) in one round trip (getRecords), nil where
// there is none or it is not read: a record over max_record_bytes is counted too_large, a value
// of another type unreadable, and the object's next write replaces either (setIfNewer).
func (s *sharedBases) getAll(ctx context.Context, names []string) ([][]byte, error) {
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = s.key(n)
	}
	replies, err := s.readAll(ctx, keys)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		if err = getRecords.Load(ctx, s.client).Err(); err == nil {
			replies, err = s.readAll(ctx, keys)
		}
	}
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(names))
	tooLarge, unreadable := 0, 0
	for i, r := range replies {
		switch r := r.(type) {
		case string:
			out[i] = []byte(r)
		case int64:
			if r < 0 {
				unreadable++
			} else if r > 0 {
				tooLarge++
			}
		}
	}
	s.count(ReasonSharedTooLarge, tooLarge)
	s.count(ReasonSharedUnreadable, unreadable)
	return out, nil
}

// readAll runs getRecords over keys: one call, or one per key in one pipeline on a Redis
// Cluster, whose keys live on several nodes.
func (s *sharedBases) readAll(ctx context.Context, keys []string) ([]any, error) {
	limit := s.cfg.MaxRecordBytes
	if !s.cluster {
		replies, err := getRecords.EvalSha(ctx, s.client, keys, limit).Slice()
		if err == nil && len(replies) != len(keys) {
			err = fmt.Errorf("shared diff base: %d answers for %d keys", len(replies), len(keys))
		}
		return replies, err
	}
	cmds := make([]*redis.Cmd, len(keys))
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = getRecords.EvalSha(ctx, p, []string{k}, limit)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	replies := make([]any, len(keys))
	for i, cmd := range cmds {
		if r, err := cmd.Slice(); err == nil && len(r) == 1 {
			replies[i] = r[0]
		}
	}
	return replies, nil
}

// setAll runs setIfNewer over keys with args (the expiry and max_record_bytes, then a
// resourceVersion and a value per key) and counts the records written: one call, or one per key in one pipeline on a Redis
// Cluster.
func (s *sharedBases) setAll(keys []string, args []any) (written int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Redis.Timeout)
	defer cancel()
	if !s.cluster {
		res, err := setIfNewer.EvalSha(ctx, s.client, keys, args...).Int64Slice()
		for _, n := range res {
			written += int(n)
		}
		return written, err
	}
	cmds := make([]*redis.Cmd, len(keys))
	_, err = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = setIfNewer.EvalSha(ctx, p, []string{k}, args[0], args[1], args[2+2*i], args[3+2*i])
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for _, cmd := range cmds {
		if res, err := cmd.Int64Slice(); err == nil && len(res) == 1 {
			written += int(res[0])
		}
	}
	return written, nil
}

// farAhead reports whether resourceVersion rv is more than maxRVLead ahead of of: a record no
// write of the object can have left by the time of.
func farAhead(rv, of string) bool {
	x, ok1 := rvNumber(rv)
	y, ok2 := rvNumber(of)
	if !ok1 && len(rv) > 20 && strings.Trim(rv, "0123456789") == "" {
		return ok2 // digits past uint64: as far ahead as can be
	}
	return ok1 && ok2 && x > y && x-y > maxRVLead
}

// parseSharedRecord splits "<resourceVersion>\n<uid>\n<zstd body>".
func parseSharedRecord(rec []byte) (rv, uid string, body []byte, ok bool) {
	i := bytes.IndexByte(rec, '\n')
	if i <= 0 {
		return "", "", nil, false
	}
	j := bytes.IndexByte(rec[i+1:], '\n')
	if j < 0 {
		return "", "", nil, false
	}
	return string(rec[:i]), string(rec[i+1 : i+1+j]), rec[i+2+j:], true
}

// convertShared is convert with the shared diff base around it.
func (c *Converter) convertShared(cluster string, events []Event, st *Stats) ptrace.Traces {
	b := c.shared.read(c, cluster, events)
	t := c.convertBatch(cluster, events, st, b)
	c.shared.write(c.cache, b)
	return t
}
