package idmap

import (
	"errors"
	"fmt"
	"time"

	"github.com/kubetrail/kubetrail/internal/redisconf"
)

// Backend names.
const (
	BackendMemory = "memory"
	BackendRedis  = "redis"
)

// Config selects and configures the ID map backend: the processor's id_map.
type Config struct {
	Backend string       `mapstructure:"backend"`
	Memory  MemoryConfig `mapstructure:"memory"`
	Redis   RedisConfig  `mapstructure:"redis"`
}

// MemoryConfig bounds the in-memory ID map (and the cache in front of Redis).
type MemoryConfig struct {
	MaxEntries int   `mapstructure:"max_entries"`
	MaxBytes   int64 `mapstructure:"max_bytes"`
}

// RedisConfig is the shared ID map. One address is a standalone server, several are a Cluster,
// and a sentinel_master_name makes them Sentinels.
type RedisConfig struct {
	redisconf.Config `mapstructure:",squash"`
	// RetryMaxBackoff caps the pause between reconnection attempts during an outage.
	RetryMaxBackoff time.Duration `mapstructure:"retry_max_backoff"`
	// MaxPendingWrites bounds the records written to memory during an outage that are replayed
	// to Redis when it returns.
	MaxPendingWrites int `mapstructure:"max_pending_writes"`
}

// DefaultConfig is the memory backend, and what Redis gets when it is chosen.
func DefaultConfig() Config {
	return Config{
		Backend: BackendMemory,
		Memory:  MemoryConfig{MaxEntries: 1_000_000, MaxBytes: 256 << 20},
		Redis: RedisConfig{
			Config:           redisconf.Default(),
			RetryMaxBackoff:  30 * time.Second,
			MaxPendingWrites: 100_000,
		},
	}
}

// Check validates the configuration without touching the network; its errors name the keys
// under id_map. It is not named Validate: the collector validates every nested Validator, and
// the Redis settings must be checked only when Redis is the backend.
func (c *Config) Check() error {
	if c.Memory.MaxEntries <= 0 {
		return fmt.Errorf("id_map.memory.max_entries must be positive, got %d", c.Memory.MaxEntries)
	}
	if c.Memory.MaxBytes <= 0 {
		return fmt.Errorf("id_map.memory.max_bytes must be positive, got %d", c.Memory.MaxBytes)
	}
	switch c.Backend {
	case BackendMemory:
	case BackendRedis:
		if err := c.Redis.check(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("id_map.backend %q is not one of memory, redis", c.Backend)
	}
	return nil
}

func (r *RedisConfig) check() error {
	if len(r.Addresses) == 0 {
		return errors.New("id_map.redis.addresses must name at least one host:port when id_map.backend is redis")
	}
	if err := r.Check("id_map.redis"); err != nil {
		return err
	}
	if r.RetryMaxBackoff <= 0 {
		return fmt.Errorf("id_map.redis.retry_max_backoff must be positive, got %s", r.RetryMaxBackoff)
	}
	if r.MaxPendingWrites < 0 {
		return fmt.Errorf("id_map.redis.max_pending_writes must not be negative, got %d", r.MaxPendingWrites)
	}
	return nil
}
