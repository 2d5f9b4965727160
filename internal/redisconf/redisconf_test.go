package redisconf

import (
	"strings"
	"testing"
	"time"
)

func TestAddressesNeedHostAndPort(t *testing.T) {
	for addr, ok := range map[string]bool{
		"redis:6379": true, "10.0.0.1:6379": true, "[::1]:6379": true,
		"redis": false, "": false, ":6379": false, "redis:": false, "redis:0": false, "redis:65536": false,
		"redis:port": false, "::1": false,
	} {
		err := ValidateHostPort(addr)
		if (err == nil) != ok {
			t.Errorf("ValidateHostPort(%q) = %v, want valid=%v", addr, err, ok)
		}
	}
}

func TestCheckNamesTheKeyOfEachField(t *testing.T) {
	ok := Default()
	ok.Addresses = []string{"127.0.0.1:6379"}
	if err := ok.Check("x.redis"); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for name, tc := range map[string]struct {
		mut  func(*Config)
		want string
	}{
		"no address":       {func(c *Config) { c.Addresses = nil }, "x.redis.addresses must name"},
		"bad address":      {func(c *Config) { c.Addresses = []string{"redis"} }, "x.redis.addresses[0]"},
		"negative db":      {func(c *Config) { c.DB = -1 }, "x.redis.db must not be negative"},
		"unknown mode":     {func(c *Config) { c.Mode = "ring" }, `x.redis.mode "ring"`},
		"sentinel no name": {func(c *Config) { c.Mode = ModeSentinel }, "x.redis.sentinel_master_name is required"},
		"name no sentinel": {func(c *Config) { c.Mode = ModeCluster; c.SentinelMasterName = "m" }, "only meaningful with mode sentinel"},
		"two standalone":   {func(c *Config) { c.Mode = ModeStandalone; c.Addresses = []string{"a:1", "b:1"} }, "one address with mode standalone"},
		"cluster db":       {func(c *Config) { c.Mode = ModeCluster; c.DB = 1 }, "x.redis.db must be 0 with mode cluster"},
		"zero timeout":     {func(c *Config) { c.Timeout = 0 }, "x.redis.timeout must be positive"},
		"negative timeout": {func(c *Config) { c.Timeout = -time.Second }, "x.redis.timeout must be positive"},
	} {
		t.Run(name, func(t *testing.T) {
			c := ok
			c.Addresses = append([]string(nil), ok.Addresses...)
			tc.mut(&c)
			err := c.Check("x.redis")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
