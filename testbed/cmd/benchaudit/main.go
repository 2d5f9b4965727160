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
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	_ "google.golang.org/grpc/encoding/gzip" // a config that keeps the exporter's default compression

	"github.com/kubetrail/kubetrail/testbed/auditcapture"
)

type config struct {
	url          string
	capture      []string
	passes       int
	events       int
	batch        int // events per webhook body, the capture's events regrouped; 0: as recorded
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
	foreign      bool    // not kubetrail (Kelemetry): every span counted, none expected by ID
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
	flag.IntVar(&cfg.batch, "batch", 0, "events per webhook body: the capture's events regrouped in order, as a busy apiserver fills its batches, a body never spanning two passes (0: the recorded bodies)")
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
	flag.BoolVar(&cfg.foreign, "foreign", false, "the collector is another tracer (Kelemetry): count every span that arrives, expect none by ID, drained once nothing arrived for -quiet (-report audit)")
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
	if c.batch < 0 {
		return fmt.Errorf("-batch %d: want 0 (the recorded bodies) or a number of events", c.batch)
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
		if c.foreign {
			return errors.New("-foreign is reported by -report audit only")
		}
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
