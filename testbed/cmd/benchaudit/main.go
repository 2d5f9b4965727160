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
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
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
	flag.Parse()

	var err error
	if cfg.mode, err = auditcapture.ParseMode(workload); err != nil {
		fail(2, err)
	}
	if capture != "" {
		cfg.capture = strings.Split(capture, ",")
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
	return nil
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
}

func run(ctx context.Context, cfg config) (*result, error) {
	capture, err := auditcapture.Load(false, cfg.capture...)
	if err != nil {
		return nil, err
	}
	if cfg.events > 0 {
		cfg.passes = max(1, (cfg.events+capture.Events-1)/capture.Events)
	}
	sink, err := startSink(cfg)
	if err != nil {
		return nil, err
	}
	defer sink.stop()

	res := &result{label: cfg.label, workload: cfg.mode.String(), capture: capture.Name, passes: cfg.passes,
		status: map[string]int64{}, allocBytes: -1, objectsEmitted: -1}
	alloc0, _ := scrape(cfg.metrics, "otelcol_process_runtime_total_alloc_bytes")

	u, _ := url.Parse(cfg.url)
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stopOnCancel := context.AfterFunc(ctx, func() { conn.Close() })
	defer stopOnCancel()

	var nonce [1]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, err
	}
	total := cfg.passes * len(capture.Batches)
	// Each request in order: its batch and the span IDs of the audit spans it should yield.
	type request struct {
		batch int
		spans []pcommon.SpanID
	}
	sent := make(chan request, total)
	writeErr := make(chan error, 1)

	cpu0, err := cpuSeconds(cfg.pid, cfg.clkTck)
	if err != nil {
		return nil, err
	}
	sink.watch(cfg.pid, cfg.clkTck)
	start := time.Now()
	go func() {
		defer close(sent)
		w := bufio.NewWriterSize(conn, 256<<10)
		var buf []byte
		var ids []string
		runStart := time.Now()
		events := 0 // sent so far, for -rate
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
				buf = capture.Batches[i].Render(buf[:0], vals)
				fmt.Fprintf(w, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", u.RequestURI(), u.Host, len(buf))
				if _, err := w.Write(buf); err != nil {
					writeErr <- err
					return
				}
				// Flush per request: a request must not wait in the sender's buffer for the next one.
				if err := w.Flush(); err != nil {
					writeErr <- err
					return
				}
				res.bytes += int64(len(buf))
				ids = capture.Batches[i].TracedAuditIDs(ids[:0], vals)
				spans := make([]pcommon.SpanID, len(ids))
				for j, id := range ids {
					spans[j] = model.AuditSpanID(id)
				}
				sent <- request{i, spans}
			}
		}
	}()

	br := bufio.NewReaderSize(conn, 64<<10)
	// Every audit span ID posted: true when its batch was answered 200.
	posted := make(map[pcommon.SpanID]bool, total)
	for r := range sent {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			select {
			case werr := <-writeErr:
				err = fmt.Errorf("%w (writing: %v)", err, werr)
			default:
			}
			return nil, fmt.Errorf("answer %d of %d: %w", res.batches+1, total, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		res.batches++
		res.events += int64(capture.Batches[r.batch].Events)
		res.status[strconv.Itoa(resp.StatusCode)]++
		for _, id := range r.spans {
			posted[id] = resp.StatusCode == http.StatusOK
		}
		if resp.StatusCode == http.StatusOK {
			res.auditExpected += int64(len(r.spans))
		}
	}
	select {
	case err := <-writeErr:
		return nil, err
	default:
	}
	res.sendTime = time.Since(start)

	// Drained: every expected audit span arrived and the sink has been quiet for a while (object
	// spans and spans held for owner_wait trail the answers); or quiet for long; or the timeout.
	deadline := time.Now().Add(cfg.drainTimeout)
	for {
		s := sink.snapshot()
		quiet := time.Since(s.last)
		if s.last.IsZero() {
			quiet = time.Since(start)
		}
		if (s.audit >= res.auditExpected && quiet >= cfg.quiet && sink.account(posted).missing == 0) || quiet >= max(5*cfg.quiet, 15*time.Second) || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	s := sink.snapshot()
	a := sink.account(posted)
	res.auditArrived, res.auditRefusedArrived, res.auditUnexpected = res.auditExpected-a.missing, a.refused, a.unexpected
	res.objectsArrived, res.otherArrived, res.duplicates = s.object, s.other, s.duplicates
	cpu1 := s.cpu
	if s.last.IsZero() {
		cpu1, _ = cpuSeconds(cfg.pid, cfg.clkTck)
		s.last = time.Now()
	}
	res.cpu = cpu1 - cpu0
	res.drainTime = s.last.Sub(start)
	res.peakRSS, _ = statusKiB(cfg.pid, "VmHWM")
	if alloc1, ok := scrape(cfg.metrics, "otelcol_process_runtime_total_alloc_bytes"); ok {
		res.allocBytes = alloc1 - alloc0
	}
	if v, ok := scrape(cfg.metrics, "otelcol_k8s_object_link_object_spans_emitted"); ok {
		res.objectsEmitted = v
	}
	return res, nil
}

// sink is the counting OTLP gRPC backend: distinct span IDs by span type, duplicates, and the
// collector's CPU time when the latest spans arrived.
type sink struct {
	ptraceotlp.UnimplementedGRPCServer
	srv *grpc.Server

	mu     sync.Mutex
	seen   map[pcommon.SpanID]struct{}
	audit  map[pcommon.SpanID]struct{} // the audit spans among them
	counts snapshot
	pid    int
	clkTck float64
}

type snapshot struct {
	audit, object, other, duplicates int64
	last                             time.Time
	cpu                              float64
}

func startSink(cfg config) (*sink, error) {
	lis, err := net.Listen("tcp", cfg.sink)
	if err != nil {
		return nil, fmt.Errorf("sink: %w", err)
	}
	s := &sink{srv: grpc.NewServer(grpc.MaxRecvMsgSize(64 << 20)), seen: map[pcommon.SpanID]struct{}{}, audit: map[pcommon.SpanID]struct{}{}}
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

func (s *sink) snapshot() snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts
}

// accounting compares the audit spans that arrived with those posted (true: answered 200).
type accounting struct {
	missing int64 // posted in a batch answered 200, not arrived: lost
	refused int64 // posted in a refused batch, arrived anyway: k8s_object_link keeps the spans it
	// holds for owner_wait whatever the next consumer answers (the apiserver's retry of the batch
	// then finds them marked), so a 503 does not take back every span of its batch
	unexpected int64 // arrived, never posted
}

func (s *sink) account(posted map[pcommon.SpanID]bool) accounting {
	s.mu.Lock()
	defer s.mu.Unlock()
	var a accounting
	for id, accepted := range posted {
		_, arrived := s.audit[id]
		switch {
		case accepted && !arrived:
			a.missing++
		case !accepted && arrived:
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

func (s *sink) Export(_ context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	rss := req.Traces().ResourceSpans()
	s.mu.Lock()
	defer s.mu.Unlock()
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
					s.audit[sp.SpanID()] = struct{}{}
				case model.SpanTypeObject:
					s.counts.object++
				default:
					s.counts.other++
				}
			}
		}
	}
	s.counts.last = time.Now()
	if s.pid > 0 {
		if cpu, err := cpuSeconds(s.pid, s.clkTck); err == nil {
			s.counts.cpu = cpu
		}
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
}

// tsv is the row bench-audit.sh turns into its table; the columns are its header's.
func (r *result) tsv() string {
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
