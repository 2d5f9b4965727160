package faultproxy

import (
	"net"
	"sync"
)

// port is what both proxies share: a loopback listener that Refuse closes and Pass opens again
// on the same address, and the freeze gate. Its mutex also guards the proxies' own fields.
type port struct {
	mu     sync.Mutex
	ln     net.Listener // nil while refusing
	addr   string
	frozen chan struct{} // closed when not frozen; a new open channel while frozen
	closed bool
	wg     sync.WaitGroup // the serve loops and the connections' goroutines
}

// open listens on a free loopback port, unfrozen.
func (p *port) open() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	p.ln, p.addr = ln, ln.Addr().String()
	p.frozen = make(chan struct{})
	close(p.frozen)
	return nil
}

// gate is the channel to wait on: closed unless frozen.
func (p *port) gate() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.frozen
}

// freezeLocked closes the gate (p.mu held).
func (p *port) freezeLocked() {
	select {
	case <-p.frozen:
		p.frozen = make(chan struct{})
	default: // already frozen
	}
}

// stopListeningLocked closes the listener, if open (p.mu held).
func (p *port) stopListeningLocked() {
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
}

// passLocked opens the gate and, unless listening or closed, listens again on the same address,
// serving it with serve (p.mu held).
func (p *port) passLocked(serve func(net.Listener)) error {
	select {
	case <-p.frozen:
	default:
		close(p.frozen)
	}
	if p.ln != nil || p.closed {
		return nil
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return err
	}
	p.ln = ln
	p.wg.Add(1)
	go serve(ln)
	return nil
}
