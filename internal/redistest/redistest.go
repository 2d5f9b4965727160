// Package redistest gives tests their Redis: the shared redis-server on 127.0.0.1:6379
// (RequireShared), and private redis-server processes on loopback ports for tests that stop,
// restart or cluster them, which never touch the shared one.
package redistest

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SharedAddr is the shared redis-server's address: `make test` (make redis) starts one there when
// none answers. Tests use it under key prefixes of their own.
const SharedAddr = "127.0.0.1:6379"

// RequireShared fails the test (it does not skip: a skipped test is not a passing one) when the
// shared redis-server is not answering.
func RequireShared(t testing.TB) {
	t.Helper()
	c, err := net.DialTimeout("tcp", SharedAddr, time.Second)
	if err != nil {
		t.Fatalf("Redis tests need redis-server on %s (make redis): %v", SharedAddr, err)
	}
	_ = c.Close()
}

// Server is one redis-server of a test, stopped at its end.
type Server struct {
	Port int
	cmd  *exec.Cmd
}

// Start runs redis-server on port (0: a free one) with no persistence and the extra args,
// and waits until it accepts connections.
func Start(t testing.TB, port int, args ...string) *Server {
	t.Helper()
	if port == 0 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port = l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
	}
	cmd := exec.Command("redis-server", append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"}, args...)...)
	cmd.Dir = t.TempDir()
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting redis-server: %v", err)
	}
	s := &Server{Port: port, cmd: cmd}
	t.Cleanup(s.Stop)
	WaitFor(t, 5*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", s.Addr(), 100*time.Millisecond)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
	return s
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// Stop kills the server (its records are lost: it keeps nothing on disk).
func (s *Server) Stop() {
	if s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

// Cluster runs three cluster-enabled masters, joins them with the slots spread evenly, waits
// until every node says cluster_state:ok and returns their addresses.
func Cluster(t testing.TB) []string {
	t.Helper()
	var addrs []string
	for range 3 {
		addrs = append(addrs, Start(t, 0, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000").Addr())
	}
	args := append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	WaitFor(t, 30*time.Second, func() bool {
		for _, a := range addrs {
			c := redis.NewClient(&redis.Options{Addr: a})
			info, err := c.ClusterInfo(context.Background()).Result()
			_ = c.Close()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
		}
		return true
	})
	return addrs
}

// WaitFor polls cond until it holds, failing the test after timeout.
func WaitFor(t testing.TB, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
