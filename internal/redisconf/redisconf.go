// Package redisconf is the Redis connection every kubetrail component that shares state through
// Redis configures the same way: the k8s_object_link processor's ID map and the k8s_audit
// components' shared diff base.
package redisconf

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/config/configtls"
)

// Deployment modes.
const (
	ModeAuto       = ""
	ModeStandalone = "standalone"
	ModeSentinel   = "sentinel"
	ModeCluster    = "cluster"
)

// Config is a Redis deployment. One address is a standalone server, several are a Cluster, and
// a sentinel_master_name makes them Sentinels.
type Config struct {
	Addresses          []string               `mapstructure:"addresses"`
	Mode               string                 `mapstructure:"mode"`
	SentinelMasterName string                 `mapstructure:"sentinel_master_name"`
	DB                 int                    `mapstructure:"db"`
	KeyPrefix          string                 `mapstructure:"key_prefix"`
	Username           string                 `mapstructure:"username"`
	Password           configopaque.String    `mapstructure:"password"`
	TLS                configtls.ClientConfig `mapstructure:"tls"`
	// Timeout bounds one pipelined round trip; the pipeline never waits longer than this.
	Timeout time.Duration `mapstructure:"timeout"`
}

// Default is the connection's defaults: key prefix "kubetrail:", plain TCP, 500 ms per round
// trip.
func Default() Config {
	return Config{
		KeyPrefix: "kubetrail:",
		TLS:       configtls.ClientConfig{Insecure: true},
		Timeout:   500 * time.Millisecond,
	}
}

// Check validates the connection without touching the network; key is where the component's
// configuration holds it ("id_map.redis"), and each error names the field under it. It is not
// named Validate: the collector validates every nested Validator, and a component whose Redis
// is not in use leaves these fields empty.
func (r *Config) Check(key string) error {
	if len(r.Addresses) == 0 {
		return fmt.Errorf("%s.addresses must name at least one host:port", key)
	}
	for i, a := range r.Addresses {
		if err := ValidateHostPort(a); err != nil {
			return fmt.Errorf("%s.addresses[%d]: %w", key, i, err)
		}
	}
	if r.DB < 0 {
		return fmt.Errorf("%s.db must not be negative, got %d", key, r.DB)
	}
	switch r.Mode {
	case ModeAuto, ModeStandalone, ModeCluster:
		if r.SentinelMasterName != "" {
			return fmt.Errorf("%s.sentinel_master_name is only meaningful with mode sentinel (or mode unset), not %q", key, r.Mode)
		}
	case ModeSentinel:
		if r.SentinelMasterName == "" {
			return fmt.Errorf("%s.sentinel_master_name is required with mode sentinel", key)
		}
	default:
		return fmt.Errorf("%s.mode %q is not one of standalone, sentinel, cluster", key, r.Mode)
	}
	if r.Mode == ModeStandalone && len(r.Addresses) > 1 {
		return fmt.Errorf("%s.addresses must hold one address with mode standalone", key)
	}
	if r.Mode == ModeCluster && r.DB != 0 {
		return fmt.Errorf("%s.db must be 0 with mode cluster", key)
	}
	if r.Timeout <= 0 {
		return fmt.Errorf("%s.timeout must be positive, got %s", key, r.Timeout)
	}
	if err := r.TLS.Validate(); err != nil {
		return fmt.Errorf("%s.tls: %w", key, err)
	}
	return nil
}

// NewClient returns a client for the deployment, named clientName in CLIENT LIST. It never
// retries on its own: the component decides when to try again. key names the configuration in
// the error of a TLS file that cannot be loaded.
func (r *Config) NewClient(key, clientName string) (redis.UniversalClient, error) {
	tlsCfg, err := r.TLS.LoadTLSConfig(context.Background())
	if err != nil {
		return nil, fmt.Errorf("%s.tls: %w", key, err)
	}
	opts := &redis.UniversalOptions{
		Addrs:           r.Addresses,
		DB:              r.DB,
		Username:        r.Username,
		Password:        string(r.Password),
		TLSConfig:       tlsCfg,
		DialTimeout:     r.Timeout,
		ReadTimeout:     r.Timeout,
		WriteTimeout:    r.Timeout,
		MaxRetries:      -1,
		IsClusterMode:   r.Mode == ModeCluster,
		ClientName:      clientName,
		DisableIdentity: true,
	}
	if r.Mode == ModeSentinel || (r.Mode == ModeAuto && r.SentinelMasterName != "") {
		opts.MasterName = r.SentinelMasterName
	}
	return redis.NewUniversalClient(opts), nil
}

// ValidateHostPort accepts host:port with a non-empty host and a port in 1-65535 ("[::1]:6379"
// for IPv6). go-redis would otherwise take "redis" for a host and fail only at the first dial.
func ValidateHostPort(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", a, err)
	}
	if host == "" {
		return fmt.Errorf("%q has no host", a)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("%q: port %q is not a number in 1-65535", a, port)
	}
	return nil
}

// configErrorPrefixes are the replies of a Redis (6, 7) that say the client's configuration is
// wrong rather than that the server is unwell: authentication (HELLO … AUTH, AUTH), ACL
// permissions, and SELECT of a database the server does not have.
var configErrorPrefixes = []string{
	"WRONGPASS", "NOAUTH", "NOPERM",
	"ERR AUTH", "ERR invalid password", "ERR Client sent AUTH",
	"ERR DB index", "ERR invalid DB index",
}

// IsConfigError reports a Redis reply that a retry cannot fix.
func IsConfigError(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	for _, p := range configErrorPrefixes {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}
