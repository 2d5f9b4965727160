package main

// The load: the capture's batches posted on pipelined keep-alive connections, at a rate or as
// fast as the collector reads, every answer and every posted span ID recorded.

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/testbed/auditcapture"
)

// postedSpan is an audit span's event as posted: whether its batch was answered 200, when the
// request that carried it started to be written, and when its answer was read.
type postedSpan struct {
	accepted       bool
	sent, answered time.Time
}

// job is one request for a connection to write: a batch of a copy, due at a time (-rate).
type job struct {
	batch int
	vals  []string
}

// request is a request written on a connection, waiting for its answer.
type request struct {
	batch int
	spans []pcommon.SpanID // the audit spans it should yield
	bytes int
	sent  time.Time
}

type answer struct {
	request
	status   int
	answered time.Time
	err      error
}

func run(ctx context.Context, cfg config) (*result, error) {
	capture, err := auditcapture.Load(false, cfg.capture...)
	if err != nil {
		return nil, err
	}
	if capture, err = capture.Rebatch(cfg.batch); err != nil {
		return nil, err
	}
	if cfg.events > 0 {
		cfg.passes = max(1, (cfg.events+capture.Events-1)/capture.Events)
	}
	for name, path := range map[string]string{"-ready-file": cfg.readyFile, "-pause-file": cfg.pauseFile} {
		if _, err := os.Stat(path); path != "" && err == nil {
			return nil, fmt.Errorf("%s %s exists already: remove it first", name, path)
		}
	}
	sink, err := startSink(cfg)
	if err != nil {
		return nil, err
	}
	defer sink.stop()
	sink.watch(cfg.pid, cfg.clkTck)
	if cfg.readyFile != "" {
		// The sink listens: whatever exports to it (started meanwhile) connects at once.
		if err := pause(ctx, cfg.readyFile, 50*time.Millisecond); err != nil {
			return nil, err
		}
		if err := sink.watchExtraFile(cfg.extraFile); err != nil {
			return nil, err
		}
	}

	res := &result{label: cfg.label, workload: cfg.mode.String(), capture: capture.Name, passes: cfg.passes,
		status: map[string]int64{}, allocBytes: -1, objectsEmitted: -1, report: cfg.report, foreign: cfg.foreign}
	alloc0, _ := scrape(cfg.metrics, "otelcol_process_runtime_total_alloc_bytes")

	u, _ := url.Parse(cfg.url)
	conns, err := dial(u.Host, cfg.conns)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	var nonce [1]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, err
	}
	cpu0, err := cpuSeconds(cfg.pid, cfg.clkTck)
	if err != nil {
		return nil, err
	}
	if err := sink.watchExtra(cfg.extraPIDs); err != nil {
		return nil, fmt.Errorf("-extra-pids: %w", err)
	}

	start := time.Now()
	posted, err := send(ctx, cfg, capture, u, conns, nonce[0], res)
	if err != nil {
		return nil, err
	}
	res.sendTime = time.Since(start)
	if cfg.foreign {
		// Another tracer's spans carry IDs of its own: nothing is expected by ID, and what
		// arrived is counted by the sink as spans of no kubetrail type.
		posted, res.auditExpected = nil, 0
	}

	var resumed time.Time
	if cfg.pauseFile != "" {
		if err := pause(ctx, cfg.pauseFile, 50*time.Millisecond); err != nil {
			return nil, err
		}
		resumed = time.Now()
		if err := sink.watchExtraFile(cfg.extraFile); err != nil {
			return nil, err
		}
	}
	drain(ctx, cfg, sink, posted, res.auditExpected, start, resumed)
	if err := measure(cfg, sink, posted, res, start, resumed, cpu0, alloc0); err != nil {
		return nil, err
	}
	return res, nil
}

// dial opens n connections to host; on a failure, it closes those it opened.
func dial(host string, n int) ([]net.Conn, error) {
	conns := make([]net.Conn, n)
	for i := range conns {
		var err error
		if conns[i], err = net.DialTimeout("tcp", host, 5*time.Second); err != nil {
			for _, c := range conns[:i] {
				c.Close()
			}
			return nil, err
		}
	}
	return conns, nil
}

// send posts cfg.passes copies of the capture's batches over conns and reads every answer,
// counting them in res. It returns every audit span ID posted: whether its batch was answered
// 200, and when it was sent and answered.
func send(ctx context.Context, cfg config, capture *auditcapture.Capture, u *url.URL, conns []net.Conn, nonce byte, res *result) (map[pcommon.SpanID]postedSpan, error) {
	// Any failure (or ctx's end) closes every connection, which ends every writer and reader.
	sendCtx, abort := context.WithCancel(ctx)
	defer abort()
	stopOnCancel := context.AfterFunc(sendCtx, func() {
		for _, c := range conns {
			c.Close()
		}
	})
	defer stopOnCancel()
	total := cfg.passes * len(capture.Batches)

	// One dispatcher keeps the pace and hands the batches round robin to one writer per
	// connection; a reader per connection reads its answers in order.
	jobs := make([]chan job, len(conns))
	answers := make(chan answer, total+len(conns))
	writeErr := make(chan error, len(conns))
	var readers sync.WaitGroup
	for i, conn := range conns {
		jobs[i] = make(chan job, 16)
		sent := make(chan request, total/len(conns)+1)
		go func() {
			defer close(sent)
			if err := writeRequests(conn, u, capture, jobs[i], sent); err != nil {
				writeErr <- err
				abort()
			}
		}()
		readers.Go(func() {
			br := bufio.NewReaderSize(conn, 64<<10)
			for r := range sent {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					answers <- answer{request: r, err: err}
					abort()
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				answers <- answer{request: r, status: resp.StatusCode, answered: time.Now()}
			}
		})
	}
	go func() {
		readers.Wait()
		close(answers)
	}()
	go dispatch(sendCtx, cfg, capture, nonce, jobs)

	posted := make(map[pcommon.SpanID]postedSpan, total)
	var firstErr error
	for a := range answers {
		if a.err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("answer %d of %d: %w", res.batches+1, total, a.err)
			}
			continue
		}
		res.batches++
		res.bytes += int64(a.bytes)
		res.events += int64(capture.Batches[a.batch].Events)
		res.status[strconv.Itoa(a.status)]++
		for _, id := range a.spans {
			posted[id] = postedSpan{accepted: a.status == http.StatusOK, sent: a.sent, answered: a.answered}
		}
		if a.status == http.StatusOK {
			res.auditExpected += int64(len(a.spans))
		}
	}
	var werr error
	select {
	case werr = <-writeErr:
	default:
	}
	switch {
	case firstErr != nil && werr != nil:
		return nil, fmt.Errorf("%w (writing: %v)", firstErr, werr)
	case firstErr != nil:
		return nil, firstErr
	case werr != nil:
		return nil, werr
	case ctx.Err() != nil:
		return nil, ctx.Err()
	}
	return posted, nil
}

// dispatch keeps the pace (-rate) and hands the batches of every pass round robin to the
// connections' writers, closing their job channels at the end or when ctx ends.
func dispatch(ctx context.Context, cfg config, capture *auditcapture.Capture, nonce byte, jobs []chan job) {
	defer func() {
		for _, c := range jobs {
			close(c)
		}
	}()
	runStart := time.Now()
	events, k := 0, 0 // events handed out so far, for -rate; requests, for the round robin
	for pass := range cfg.passes {
		// replay: one time base for the run, so every pass falls in the same windows;
		// fresh: each pass ends now, as a new set of objects would.
		now := runStart
		if cfg.mode == auditcapture.Fresh {
			now = time.Now()
		}
		vals := capture.Values(auditcapture.CopyTag{Nonce: nonce, N: uint64(pass)}, now, cfg.mode)
		for i := range capture.Batches {
			if cfg.rate > 0 {
				// A batch leaves when the events before it are due: a cluster writes at its
				// own pace, whatever the collector could take.
				time.Sleep(time.Until(runStart.Add(time.Duration(float64(events) / cfg.rate * float64(time.Second)))))
				events += capture.Batches[i].Events
			}
			select {
			case jobs[k%len(jobs)] <- job{i, vals}:
			case <-ctx.Done():
				return
			}
			k++
		}
	}
}

// drain waits until every expected audit span arrived and the sink has been quiet for a while
// (object spans and spans held for owner_wait trail the answers); or quiet for long; or the
// timeout. After a pause, quiet counts from its end: nothing could arrive while nothing
// consumed.
func drain(ctx context.Context, cfg config, sink *sink, posted map[pcommon.SpanID]postedSpan, expected int64, start, resumed time.Time) {
	deadline := time.Now().Add(cfg.drainTimeout)
	for {
		s := sink.snapshot()
		quietSince := s.last
		if quietSince.IsZero() {
			quietSince = start
		}
		if quietSince.Before(resumed) {
			quietSince = resumed
		}
		quiet := time.Since(quietSince)
		if (s.audit >= expected && quiet >= cfg.quiet && sink.account(posted).missing == 0) || quiet >= max(5*cfg.quiet, 15*time.Second) || time.Now().After(deadline) || ctx.Err() != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// measure fills res with what arrived at the sink and what the collector (and the extra
// processes) spent from cpu0 until the last span arrived, and allocated from alloc0.
func measure(cfg config, sink *sink, posted map[pcommon.SpanID]postedSpan, res *result, start, resumed time.Time, cpu0, alloc0 float64) error {
	s := sink.snapshot()
	a := sink.account(posted)
	res.auditArrived, res.auditRefusedArrived, res.auditUnexpected = res.auditExpected-a.missing, a.refused, a.unexpected
	res.objectsArrived, res.otherArrived, res.duplicates, res.objectDuplicates = s.object, s.other, s.duplicates, s.objectDuplicates
	res.exports, res.wireBytes, res.rawBytes = s.requests, s.wireBytes, s.rawBytes
	res.lag, res.answer = summarize(a.lags), summarize(a.answers)
	cpu1, extra1 := s.cpu, s.extraCPU
	if s.last.IsZero() {
		cpu1, _ = cpuSeconds(cfg.pid, cfg.clkTck)
		extra1 = sink.readExtra()
		s.last = time.Now()
	}
	res.cpu = cpu1 - cpu0
	res.extraProcs, res.extraCPU = s.extraProcs, extra1
	res.drainTime = s.last.Sub(start)
	if !resumed.IsZero() {
		c := &catchUpTime{paused: resumed.Sub(start), drained: max(0, s.last.Sub(resumed))}
		if !s.firstAudit.IsZero() {
			c.firstAudit, c.lastAudit = s.firstAudit.Sub(resumed), s.lastAudit.Sub(resumed)
		}
		res.catchUp = c
	}
	if cfg.spansFile != "" {
		if err := writeFile(cfg.spansFile, func(w io.Writer) error { return sink.writeSpans(w, posted) }); err != nil {
			return fmt.Errorf("-spans-file: %w", err)
		}
	}
	res.peakRSS, _ = statusKiB(cfg.pid, "VmHWM")
	// Allocations first: the next scrape's own cost is not the run's.
	if alloc1, ok := scrape(cfg.metrics, "otelcol_process_runtime_total_alloc_bytes"); ok {
		res.allocBytes = alloc1 - alloc0
	}
	if v, ok := scrape(cfg.metrics, "otelcol_k8s_object_link_object_spans_emitted"); ok {
		res.objectsEmitted = v
	}
	return nil
}

// writeRequests writes each job's batch on conn as an HTTP/1.1 request without waiting for the
// answers (pipelining), and passes each on to sent once it is out, with the time it started.
func writeRequests(conn net.Conn, u *url.URL, capture *auditcapture.Capture, jobs <-chan job, sent chan<- request) error {
	w := bufio.NewWriterSize(conn, 256<<10)
	var buf []byte
	var ids []string
	for j := range jobs {
		b := &capture.Batches[j.batch]
		buf = b.Render(buf[:0], j.vals)
		at := time.Now()
		fmt.Fprintf(w, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", u.RequestURI(), u.Host, len(buf))
		if _, err := w.Write(buf); err != nil {
			return err
		}
		// Flush per request: a request must not wait in the sender's buffer for the next one.
		if err := w.Flush(); err != nil {
			return err
		}
		ids = b.TracedAuditIDs(ids[:0], j.vals)
		spans := make([]pcommon.SpanID, len(ids))
		for k, id := range ids {
			spans[k] = model.AuditSpanID(id)
		}
		sent <- request{batch: j.batch, spans: spans, bytes: len(buf), sent: at}
	}
	return nil
}

// writeFile creates path and writes it with write, buffered.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	err = write(w)
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// pause creates path and waits until someone removes it.
func pause(ctx context.Context, path string, poll time.Duration) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("-pause-file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("-pause-file: %w", err)
	}
	for {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return nil
		}
		select {
		case <-ctx.Done():
			_ = os.Remove(path)
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}
