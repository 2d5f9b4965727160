package k8sauditreceiver

import (
	"context"
	"errors"
	"io"
	"sync"
)

// The webhook's body reading: a request's share of max_in_flight_bytes (its reservation) and
// the body read into pooled buffers as it arrives, the reservation growing with it.

// reservation is what one request holds of the in-flight budget. It grows as the request's
// body arrives and as its events are decoded, and is given back whole when the request ends.
type reservation struct {
	w    *webhook
	ctx  context.Context
	held int64
	// floor is what the request holds besides its body and events (its decoder, see
	// chargesDecoders), which shrink leaves.
	floor int64
}

// grow reserves n bytes more, or reports false when the budget cannot spare them.
func (r *reservation) grow(n int64) bool {
	if !r.w.inFlight.Acquire(n) {
		return false
	}
	r.held += n
	r.w.r.telemetry.K8sAuditInFlightBytes.Add(r.ctx, n)
	return true
}

func (r *reservation) release() {
	r.w.inFlight.Release(r.held)
	r.w.r.telemetry.K8sAuditInFlightBytes.Add(r.ctx, -r.held)
	r.held = 0
}

// shrink gives back what the request holds for its body and events, once they are dropped.
func (r *reservation) shrink() {
	if n := r.held - r.floor; n > 0 {
		r.w.inFlight.Release(n)
		r.w.r.telemetry.K8sAuditInFlightBytes.Add(r.ctx, -n)
		r.held = r.floor
	}
}

// alone reports whether n bytes more than the request holds would pass the whole budget, even
// with no other request in flight: asking again later would not help.
func (r *reservation) alone(n int64) bool { return r.held+n > r.w.inFlight.Max() }

// bodyChunk is the size of the chunks a body of unknown length is read into, and what a body's
// reservation grows by once it holds that much.
const bodyChunk = 64 << 10

// bodyFirstStep is what a body's reservation starts with, its first chunk's size: the server's
// read buffer, which holds what arrived with the headers. A sender that declares a large body
// and sends it slowly holds what it has sent, rounded up to this while it is small, not what it
// declared: 1,100 senders of a byte a second held 64 KiB each, the whole 64 MiB bound, when
// every body started with a full chunk.
const bodyFirstStep = 4 << 10

// errBodyOverBudget says the in-flight budget could not hold more of a body being read.
var errBodyOverBudget = errors.New("the in-flight budget is spent")

// maxPooledBuffer is the largest body buffer kept for reuse: the pool serves the common
// batch sizes, a rare large body is left to the garbage collector instead of pinning its size.
const maxPooledBuffer = 4 << 20

var bodyBuffers = sync.Pool{New: func() any { return new([]byte) }}

// chunkPool holds the fixed-size chunks bodies are read into as they arrive. A body that fails
// (over max_request_body_size, over the budget, a broken connection) leaves nothing behind but
// its chunks, which the next body reuses: a flood of gzip bombs, each read up to the limit
// and refused, allocated 1.4 GB in bodies grown by copying before this.
var chunkPool = sync.Pool{New: func() any { c := make([]byte, bodyChunk); return &c }}

// firstChunkPool holds the first, small chunk of each body of unknown length (bodyFirstStep).
var firstChunkPool = sync.Pool{New: func() any { c := make([]byte, bodyFirstStep); return &c }}

// readBody reads a body of at most limit bytes into a pooled buffer, which the caller gives back
// with putBodyBuffer: straight into the buffer when the body declared a length below the limit
// (the apiserver's batches: no copy; see readDeclared), else into chunks (readChunked).
func readBody(body io.Reader, declared, limit int64, res *reservation) (*[]byte, error) {
	if declared >= 0 && declared < limit {
		return readDeclared(body, declared, limit, res)
	}
	return readChunked(body, res)
}

// readDeclared reads a body that declared its length (declared bytes, less than limit) into a
// pooled buffer, which the caller gives back with putBodyBuffer. The reservation grows as the
// bytes arrive: bodyFirstStep first, then by what it holds up to bodyChunk, then by half of what
// it holds, never past the declared length (plus the byte that sees the end), and the buffer
// with it: a body read to its end is held at its size, and one still arriving holds at most
// twice what has arrived, or bodyFirstStep. When the budget cannot grow, it returns
// errBodyOverBudget.
func readDeclared(body io.Reader, declared, limit int64, res *reservation) (*[]byte, error) {
	p := bodyBuffers.Get().(*[]byte)
	buf := (*p)[:0]
	defer func() { *p = buf }()
	ceiling := limit + 1 // MaxBytesReader fails on the byte past the limit
	if declared >= 0 && declared < limit {
		ceiling = declared + 1
	}
	var room int64 // bytes of the reservation not yet filled
	for {
		if room == 0 {
			held := int64(len(buf))
			step := min(max(bodyFirstStep, min(held, bodyChunk), held/2), ceiling-held)
			if step <= 0 {
				// A body longer than it declared: the server's reader fails on it, let it.
				step = bodyChunk
			}
			if !res.grow(step) {
				return p, errBodyOverBudget
			}
			room = step
			if need := len(buf) + int(room); need > cap(buf) {
				grown := make([]byte, len(buf), need)
				copy(grown, buf)
				buf = grown
			}
		}
		n, err := body.Read(buf[len(buf) : len(buf)+int(room)])
		buf = buf[:len(buf)+n]
		room -= int64(n)
		if errors.Is(err, io.EOF) {
			return p, nil
		}
		if err != nil {
			return p, err
		}
	}
}

// readChunked reads a body of unknown length (compressed, or sent in chunks; the reader bounds
// it) into a pooled buffer. The body arrives into chunks, the first of bodyFirstStep bytes, the
// others of bodyChunk, the reservation growing by one chunk at a time, and is copied into the
// buffer, whole, once it has ended; the chunks go back to their pools. A body refused on the way
// (past max_request_body_size, past the budget) leaves no outgrown buffers behind, only chunks
// the next body reuses. When the budget cannot grow, it returns errBodyOverBudget.
func readChunked(body io.Reader, res *reservation) (*[]byte, error) {
	p := bodyBuffers.Get().(*[]byte)
	var chunks []*[]byte
	defer func() {
		for i, c := range chunks {
			if i == 0 {
				firstChunkPool.Put(c)
			} else {
				chunkPool.Put(c)
			}
		}
	}()
	total := 0
	for {
		pool, size := &chunkPool, int64(bodyChunk)
		if len(chunks) == 0 {
			pool, size = &firstChunkPool, bodyFirstStep
		}
		if !res.grow(size) {
			return p, errBodyOverBudget
		}
		c := pool.Get().(*[]byte)
		chunks = append(chunks, c)
		n, err := io.ReadFull(body, *c)
		total += n
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break // the body ended within this chunk
		}
		if err != nil {
			return p, err
		}
	}
	buf := (*p)[:0]
	if total > cap(buf) {
		buf = make([]byte, 0, total)
	}
	for _, c := range chunks {
		buf = append(buf, (*c)[:min(len(*c), total-len(buf))]...)
	}
	*p = buf
	return p, nil
}

func putBodyBuffer(p *[]byte) {
	if cap(*p) <= maxPooledBuffer {
		*p = (*p)[:0]
		bodyBuffers.Put(p)
	}
}
