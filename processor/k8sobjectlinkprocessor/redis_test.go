package k8sobjectlinkprocessor

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const redisAddr = "127.0.0.1:6379"

// requireRedis fails (it does not skip: a skipped test is not a passing one) when the shared
// redis-server that `make test` ensures is not answering.
func requireRedis(t testing.TB) {
	t.Helper()
	c, err := net.DialTimeout("tcp", redisAddr, time.Second)
	if err != nil {
		t.Fatalf("Redis tests need redis-server on %s (make redis): %v", redisAddr, err)
	}
	_ = c.Close()
}

// cleanupPrefix deletes every key under prefix when the test ends.
func cleanupPrefix(t testing.TB, addr, prefix string) {
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		ctx := context.Background()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if len(keys) > 0 {
			c.Del(ctx, keys...)
		}
	})
}

func redisConfig(t testing.TB, addr string) *Config {
	cfg := memoryConfig()
	cfg.IDMap.Backend = BackendRedis
	cfg.IDMap.Redis.Addresses = []string{addr}
	cfg.IDMap.Redis.KeyPrefix = uniquePrefix(t.(*testing.T))
	cleanupPrefix(t, addr, cfg.IDMap.Redis.KeyPrefix)
	return cfg
}
