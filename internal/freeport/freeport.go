// Package freeport hands tests and harnesses a TCP port on 127.0.0.1 for a process (or a server of
// their own) to bind later.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
)

// Port returns a TCP port on 127.0.0.1 nobody listens on right now, below the kernel's ephemeral
// range: a port the kernel hands out for ":0" can be taken as the source port of an outgoing
// connection (another test package's, run in parallel) before the server it is meant for binds
// it. No port is returned twice in one process.
func Port() (int, error) {
	lo, n := 10000, 22768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var eph, hi int
		if _, err := fmt.Sscan(string(b), &eph, &hi); err == nil && eph > 12000 {
			n = eph - lo
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for range 200 {
		p := lo + rand.IntN(n)
		if given[p] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		ln.Close()
		given[p] = true
		return p, nil
	}
	return 0, errors.New("no free port on 127.0.0.1 below the ephemeral range")
}

var (
	mu    sync.Mutex
	given = map[int]bool{} // never hand out the same port twice in one process
)
