package freeport

import (
	"fmt"
	"net"
	"os"
	"testing"
)

func TestPortIsFreeBelowTheEphemeralRangeAndNeverGivenTwice(t *testing.T) {
	eph := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var hi int
		if _, err := fmt.Sscan(string(b), &eph, &hi); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[int]bool{}
	for range 50 {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		if p < 10000 || (eph > 12000 && p >= eph) || seen[p] {
			t.Fatalf("port %d: want one in [10000, %d) not given before", p, eph)
		}
		seen[p] = true
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatalf("port %d is not free: %v", p, err)
		}
		ln.Close()
	}
}
