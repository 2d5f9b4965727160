package idmap

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/kubetrail/kubetrail/internal/redistest"
)

var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

// fakeClock is a clock the test moves.
type fakeClock struct{ *testingclock.FakeClock }

func newFakeClock(t time.Time) *fakeClock { return &fakeClock{FakeClock: testingclock.NewFakeClock(t)} }

func (c *fakeClock) Advance(d time.Duration) { c.Step(d) }

// nopTelemetry records nothing: the processor's tests check the metrics.
type nopTelemetry struct{}

func (nopTelemetry) RedisError(string)                             {}
func (nopTelemetry) RedisReset(context.Context)                    {}
func (nopTelemetry) RedisRoundTrip(context.Context, time.Duration) {}
func (nopTelemetry) RedisReconciled(string)                        {}

const redisAddr = redistest.SharedAddr

var requireRedis = redistest.RequireShared

// redisConfig is the default configuration with the Redis backend at addr, under a key prefix of
// the test's own that is cleaned up when it ends.
func redisConfig(t *testing.T, addr string) Config {
	cfg := DefaultConfig()
	cfg.Backend = BackendRedis
	cfg.Redis.Addresses = []string{addr}
	cfg.Redis.KeyPrefix = fmt.Sprintf("kubetrail-test:%s:%x:", strings.ReplaceAll(t.Name(), "/", "_"), time.Now().UnixNano())
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		ctx := context.Background()
		iter := c.Scan(ctx, 0, cfg.Redis.KeyPrefix+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if len(keys) > 0 {
			c.Del(ctx, keys...)
		}
	})
	return cfg
}

// newRedisStore is a Redis store of cfg with a memory cache of cfg's bounds, on the real clock
// (Redis expires records by its own), closed when the test ends.
func newRedisStore(t *testing.T, cfg Config) *RedisStore {
	t.Helper()
	s, err := NewRedisStore(cfg.Redis, NewMemoryStore(cfg.Memory, time.Now, nil), time.Now, nopTelemetry{}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	redistest.WaitFor(t, 5*time.Second, cond)
}
