// Command benchaudit measures what one collector process spends on the audit path: it replays a
// recorded capture of audit webhook bodies into the collector's k8s_audit webhook N times, receives
// what the collector exports on an OTLP gRPC sink of its own, and reads the collector's CPU time and
// peak RSS from /proc and its allocated bytes from its own metrics. testbed/hack/bench-audit.sh
// (`make bench-audit`) starts the collectors and prints the table; see testbed/README.md.
//
// The method:
//
//   - the capture's batches go in recorded order, pass after pass, every pass a copy of
//     testbed/auditcapture: `replay` (only auditIDs rewritten, same byte length: the same objects
//     each pass) or `fresh` (auditIDs, UIDs and names rewritten: new objects, new object spans,
//     each pass);
//
//   - open loop on one keep-alive connection: the requests are written back to back (HTTP/1.1
//     pipelining) without waiting for answers, so the collector never waits for the sender; TCP
//     flow control is the only brake, and the answers are read in order on the side;
//
//   - CPU = utime + stime of the collector (/proc/PID/stat) from just before the first request to
//     the last span arriving at the sink; peak RSS = VmHWM of /proc/PID/status;
//
//   - expected audit spans = the events of the batches answered 200 that the receiver's defaults
//     trace (completed writes, not Leases or Events), counted here from the capture; arrived =
//     distinct span IDs at the sink. Object spans are compared with the collector's own count
//     (otelcol_k8s_object_link_object_spans_emitted) when it exposes one.
//
//     benchaudit -url http://127.0.0.1:9880/audit/bench -sink 127.0.0.1:4317 -pid 1234 \
//     -capture testbed/fixtures/deployment -passes 100 -workload replay [-metrics http://127.0.0.1:8888/metrics]
//
// For the Kafka tiers (testbed/hack/bench-kafka.sh, `make bench-kafka`) -pid is the edge collector
// and the spans come from processing collectors behind a broker; -report tiers adds what such a
// run is about:
//
//   - -extra-pids: the processing collectors' CPU, summed, over the same interval as the edge's;
//
//   - lag: for every audit span of a batch answered 200, the time the sink first received it minus
//     the time this program started writing the request that carried its event, as p50, p99 and
//     max;
//
//   - -ready-file: once the sink listens, create the file and wait until it is removed before the
//     first request, so that the processing collectors, started meanwhile, connect to the sink at
//     once (a gRPC client that found no server waits out its reconnect backoff);
//
//   - -pause-file: after the last answer, create the file and wait until it is removed (the
//     script starts the processing tier meanwhile) before the drain clock starts. The catch-up
//     rate is the audit spans arrived over the time from the first to the last arrival;
//
//   - -extra-pids-file: the processes started during a wait, read when it ends;
//
//   - -spans-file: each audit span's times (request written, answer read, first arrival), to
//     tell the edge's share of a lag from the processing tier's;
//
//   - -conns: the batches go round robin over several keep-alive connections, each pipelined and
//     answered in order, as an apiserver sends its batches concurrently; the edge answers a batch
//     only once Kafka has it, so one connection carries one batch per broker round trip.
package main

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // a config that keeps the exporter's default compression

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/testbed/auditcapture"
)

type config struct {
	url          string
	capture      []string
	passes       int
	events       int
	mode         auditcapture.Mode
	sink         string
	pid          int
	metrics      string
	label        string
	row          string
	clkTck       float64
	quiet        time.Duration
	drainTimeout time.Duration
	rate         float64 // events per second to send at; 0: as fast as the collector reads
	conns        int     // keep-alive connections the requests go round robin over
	report       string  // "audit" (bench-audit's lines and row) or "tiers" (also lag, other processes' CPU, catch-up)
	extraPIDs    []int   // other processes whose CPU is counted over the same interval
	extraFile    string  // a file of more such process IDs, read at the end of each wait (-ready-file, -pause-file)
	readyFile    string  // created once the sink listens; the first request goes once it is removed
	pauseFile    string  // created after the last answer; the drain clock starts once it is removed
	spansFile    string  // per audit span of an accepted batch: sent, answered, arrived
}

func main() {
	var (
		cfg      config
		capture  string
		workload string
	)
	flag.StringVar(&cfg.url, "url", "", "the collector's k8s_audit webhook URL (http://127.0.0.1:PORT/audit/CLUSTER)")
	flag.StringVar(&capture, "capture", "testbed/fixtures/deployment", "comma-separated recorded scenario directories or JSON-lines captures (.jsonl, .jsonl.gz)")
	flag.IntVar(&cfg.passes, "passes", 10, "how many times the capture is sent")
	flag.IntVar(&cfg.events, "events", 0, "instead of -passes: as many passes as it takes to send at least this many events")
	flag.StringVar(&workload, "workload", "replay", "replay (same objects every pass) or fresh (new objects every pass)")
	flag.StringVar(&cfg.sink, "sink", "", "listen address of the OTLP gRPC sink the collector exports to (127.0.0.1:PORT)")
	flag.IntVar(&cfg.pid, "pid", 0, "the collector's process ID")
	flag.StringVar(&cfg.metrics, "metrics", "", "the collector's Prometheus endpoint, for allocated bytes and object spans (optional)")
	flag.StringVar(&cfg.label, "label", "collector", "the row's name")
	flag.StringVar(&cfg.row, "row", "", "append the result as a tab-separated row to this file")
	flag.Float64Var(&cfg.clkTck, "clk-tck", 100, "clock ticks per second of /proc/PID/stat (getconf CLK_TCK)")
	flag.DurationVar(&cfg.quiet, "quiet", 3*time.Second, "drained: every expected audit span arrived and nothing arrived for this long")
	flag.DurationVar(&cfg.drainTimeout, "drain-timeout", 2*time.Minute, "give up waiting for spans this long after the last answer")
	flag.Float64Var(&cfg.rate, "rate", 0, "send at most this many events per second, each batch when its events are due (0: open loop at full speed)")
	flag.IntVar(&cfg.conns, "conns", 1, "keep-alive connections the requests go round robin over, each pipelined and answered in order")
	flag.StringVar(&cfg.report, "report", "audit", "audit (bench-audit's lines and row) or tiers (also lag percentiles, the -extra-pids' CPU, catch-up after -pause-file)")
	extraPIDs := flag.String("extra-pids", "", "comma-separated process IDs whose CPU is counted too, over the same interval as -pid's (-report tiers)")
	flag.StringVar(&cfg.extraFile, "extra-pids-file", "", "a file of process IDs read when the wait on -ready-file or -pause-file ends, for processes started during it; each counts from then on (-report tiers)")
	flag.StringVar(&cfg.readyFile, "ready-file", "", "once the sink listens, create this file and wait until it is removed before the first request (-report tiers)")
	flag.StringVar(&cfg.pauseFile, "pause-file", "", "after the last answer, create this file and wait until it is removed before the drain clock starts (-report tiers)")
	flag.StringVar(&cfg.spansFile, "spans-file", "", "write a line per audit span of a batch answered 200, in the order sent: Unix ns when its request started to be written, when its answer was read, when the sink first received it (0: never) (-report tiers)")
	flag.Parse()

	var err error
	if cfg.mode, err = auditcapture.ParseMode(workload); err != nil {
		fail(2, err)
	}
	if capture != "" {
		cfg.capture = strings.Split(capture, ",")
	}
	if cfg.extraPIDs, err = parsePIDs(*extraPIDs); err != nil {
		fail(2, fmt.Errorf("-extra-pids: %w", err))
	}
	if err := cfg.validate(); err != nil {
		fail(2, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := run(ctx, cfg)
	if err != nil {
		fail(1, err)
	}
	res.print(os.Stdout)
	if cfg.row != "" {
		f, err := os.OpenFile(cfg.row, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			fail(1, err)
		}
		_, err = io.WriteString(f, res.tsv()+"\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			fail(1, err)
		}
	}
	if res.status["200"] == 0 {
		os.Exit(1)
	}
}

func fail(code int, err error) {
	fmt.Fprintln(os.Stderr, "benchaudit:", err)
	os.Exit(code)
}

func (c *config) validate() error {
	u, err := url.Parse(c.url)
	if err != nil {
		return fmt.Errorf("-url: %w", err)
	}
	if u.Scheme != "http" || u.Hostname() != "127.0.0.1" || u.Port() == "" {
		return fmt.Errorf("-url %q: only http://127.0.0.1:PORT targets are allowed", c.url)
	}
	if host, _, err := net.SplitHostPort(c.sink); err != nil || host != "127.0.0.1" {
		return fmt.Errorf("-sink %q: want 127.0.0.1:PORT", c.sink)
	}
	if c.passes < 1 && c.events < 1 {
		return errors.New("-passes or -events must be positive")
	}
	if c.pid <= 0 {
		return errors.New("-pid: the collector's process ID is required")
	}
	if len(c.capture) == 0 {
		return errors.New("-capture: no capture")
	}
	if c.conns < 1 {
		return fmt.Errorf("-conns %d: want at least one connection", c.conns)
	}
	switch c.report {
	case "audit":
		if len(c.extraPIDs) > 0 || c.extraFile != "" || c.readyFile != "" || c.pauseFile != "" || c.spansFile != "" {
			return errors.New("-extra-pids, -extra-pids-file, -ready-file, -pause-file and -spans-file are reported by -report tiers only")
		}
	case "tiers":
	default:
		return fmt.Errorf("-report %q: want audit or tiers", c.report)
	}
	if slices.Contains(c.extraPIDs, c.pid) {
		return fmt.Errorf("-extra-pids: %d is -pid already", c.pid)
	}
	if c.extraFile != "" && c.readyFile == "" && c.pauseFile == "" {
		return errors.New("-extra-pids-file is read when a wait ends: it needs -ready-file or -pause-file")
	}
	if c.readyFile != "" && c.readyFile == c.pauseFile {
		return errors.New("-ready-file and -pause-file must be two files")
	}
	return nil
}

// parsePIDs reads process IDs separated by commas or white space; none is an empty list.
func parsePIDs(s string) ([]int, error) {
	var pids []int
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || unicode.IsSpace(r) }) {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a process ID", f)
		}
		pids = append(pids, n)
	}
	return pids, nil
}

// result is one run: what was sent, what the collector answered and spent, what arrived.
type result struct {
	label, workload, capture string
	passes                   int
	events, bytes, batches   int64
	status                   map[string]int64
	sendTime                 time.Duration // first request to last answer
	drainTime                time.Duration // first request to last span at the sink
	cpu                      float64       // collector CPU seconds, first request to last span
	peakRSS                  int64         // KiB
	allocBytes               float64       // -1 when the collector does not expose it
	auditExpected            int64         // traced events of the batches answered 200
	auditArrived             int64         // of those, the ones whose span arrived
	auditRefusedArrived      int64         // spans of refused batches that arrived anyway (see sink.account)
	auditUnexpected          int64         // audit spans of no posted event
	objectsEmitted           float64       // -1 when the collector does not expose it
	objectsArrived           int64
	otherArrived             int64
	duplicates               int64

	report     string       // -report
	extraProcs int          // processes of -extra-pids and -extra-pids-file
	extraCPU   float64      // their CPU seconds, summed, over the same interval as cpu (from a wait's end for the file's)
	lag        lagSummary   // of the audit spans of batches answered 200 that arrived
	answer     lagSummary   // of the same spans: their request's answer read minus its write's start
	catchUp    *catchUpTime // with -pause-file
}

// catchUpTime is when the drain after a pause began and how it went.
type catchUpTime struct {
	paused     time.Duration // first request to the pause's end (the processing tier's start)
	firstAudit time.Duration // the pause's end to the first audit span (zero: none arrived)
	lastAudit  time.Duration // the pause's end to the last audit span
	drained    time.Duration // the pause's end to the last span of any kind
}

// rate is the audit spans per second over the time from the first to the last audit arrival.
func (c *catchUpTime) rate(arrived int64) float64 {
	d := c.lastAudit - c.firstAudit
	if d <= 0 || arrived < 2 {
		return 0
	}
	return float64(arrived) / d.Seconds()
}

// lagSummary is the nearest-rank percentiles of a set of lags.
type lagSummary struct {
	n             int
	p50, p99, max time.Duration
}

// summarize sorts lags in place and returns their p50, p99 and maximum.
func summarize(lags []time.Duration) lagSummary {
	slices.Sort(lags)
	s := lagSummary{n: len(lags), p50: percentile(lags, 50), p99: percentile(lags, 99)}
	if len(lags) > 0 {
		s.max = lags[len(lags)-1]
	}
	return s
}

// percentile is the nearest-rank p-th percentile (0 < p <= 100) of sorted: the smallest value
// that at least p % of the values do not exceed. Zero for no values.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	// p*n first: that product is exact, so p99.9 of 1,000 values is rank 999 (p/100*n rounds up to 1,000).
	rank := int(math.Ceil(p * float64(len(sorted)) / 100))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

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
		status: map[string]int64{}, allocBytes: -1, objectsEmitted: -1, report: cfg.report}
	alloc0, _ := scrape(cfg.metrics, "otelcol_process_runtime_total_alloc_bytes")

	u, _ := url.Parse(cfg.url)
	// Any failure (or ctx's end) closes every connection, which ends every writer and reader.
	sendCtx, abort := context.WithCancel(ctx)
	defer abort()
	conns := make([]net.Conn, cfg.conns)
	for i := range conns {
		if conns[i], err = net.DialTimeout("tcp", u.Host, 5*time.Second); err != nil {
			for _, c := range conns[:i] {
				c.Close()
			}
			return nil, err
		}
	}
	stopOnCancel := context.AfterFunc(sendCtx, func() {
		for _, c := range conns {
			c.Close()
		}
	})
	defer stopOnCancel()
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()

	var nonce [1]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, err
	}
	total := cfg.passes * len(capture.Batches)

	cpu0, err := cpuSeconds(cfg.pid, cfg.clkTck)
	if err != nil {
		return nil, err
	}
	if err := sink.watchExtra(cfg.extraPIDs); err != nil {
		return nil, fmt.Errorf("-extra-pids: %w", err)
	}
	start := time.Now()

	// One dispatcher keeps the pace and hands the batches round robin to one writer per
	// connection; a reader per connection reads its answers in order.
	jobs := make([]chan job, cfg.conns)
	answers := make(chan answer, total+cfg.conns)
	writeErr := make(chan error, cfg.conns)
	var readers sync.WaitGroup
	for i, conn := range conns {
		jobs[i] = make(chan job, 16)
		sent := make(chan request, total/cfg.conns+1)
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
	go func() {
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
			vals := capture.Values(auditcapture.CopyTag{Nonce: nonce[0], N: uint64(pass)}, now, cfg.mode)
			for i := range capture.Batches {
				if cfg.rate > 0 {
					// A batch leaves when the events before it are due: a cluster writes at its
					// own pace, whatever the collector could take.
					time.Sleep(time.Until(runStart.Add(time.Duration(float64(events) / cfg.rate * float64(time.Second)))))
					events += capture.Batches[i].Events
				}
				select {
				case jobs[k%len(jobs)] <- job{i, vals}:
				case <-sendCtx.Done():
					return
				}
				k++
			}
		}
	}()

	// Every audit span ID posted: whether its batch was answered 200, and when it was sent.
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
	res.sendTime = time.Since(start)

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

	// Drained: every expected audit span arrived and the sink has been quiet for a while (object
	// spans and spans held for owner_wait trail the answers); or quiet for long; or the timeout.
	// After a pause, quiet counts from its end: nothing could arrive while nothing consumed.
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
		if (s.audit >= res.auditExpected && quiet >= cfg.quiet && sink.account(posted).missing == 0) || quiet >= max(5*cfg.quiet, 15*time.Second) || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	s := sink.snapshot()
	a := sink.account(posted)
	res.auditArrived, res.auditRefusedArrived, res.auditUnexpected = res.auditExpected-a.missing, a.refused, a.unexpected
	res.objectsArrived, res.otherArrived, res.duplicates = s.object, s.other, s.duplicates
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
			return nil, fmt.Errorf("-spans-file: %w", err)
		}
	}
	res.peakRSS, _ = statusKiB(cfg.pid, "VmHWM")
	if alloc1, ok := scrape(cfg.metrics, "otelcol_process_runtime_total_alloc_bytes"); ok {
		res.allocBytes = alloc1 - alloc0
	}
	if v, ok := scrape(cfg.metrics, "otelcol_k8s_object_link_object_spans_emitted"); ok {
		res.objectsEmitted = v
	}
	return res, nil
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

// sink is the counting OTLP gRPC backend: distinct span IDs by span type, duplicates, when each
// audit span first arrived, and the collectors' CPU time when the latest spans arrived.
type sink struct {
	ptraceotlp.UnimplementedGRPCServer
	srv *grpc.Server

	mu     sync.Mutex
	seen   map[pcommon.SpanID]struct{}
	audit  map[pcommon.SpanID]time.Time // the audit spans among them, and their first arrival
	counts snapshot
	pid    int
	clkTck float64
	extra  []extraProc
}

// extraProc is a process of -extra-pids: its CPU seconds when it was first read and last read.
type extraProc struct {
	pid         int
	first, last float64
}

type snapshot struct {
	audit, object, other, duplicates int64
	last                             time.Time
	firstAudit, lastAudit            time.Time
	cpu                              float64
	extraProcs                       int
	extraCPU                         float64 // the extra processes' CPU seconds since they were first read
}

func startSink(cfg config) (*sink, error) {
	lis, err := net.Listen("tcp", cfg.sink)
	if err != nil {
		return nil, fmt.Errorf("sink: %w", err)
	}
	s := &sink{srv: grpc.NewServer(grpc.MaxRecvMsgSize(64 << 20)), seen: map[pcommon.SpanID]struct{}{}, audit: map[pcommon.SpanID]time.Time{}}
	ptraceotlp.RegisterGRPCServer(s.srv, s)
	go func() { _ = s.srv.Serve(lis) }()
	return s, nil
}

func (s *sink) stop() { s.srv.Stop() }

func (s *sink) watch(pid int, clkTck float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pid, s.clkTck = pid, clkTck
}

// watchExtra adds the processes not watched yet, their CPU counted from now on.
func (s *sink) watchExtra(pids []int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, pid := range pids {
		if slices.ContainsFunc(s.extra, func(p extraProc) bool { return p.pid == pid }) {
			continue
		}
		cpu, err := cpuSeconds(pid, s.clkTck)
		if err != nil {
			return err
		}
		s.extra = append(s.extra, extraProc{pid: pid, first: cpu, last: cpu})
	}
	s.counts.extraProcs = len(s.extra)
	s.counts.extraCPU = s.extraCPULocked()
	return nil
}

// watchExtraFile watches the processes listed in path (nothing for no path).
func (s *sink) watchExtraFile(path string) error {
	if path == "" {
		return nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("-extra-pids-file: %w", err)
	}
	pids, err := parsePIDs(string(raw))
	if err == nil {
		err = s.watchExtra(pids)
	}
	if err != nil {
		return fmt.Errorf("-extra-pids-file %s: %w", path, err)
	}
	return nil
}

// readExtra reads the extra processes' CPU now and returns it, summed, since their first reading.
func (s *sink) readExtra() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.readExtraLocked()
	return s.extraCPULocked()
}

// readExtraLocked updates each extra process's last reading; one that has exited keeps its last.
func (s *sink) readExtraLocked() {
	for i := range s.extra {
		if cpu, err := cpuSeconds(s.extra[i].pid, s.clkTck); err == nil {
			s.extra[i].last = cpu
		}
	}
}

func (s *sink) extraCPULocked() float64 {
	var sum float64
	for _, p := range s.extra {
		sum += p.last - p.first
	}
	return sum
}

func (s *sink) snapshot() snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts
}

// accounting compares the audit spans that arrived with those posted.
type accounting struct {
	missing int64 // posted in a batch answered 200, not arrived: lost
	refused int64 // posted in a refused batch, arrived anyway: k8s_object_link keeps the spans it
	// holds for owner_wait whatever the next consumer answers (the apiserver's retry of the batch
	// then finds them marked), so a 503 does not take back every span of its batch
	unexpected int64 // arrived, never posted
	// lags of the spans of accepted batches that arrived: first arrival minus the request's
	// start, and the answer's share of it (answer read minus the request's start), unsorted
	lags, answers []time.Duration
}

func (s *sink) account(posted map[pcommon.SpanID]postedSpan) accounting {
	s.mu.Lock()
	defer s.mu.Unlock()
	var a accounting
	for id, p := range posted {
		at, arrived := s.audit[id]
		switch {
		case p.accepted && !arrived:
			a.missing++
		case p.accepted:
			a.lags = append(a.lags, at.Sub(p.sent))
			a.answers = append(a.answers, p.answered.Sub(p.sent))
		case arrived:
			a.refused++
		}
	}
	for id := range s.audit {
		if _, ok := posted[id]; !ok {
			a.unexpected++
		}
	}
	return a
}

// writeSpans writes, for each audit span of a batch answered 200 in the order sent, the Unix
// nanoseconds its request started to be written, its answer was read and it first arrived (0:
// never), tab-separated: where a lag came from, the edge's answer or what followed it.
func (s *sink) writeSpans(w io.Writer, posted map[pcommon.SpanID]postedSpan) error {
	type row struct{ sent, answered, arrived int64 }
	s.mu.Lock()
	rows := make([]row, 0, len(posted))
	for id, p := range posted {
		if !p.accepted {
			continue
		}
		r := row{sent: p.sent.UnixNano(), answered: p.answered.UnixNano()}
		if at, ok := s.audit[id]; ok {
			r.arrived = at.UnixNano()
		}
		rows = append(rows, r)
	}
	s.mu.Unlock()
	slices.SortFunc(rows, func(a, b row) int { return cmp.Compare(a.sent, b.sent) })
	for _, r := range rows {
		if _, err := fmt.Fprintf(w, "%d\t%d\t%d\n", r.sent, r.answered, r.arrived); err != nil {
			return err
		}
	}
	return nil
}

func (s *sink) Export(_ context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	rss := req.Traces().ResourceSpans()
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	audit := false
	for i := range rss.Len() {
		sss := rss.At(i).ScopeSpans()
		for j := range sss.Len() {
			spans := sss.At(j).Spans()
			for k := range spans.Len() {
				sp := spans.At(k)
				if _, dup := s.seen[sp.SpanID()]; dup {
					s.counts.duplicates++
					continue
				}
				s.seen[sp.SpanID()] = struct{}{}
				typ, _ := sp.Attributes().Get(model.AttrSpanType)
				switch typ.Str() {
				case model.SpanTypeAudit:
					s.counts.audit++
					s.audit[sp.SpanID()] = now
					audit = true
				case model.SpanTypeObject:
					s.counts.object++
				default:
					s.counts.other++
				}
			}
		}
	}
	s.counts.last = now
	if audit {
		if s.counts.firstAudit.IsZero() {
			s.counts.firstAudit = now
		}
		s.counts.lastAudit = now
	}
	if s.pid > 0 {
		if cpu, err := cpuSeconds(s.pid, s.clkTck); err == nil {
			s.counts.cpu = cpu
		}
	}
	if len(s.extra) > 0 {
		s.readExtraLocked()
		s.counts.extraCPU = s.extraCPULocked()
	}
	return ptraceotlp.NewExportResponse(), nil
}

// cpuSeconds is utime + stime of pid (fields 14 and 15 of /proc/PID/stat, counted after the
// command name, which may contain spaces and parentheses).
func cpuSeconds(pid int, clkTck float64) (float64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseCPU(string(raw), clkTck)
}

func parseCPU(stat string, clkTck float64) (float64, error) {
	end := strings.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, errors.New("/proc stat: no command name")
	}
	f := strings.Fields(stat[end+1:])
	// f[0] is field 3 (state): utime is field 14, stime 15.
	if len(f) < 13 {
		return 0, errors.New("/proc stat: too few fields")
	}
	u, err1 := strconv.ParseFloat(f[11], 64)
	s, err2 := strconv.ParseFloat(f[12], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc stat: %w", err)
	}
	return (u + s) / clkTck, nil
}

func statusKiB(pid int, key string) (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no %s", pid, key)
}

// scrape returns the sum of every series of the metric name (with or without the _total suffix)
// on a Prometheus text endpoint, and whether there was one.
func scrape(endpoint, name string) (float64, bool) {
	if endpoint == "" {
		return 0, false
	}
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(endpoint)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false
	}
	return sumMetric(string(body), name)
}

func sumMetric(text, name string) (float64, bool) {
	var sum float64
	found := false
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		metric, _, _ := strings.Cut(f[0], "{")
		if metric != name && metric != name+"_total" {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		sum += v
		found = true
	}
	return sum, found
}

func (r *result) statusText() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(r.status)) {
		parts = append(parts, fmt.Sprintf("%s:%d", k, r.status[k]))
	}
	return strings.Join(parts, " ")
}

func (r *result) refusedArrivedText() string {
	if r.auditRefusedArrived == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d spans of refused batches arrived)", r.auditRefusedArrived)
}

func (r *result) lost() (audit int64, objects string) {
	audit = r.auditExpected - r.auditArrived + r.auditUnexpected
	objects = "n/a"
	if r.objectsEmitted >= 0 {
		objects = strconv.FormatInt(int64(r.objectsEmitted)-r.objectsArrived, 10)
	}
	return audit, objects
}

func (r *result) print(w io.Writer) {
	perEvent := r.cpu / float64(r.events) * 1e6
	fmt.Fprintf(w, "benchaudit %s, %s: %d passes of %s, %d events in %d requests (%.1f MiB), answers %s\n",
		r.label, r.workload, r.passes, r.capture, r.events, r.batches, float64(r.bytes)/(1<<20), r.statusText())
	fmt.Fprintf(w, "  sent in %s (%.0f events/s), drained in %s\n", r.sendTime.Round(time.Millisecond),
		float64(r.events)/r.sendTime.Seconds(), r.drainTime.Round(time.Millisecond))
	fmt.Fprintf(w, "  collector CPU %.2f s = %.1f µs per posted event, peak RSS %d MiB", r.cpu, perEvent, r.peakRSS/1024)
	if r.allocBytes >= 0 {
		fmt.Fprintf(w, ", %.0f bytes allocated per event", r.allocBytes/float64(r.events))
	}
	fmt.Fprintln(w)
	lostAudit, lostObjects := r.lost()
	emitted := "n/a"
	if r.objectsEmitted >= 0 {
		emitted = strconv.FormatInt(int64(r.objectsEmitted), 10)
	}
	fmt.Fprintf(w, "  audit spans expected %d, arrived %d, lost %d; object spans emitted %s, arrived %d, lost %s; other %d; duplicate copies %d\n",
		r.auditExpected, r.auditArrived, lostAudit, emitted, r.objectsArrived, lostObjects, r.otherArrived, r.duplicates)
	if r.auditRefusedArrived > 0 || r.auditUnexpected > 0 {
		fmt.Fprintf(w, "  also arrived: %d audit spans of refused batches (held by k8s_object_link, kept), %d of no posted event (counted as lost)\n",
			r.auditRefusedArrived, r.auditUnexpected)
	}
	if r.report != "tiers" {
		return
	}
	if r.extraProcs > 0 {
		fmt.Fprintf(w, "  other processes' CPU (%d) %.2f s = %.1f µs per posted event\n", r.extraProcs, r.extraCPU, r.extraCPU/float64(r.events)*1e6)
	}
	round := func(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }
	fmt.Fprintf(w, "  lag (first arrival at the sink - start of the request's write) of %d audit spans: p50 %s, p99 %s, max %s; the answer's share (answer read - start of the write): p50 %s, p99 %s, max %s\n",
		r.lag.n, round(r.lag.p50), round(r.lag.p99), round(r.lag.max), round(r.answer.p50), round(r.answer.p99), round(r.answer.max))
	if c := r.catchUp; c != nil {
		fmt.Fprintf(w, "  catch-up: the pause ended %s after the first request; from then, first audit span after %s, last after %s, drained after %s: %.0f audit spans/s\n",
			c.paused.Round(time.Millisecond), c.firstAudit.Round(time.Millisecond), c.lastAudit.Round(time.Millisecond),
			c.drained.Round(time.Millisecond), c.rate(r.auditArrived))
	}
}

// tsv is the row bench-audit.sh (or, -report tiers, bench-kafka.sh) turns into its table; the
// columns are its header's.
func (r *result) tsv() string {
	if r.report == "tiers" {
		return r.tiersTSV()
	}
	alloc := "n/a"
	if r.allocBytes >= 0 {
		alloc = fmt.Sprintf("%.0f", r.allocBytes/float64(r.events))
	}
	emitted := "n/a"
	if r.objectsEmitted >= 0 {
		emitted = strconv.FormatInt(int64(r.objectsEmitted), 10)
	}
	lostAudit, lostObjects := r.lost()
	return strings.Join([]string{
		r.label, r.workload, strconv.Itoa(r.passes), strconv.FormatInt(r.events, 10),
		fmt.Sprintf("%.1f", float64(r.bytes)/(1<<20)),
		fmt.Sprintf("%.1f", r.cpu/float64(r.events)*1e6),
		fmt.Sprintf("%.0f", float64(r.events)/r.sendTime.Seconds()),
		fmt.Sprintf("%.1f", r.drainTime.Seconds()),
		alloc,
		strconv.FormatInt(r.peakRSS/1024, 10),
		fmt.Sprintf("%d / %d / %d", r.auditExpected, r.auditArrived, lostAudit),
		fmt.Sprintf("%s / %d / %s", emitted, r.objectsArrived, lostObjects),
		strconv.FormatInt(r.duplicates, 10),
		r.statusText() + r.refusedArrivedText(),
	}, "\t")
}

// tiersTSV is bench-kafka.sh's row: label, workload, events posted, events/s, the -pid's CPU µs
// and bytes allocated per posted event and peak RSS (MiB), the other processes' CPU µs per posted
// event, lag p50, p99 and max and the answer's p99 (ms), audit spans expected / arrived / lost,
// duplicate copies, HTTP answers, and after a pause the time from its end to drained (s) and the
// catch-up rate (audit spans/s); "-" where there is none.
func (r *result) tiersTSV() string {
	alloc, extra, drained, rate := "n/a", "-", "-", "-"
	if r.allocBytes >= 0 {
		alloc = fmt.Sprintf("%.0f", r.allocBytes/float64(r.events))
	}
	if r.extraProcs > 0 {
		extra = fmt.Sprintf("%.1f", r.extraCPU/float64(r.events)*1e6)
	}
	if c := r.catchUp; c != nil {
		drained = fmt.Sprintf("%.1f", c.drained.Seconds())
		rate = fmt.Sprintf("%.0f", c.rate(r.auditArrived))
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }
	lostAudit, _ := r.lost()
	return strings.Join([]string{
		r.label, r.workload, strconv.FormatInt(r.events, 10),
		fmt.Sprintf("%.0f", float64(r.events)/r.sendTime.Seconds()),
		fmt.Sprintf("%.1f", r.cpu/float64(r.events)*1e6), alloc, strconv.FormatInt(r.peakRSS/1024, 10),
		extra, ms(r.lag.p50), ms(r.lag.p99), ms(r.lag.max), ms(r.answer.p99),
		fmt.Sprintf("%d / %d / %d", r.auditExpected, r.auditArrived, lostAudit),
		strconv.FormatInt(r.duplicates, 10),
		r.statusText() + r.refusedArrivedText(),
		drained, rate,
	}, "\t")
}
