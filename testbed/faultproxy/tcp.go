// Package faultproxy is the testbed's fault injector: it stands between a collector and one of
// the peers it depends on and breaks the connection on command, so that the end-to-end tests can
// stage the failures a production collector meets and measure what it does about them.
//
// Two proxies:
//   - [TCP] forwards bytes to any TCP peer (Redis, a Kafka broker, an OTLP backend) and can
//     freeze them (connections stay open, nothing moves: a hung peer or a dead network path),
//     cut them (every open connection closed), refuse them (nothing listens: connection refused)
//     or slow them (every chunk delayed).
//   - [HTTP] is a plain-HTTP front for the kube-apiserver, which it reaches with the credentials
//     of a kubeconfig (the collector's kubeconfig names the front and no credentials). Besides
//     freezing and refusing, it can end the watches in flight and answer chosen requests with an
//     API status of its own: 401 and 403 (credentials or RBAC gone mid-watch), 410 (an expired
//     resource version), 5xx (a failing relist).
//
// Both proxies count what they did, so a test can tell that the fault it staged took effect.
package faultproxy

import (
	"net"
	"sync/atomic"
	"time"
)

// TCP is a fault-injecting TCP proxy on a loopback port.
type TCP struct {
	port
	upstream string
	delay    time.Duration
	conns    map[net.Conn]struct{}

	accepted atomic.Int64
	cut      atomic.Int64
}

// ListenTCP starts a proxy on 127.0.0.1 (a free port) that forwards to upstream (host:port).
func ListenTCP(upstream string) (*TCP, error) {
	p := &TCP{upstream: upstream, conns: map[net.Conn]struct{}{}}
	if err := p.open(); err != nil {
		return nil, err
	}
	p.wg.Add(1)
	go p.serve(p.ln)
	return p, nil
}

// Addr is the proxy's address (127.0.0.1:port); it stays the same across Refuse and Pass.
func (p *TCP) Addr() string { return p.addr }

// Accepted is the number of connections the proxy accepted.
func (p *TCP) Accepted() int64 { return p.accepted.Load() }

// CutCount is the number of connections Cut, Refuse or Close closed.
func (p *TCP) CutCount() int64 { return p.cut.Load() }

// Freeze stops every byte in both directions on open and new connections; they stay open. Bytes
// read meanwhile are held and delivered, in order, after Pass.
func (p *TCP) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.freezeLocked()
}

// Slow delays every chunk forwarded by d (0: no delay).
func (p *TCP) Slow(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// Cut closes every open connection; new connections are accepted as before.
func (p *TCP) Cut() {
	p.mu.Lock()
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	for c := range conns {
		_ = c.Close()
		p.cut.Add(1)
	}
}

// Refuse cuts every connection and stops listening: connecting is refused until Pass.
func (p *TCP) Refuse() {
	p.mu.Lock()
	p.stopListeningLocked()
	p.mu.Unlock()
	p.Cut()
}

// Pass ends every fault: frozen bytes move again, no delay, and the port listens again.
func (p *TCP) Pass() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = 0
	return p.passLocked(p.serve)
}

// Close stops the proxy and closes every connection.
func (p *TCP) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.Refuse()
	_ = p.Pass() // releases frozen copies so that they see their connections closed
	p.wg.Wait()
	return nil
}

func (p *TCP) serve(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		p.wg.Add(1)
		go p.handle(c)
	}
}

// track registers c as open; false when the proxy refuses or closed meanwhile.
func (p *TCP) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *TCP) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *TCP) handle(down net.Conn) {
	defer p.wg.Done()
	if !p.track(down) {
		_ = down.Close()
		return
	}
	defer p.untrack(down)
	// A frozen proxy accepts but does not reach the peer: a connection that never answers.
	if !p.wait(down) {
		return
	}
	up, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil {
		return
	}
	if !p.track(up) {
		_ = up.Close()
		return
	}
	defer p.untrack(up)
	done := make(chan struct{}, 2)
	go func() { p.copy(up, down); done <- struct{}{} }()
	go func() { p.copy(down, up); done <- struct{}{} }()
	<-done
	// One direction ended: end the other too.
	_ = down.Close()
	_ = up.Close()
	<-done
}

// wait blocks while the proxy is frozen; false when c was closed meanwhile (Cut, Refuse).
func (p *TCP) wait(c net.Conn) bool {
	for {
		p.mu.Lock()
		frozen, delay := p.frozen, p.delay
		_, open := p.conns[c]
		p.mu.Unlock()
		if !open {
			return false
		}
		select {
		case <-frozen:
			if delay > 0 {
				time.Sleep(delay)
			}
			return true
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// copy forwards src to dst chunk by chunk, each after the freeze gate and the delay.
func (p *TCP) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.wait(src) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			// EOF or an error: handle closes both connections (the peers here do not half-close).
			return
		}
	}
}
