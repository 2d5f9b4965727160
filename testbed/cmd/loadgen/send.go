package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kubetrail/kubetrail/testbed/auditcapture"
)

type config struct {
	url          string
	duration     time.Duration
	maxEvents    int64
	connections  int
	rate         float64
	metadataOnly bool
	scenarios    []*auditcapture.Capture
}

// result is what a run did. Latencies are per POST, from the request to the end of the answer.
type result struct {
	elapsed   time.Duration
	events    int64 // events POSTed, whatever the answer
	accepted  int64 // events in batches answered 200
	batches   int64
	bytes     int64
	copies    int64
	status    map[string]int64 // HTTP status code, or "error" for a transport error
	latencies []time.Duration
}

// pacer spreads batches so that events leave at rate per second. A connection that fell behind
// by more than a second does not burst to catch up: the schedule restarts from now.
type pacer struct {
	mu   sync.Mutex
	rate float64
	next time.Time
}

func (p *pacer) wait(ctx context.Context, events int) error {
	if p.rate <= 0 {
		return ctx.Err()
	}
	p.mu.Lock()
	now := time.Now()
	if p.next.Before(now.Add(-time.Second)) {
		p.next = now
	}
	at := p.next
	p.next = at.Add(time.Duration(float64(events) / p.rate * float64(time.Second)))
	p.mu.Unlock()
	d := time.Until(at)
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// pooledBody hands its buffer back to the pool only when the transport closes it, which is when
// the transport is done reading it (possibly after Do returned).
type pooledBody struct {
	*bytes.Reader
	buf  *[]byte
	pool *sync.Pool
	once sync.Once
}

func (b *pooledBody) Close() error {
	b.once.Do(func() { b.pool.Put(b.buf) })
	return nil
}

func run(ctx context.Context, cfg config) (*result, error) {
	var nonce [1]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	transport := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        cfg.connections,
		MaxIdleConnsPerHost: cfg.connections,
		MaxConnsPerHost:     cfg.connections,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	bufs := &sync.Pool{New: func() any { b := make([]byte, 0, 512<<10); return &b }}
	p := &pacer{rate: cfg.rate}

	var (
		nextCopy atomic.Uint64
		reserved atomic.Int64
		mu       sync.Mutex
		res      = &result{status: map[string]int64{}}
		wg       sync.WaitGroup
	)
	start := time.Now()
	for range cfg.connections {
		wg.Go(func() {
			local := &result{status: map[string]int64{}}
			defer func() {
				mu.Lock()
				defer mu.Unlock()
				res.events += local.events
				res.accepted += local.accepted
				res.batches += local.batches
				res.bytes += local.bytes
				res.copies += local.copies
				for k, v := range local.status {
					res.status[k] += v
				}
				res.latencies = append(res.latencies, local.latencies...)
			}()
			for ctx.Err() == nil {
				n := nextCopy.Add(1) - 1
				s := cfg.scenarios[n%uint64(len(cfg.scenarios))]
				vals := s.Values(auditcapture.CopyTag{Nonce: nonce[0], N: n}, time.Now(), auditcapture.Fresh)
				local.copies++
				for i := range s.Batches {
					b := &s.Batches[i]
					if reserved.Add(int64(b.Events)) > cfg.maxEvents {
						cancel()
						return
					}
					if p.wait(ctx, b.Events) != nil {
						return
					}
					// A POST under way at the deadline completes, so what was counted is what the collector got.
					post(context.WithoutCancel(ctx), client, cfg.url, b, vals, bufs, local)
				}
			}
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	slices.Sort(res.latencies)
	return res, nil
}

func post(ctx context.Context, client *http.Client, target string, b *auditcapture.Batch, vals []string, bufs *sync.Pool, r *result) {
	buf := bufs.Get().(*[]byte)
	*buf = b.Render((*buf)[:0], vals)
	body := &pooledBody{Reader: bytes.NewReader(*buf), buf: buf, pool: bufs}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, body)
	if err != nil {
		body.Close()
		r.status["error"]++
		return
	}
	req.ContentLength = int64(len(*buf))
	req.Header.Set("Content-Type", "application/json")
	size := len(*buf)
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		r.status["error"]++
		r.events += int64(b.Events)
		r.batches++
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	r.latencies = append(r.latencies, time.Since(t0))
	r.status[fmt.Sprint(resp.StatusCode)]++
	r.events += int64(b.Events)
	r.batches++
	r.bytes += int64(size)
	if resp.StatusCode == http.StatusOK {
		r.accepted += int64(b.Events)
	}
}

func (r *result) quantile(q float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	return r.latencies[min(len(r.latencies)-1, int(q*float64(len(r.latencies))))]
}

func (r *result) statusText() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(r.status)) {
		parts = append(parts, fmt.Sprintf("%s:%d", k, r.status[k]))
	}
	return strings.Join(parts, " ")
}

func (r *result) print(w io.Writer, cfg config) {
	level, rate, perRound := "RequestResponse", "as fast as answered", 0
	if cfg.metadataOnly {
		level = "Metadata"
	}
	if cfg.rate > 0 {
		rate = fmt.Sprintf("target %.0f events/s", cfg.rate)
	}
	for _, s := range cfg.scenarios {
		perRound += s.Events
	}
	secs := r.elapsed.Seconds()
	fmt.Fprintf(w, "loadgen: %s to %s, %d connections, %s, %s bodies, %d scenarios (%d events per round)\n",
		r.elapsed.Round(time.Millisecond), cfg.url, cfg.connections, rate, level, len(cfg.scenarios), perRound)
	fmt.Fprintf(w, "  events sent   %d (in 200 answers: %d), batches %d, scenario copies %d, %.1f MiB\n",
		r.events, r.accepted, r.batches, r.copies, float64(r.bytes)/(1<<20))
	fmt.Fprintf(w, "  HTTP status   %s\n", r.statusText())
	fmt.Fprintf(w, "  achieved      %.0f events/s, %.1f batches/s\n", float64(r.events)/secs, float64(r.batches)/secs)
	fmt.Fprintf(w, "  POST latency  p50 %s  p99 %s  max %s\n",
		r.quantile(0.50).Round(time.Microsecond), r.quantile(0.99).Round(time.Microsecond), r.quantile(1).Round(time.Microsecond))
}

func (r *result) shellVars() string {
	secs := r.elapsed.Seconds()
	return fmt.Sprintf("LG_ELAPSED=%.3f\nLG_EVENTS=%d\nLG_ACCEPTED=%d\nLG_BATCHES=%d\nLG_EVENTS_PER_S=%.1f\nLG_P50_MS=%.2f\nLG_P99_MS=%.2f\nLG_STATUS='%s'\n",
		secs, r.events, r.accepted, r.batches, float64(r.events)/secs,
		float64(r.quantile(0.50))/1e6, float64(r.quantile(0.99))/1e6, r.statusText())
}
