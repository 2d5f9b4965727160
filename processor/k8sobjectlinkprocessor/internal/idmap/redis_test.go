package idmap

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kubetrail/kubetrail/internal/redistest"
)

func TestRedisSetIfAbsentFirstWriterWinsUnderConcurrency(t *testing.T) {
	requireRedis(t)
	cfg := redisConfig(t, redisAddr)
	const writers = 8
	stores := make([]*RedisStore, writers)
	for i := range stores {
		stores[i] = newRedisStore(t, cfg)
	}
	results := make([]string, writers)
	won := make([]bool, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			ops := []Op{{Kind: OpSetIfAbsent, Key: "race", Value: string(rune('A' + i)), ExpireAt: time.Now().Add(time.Minute)}}
			if err := stores[i].Do(context.Background(), ops); err != nil {
				t.Error(err)
			}
			results[i], won[i] = ops[0].Value, !ops[0].Found
		})
	}
	wg.Wait()
	winners := 0
	for i := range writers {
		if results[i] != results[0] {
			t.Fatalf("writer %d sees %q, writer 0 sees %q: first writer must win for everyone", i, results[i], results[0])
		}
		if won[i] {
			winners++
		}
	}
	if winners != 1 {
		t.Fatalf("exactly one writer must win, %d did", winners)
	}
}

func TestRedisRecordsExpireAtTheirTTL(t *testing.T) {
	requireRedis(t)
	cfg := redisConfig(t, redisAddr)
	s := newRedisStore(t, cfg)
	ops := []Op{{Kind: OpSetIfAbsent, Key: "ttl", Value: "v", ExpireAt: time.Now().Add(300 * time.Millisecond)}}
	if err := s.Do(context.Background(), ops); err != nil || ops[0].Found {
		t.Fatalf("first write must win: %v %+v", err, ops[0])
	}
	raw := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer raw.Close()
	key := cfg.Redis.KeyPrefix + "ttl"
	pttl, err := raw.PTTL(context.Background(), key).Result()
	if err != nil || pttl <= 0 || pttl > 300*time.Millisecond {
		t.Fatalf("the record must carry its absolute expiry, PTTL = %v (%v)", pttl, err)
	}
	// Redis's own clock expires it; poll rather than guess the instant.
	waitFor(t, func() bool { return raw.Exists(context.Background(), key).Val() == 0 })
	ops = []Op{{Kind: OpSetIfAbsent, Key: "ttl", Value: "w", ExpireAt: time.Now().Add(time.Minute)}}
	if err := s.Do(context.Background(), ops); err != nil || ops[0].Found || ops[0].Value != "w" {
		t.Fatalf("after expiry a new writer must win: %+v", ops[0])
	}
}

// TestSpanCountsAddUpInRedisAcrossAnOutage: OpIncr totals what every caller added, in memory
// and in Redis, and what was added while Redis was away is added to it once it is back (the
// amounts, not the local totals).
func TestSpanCountsAddUpInRedisAcrossAnOutage(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		m := NewMemoryStore(DefaultConfig().Memory, time.Now, nil)
		for i, want := range []string{"5", "12"} {
			ops := []Op{{Kind: OpIncr, Key: "c:t", Value: []string{"5", "7"}[i], ExpireAt: time.Now().Add(time.Minute)}}
			if err := m.Do(context.Background(), ops); err != nil || ops[0].Value != want {
				t.Fatalf("increment %d: total %q (%v), want %s", i, ops[0].Value, err, want)
			}
		}
	})
	t.Run("redis through an outage", func(t *testing.T) {
		srv := redistest.Start(t, 0)
		cfg := redisConfig(t, srv.Addr())
		cfg.Redis.Timeout = 200 * time.Millisecond
		cfg.Redis.RetryMaxBackoff = 100 * time.Millisecond
		s := newRedisStore(t, cfg)
		incr := func(n string) string {
			ops := []Op{{Kind: OpIncr, Key: "c:t", Value: n, ExpireAt: time.Now().Add(time.Minute)}}
			if err := s.Do(context.Background(), ops); err != nil {
				t.Fatal(err)
			}
			return ops[0].Value
		}
		if got := incr("100"); got != "100" {
			t.Fatalf("first total %s, want 100", got)
		}
		srv.Stop()
		incr("30") // from memory
		incr("20")
		srv2 := redistest.Start(t, srv.Port) // back, empty
		raw := redis.NewClient(&redis.Options{Addr: srv2.Addr()})
		defer raw.Close()
		key := cfg.Redis.KeyPrefix + "c:t"
		waitFor(t, func() bool { return raw.Exists(context.Background(), key).Val() == 1 })
		if v := raw.Get(context.Background(), key).Val(); v != "50" {
			t.Fatalf("Redis holds %s after the replay, want the 50 added during the outage", v)
		}
		if ttl := raw.PTTL(context.Background(), key).Val(); ttl <= 0 {
			t.Fatalf("the counter must expire, PTTL %v", ttl)
		}
	})
}
