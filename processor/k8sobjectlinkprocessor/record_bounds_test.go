package k8sobjectlinkprocessor

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/idmap"
)

// What a span makes the processor write to the ID map is bounded, whatever the span says and
// whichever door it came through: each against the memory ID map and real Redis.

// idMapRecord is one record of the ID map as a test reads it back.
type idMapRecord struct {
	key    string // Redis only: the memory map keeps hashes
	value  string
	expire time.Time
}

// backends runs f against the memory ID map and against real Redis.
func backends(t *testing.T, f func(t *testing.T, cfg func() *Config)) {
	t.Run("memory", func(t *testing.T) { f(t, memoryConfig) })
	t.Run("redis", func(t *testing.T) {
		requireRedis(t)
		f(t, func() *Config { return redisConfig(t, redisAddr) })
	})
}

// records returns every record of h's ID map: Redis's keys under the processor's prefix with
// their values and expiries (the epoch marker aside), or the memory map's entries (duplicate marks counted as records
// without value).
func (h *harness) records() []idMapRecord {
	h.t.Helper()
	if h.p.redis != nil {
		ctx := context.Background()
		c := redis.NewClient(&redis.Options{Addr: redisAddr})
		defer c.Close()
		var out []idMapRecord
		iter := c.Scan(ctx, 0, h.p.cfg.IDMap.Redis.KeyPrefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			if k == h.p.cfg.IDMap.Redis.KeyPrefix+idmap.EpochKey {
				continue // the store's own marker of a Redis that lost its records
			}
			v, err := c.Get(ctx, k).Result()
			if err != nil {
				h.t.Fatalf("reading %q: %v", k, err)
			}
			ttl, err := c.PTTL(ctx, k).Result()
			if err != nil {
				h.t.Fatal(err)
			}
			out = append(out, idMapRecord{key: strings.TrimPrefix(k, h.p.cfg.IDMap.Redis.KeyPrefix), value: v, expire: time.Now().Add(ttl)})
		}
		return out
	}
	records, marks := h.p.store.(*idmap.MemoryStore).Records()
	var out []idMapRecord
	for _, r := range records {
		out = append(out, idMapRecord{value: r.Value, expire: r.Expire})
	}
	for range marks {
		out = append(out, idMapRecord{value: "(duplicate or graft mark)"})
	}
	return out
}

func TestStringsThatBecomeIDMapRecordsAreBounded(t *testing.T) {
	backends(t, func(t *testing.T, cfg func() *Config) {
		h := newHarness(t, cfg(), newFakeClock(t0))
		pod := podA1
		pod.Name = huge
		pod.Owner = model.Owner{APIVersion: huge, Kind: huge, Name: huge, UID: huge}
		h.consume(audit(pod, "big", t0.Add(time.Second)))
		recs := h.records()
		if len(recs) == 0 {
			t.Fatal("no records")
		}
		for _, r := range recs {
			// The largest: a relation of four bounded owner strings, a name key of a bounded name.
			if len(r.key) > 2<<10 || len(r.value) > 2<<10 {
				t.Fatalf("a record of %d key and %d value bytes", len(r.key), len(r.value))
			}
		}
	})
}

func TestRecordLivesAreBoundedRelativeToNow(t *testing.T) {
	backends(t, func(t *testing.T, cfg func() *Config) {
		now := time.Now()
		c := cfg()
		h := newHarness(t, c, newFakeClock(now))
		year2200 := time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
		h.consume(withContext(audit(withoutOwner(cron), "future", year2200), ciStep))
		limit := now.Add(contextRecordLife + time.Minute)
		recs := h.records()
		if len(recs) == 0 {
			t.Fatal("no records")
		}
		for _, r := range recs {
			if r.expire.After(limit) {
				t.Fatalf("a record (%q) lives until %s, past now + 7 days", r.key, r.expire)
			}
		}
	})
}
