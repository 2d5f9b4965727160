package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kubetrail/kubetrail/internal/freeport"
	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/testbed/auditcapture"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseCPUCountsUserAndSystemTicks(t *testing.T) {
	// A command name with a space and a parenthesis, as /proc writes it.
	stat := "4242 (otelcol (x) y) S 1 4242 4242 0 -1 4194560 5000 0 0 0 1234 567 0 0 20 0 12 0 100 0 0"
	got, err := parseCPU(stat, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got != 18.01 {
		t.Errorf("parseCPU = %v, want 18.01 s ((1234 + 567) / 100)", got)
	}
	if _, err := parseCPU("4242 (x) S 1 2", 100); err == nil {
		t.Error("a truncated stat line parsed")
	}
}

func TestSumMetricAddsEverySeriesWithOrWithoutTotal(t *testing.T) {
	text := `# HELP otelcol_process_runtime_total_alloc_bytes x
otelcol_process_runtime_total_alloc_bytes_total{service_name="a"} 1.5e+06
otelcol_process_runtime_total_alloc_bytes_total{service_name="b"} 500000
otelcol_process_runtime_total_alloc_bytes_other 7
`
	if v, ok := sumMetric(text, "otelcol_process_runtime_total_alloc_bytes"); !ok || v != 2e6 {
		t.Errorf("sum = %v, %v; want 2e6, true", v, ok)
	}
	if _, ok := sumMetric(text, "otelcol_k8s_object_link_object_spans_emitted"); ok {
		t.Error("an absent metric was found")
	}
}

// fakeBehaviour is what fakeCollector does besides answering 200 and exporting.
type fakeBehaviour struct {
	refuseEvery   int  // answer every refuseEvery-th request 503
	exportRefused bool // and export its spans all the same, as k8s_object_link does with spans it holds
	dropFirst     bool // leave out the first traced event's span of the first accepted batch
	// hold: answer 200 at once but export nothing until the channel is closed, as an edge does
	// while no processing tier consumes
	hold <-chan struct{}
	// requests, when set, counts the requests received
	requests *atomic.Int64
	// answerAfter: wait this long before answering, as an edge waits for Kafka's ack
	answerAfter time.Duration
	// foreign: export spans of IDs of its own and no kubetrail span type, as Kelemetry does
	foreign bool
}

// fakeCollector answers every webhook request 200 (or 503, see fakeBehaviour) and exports, for each
// traced event of an accepted batch, an audit span with the receiver's span ID to the sink.
func fakeCollector(t *testing.T, sinkAddr string, fb fakeBehaviour) string {
	t.Helper()
	conn, err := grpc.NewClient(sinkAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	client := ptraceotlp.NewGRPCClient(conn)
	var (
		mu       sync.Mutex
		n        int
		dropped  bool
		released bool
		held     []ptrace.Traces
	)
	if fb.hold != nil {
		go func() {
			<-fb.hold
			mu.Lock()
			defer mu.Unlock()
			released = true
			for _, td := range held {
				if _, err := client.Export(context.Background(), ptraceotlp.NewExportRequestFromTraces(td)); err != nil {
					t.Errorf("export after the hold: %v", err)
				}
			}
			held = nil
		}()
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		time.Sleep(fb.answerAfter)
		if fb.requests != nil {
			fb.requests.Add(1)
		}
		mu.Lock()
		n++
		refuse := fb.refuseEvery > 0 && n%fb.refuseEvery == 0
		drop := fb.dropFirst && !refuse && !dropped
		dropped = dropped || drop
		mu.Unlock()
		if refuse && !fb.exportRefused {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var list auditcapture.EventList
		if err := json.Unmarshal(body, &list); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		td := ptrace.NewTraces()
		spans := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans()
		for i := range list.Items {
			if auditcapture.Traced(&list.Items[i]) {
				if drop {
					drop = false
					continue
				}
				sp := spans.AppendEmpty()
				if fb.foreign {
					var id pcommon.SpanID
					_, _ = rand.Read(id[:])
					sp.SetSpanID(id)
					continue
				}
				sp.SetSpanID(model.AuditSpanID(list.Items[i].AuditID))
				sp.Attributes().PutStr(model.AttrSpanType, model.SpanTypeAudit)
			}
		}
		if fb.hold != nil {
			mu.Lock()
			if !released {
				held = append(held, td)
				mu.Unlock()
				return
			}
			mu.Unlock()
		}
		if _, err := client.Export(r.Context(), ptraceotlp.NewExportRequestFromTraces(td)); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if refuse {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		conn.Close()
	})
	return fmt.Sprintf("http://%s/audit/bench", lis.Addr())
}

func freeAddr(t *testing.T) string {
	t.Helper()
	p, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", p)
}

// runCapture validates cfg, runs it and loads its capture, to compare what was sent with it.
func runCapture(t *testing.T, cfg config) (*result, *auditcapture.Capture) {
	t.Helper()
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	res, err := run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	capture, err := auditcapture.Load(false, cfg.capture...)
	if err != nil {
		t.Fatal(err)
	}
	return res, capture
}

func TestRunSendsEveryPassPipelinedAndCountsWhatArrives(t *testing.T) {
	for _, tc := range []struct {
		name     string
		workload auditcapture.Mode
		fb       fakeBehaviour
		conns    int
		// what the result must say of the audit spans
		lost, refusedArrived bool
	}{
		{name: "replay: every traced event of every pass arrives once", workload: auditcapture.Replay},
		{name: "fresh: every traced event of every pass arrives once", workload: auditcapture.Fresh},
		{name: "over three connections every request is answered and every traced event arrives once", workload: auditcapture.Fresh, conns: 3},
		{name: "over three connections a refused batch is still told apart", workload: auditcapture.Replay, fb: fakeBehaviour{refuseEvery: 3}, conns: 3},
		{name: "refused batches are not expected", workload: auditcapture.Replay, fb: fakeBehaviour{refuseEvery: 3}},
		{
			name:     "spans of refused batches that arrive anyway are counted apart, not as arrivals of accepted ones",
			workload: auditcapture.Replay, fb: fakeBehaviour{refuseEvery: 3, exportRefused: true}, refusedArrived: true,
		},
		{
			name:     "a span of an accepted batch that never arrives is lost, though refused spans arrive",
			workload: auditcapture.Replay, fb: fakeBehaviour{refuseEvery: 3, exportRefused: true, dropFirst: true},
			lost: true, refusedArrived: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sinkAddr := freeAddr(t)
			cfg := config{
				url: fakeCollector(t, sinkAddr, tc.fb), capture: []string{"../../fixtures/deployment"},
				passes: 4, mode: tc.workload, sink: sinkAddr, pid: os.Getpid(), clkTck: 100,
				quiet: 200 * time.Millisecond, drainTimeout: time.Minute, label: "fake",
				conns: max(tc.conns, 1), report: "audit",
			}
			if tc.lost {
				cfg.drainTimeout = 3 * time.Second // the missing span never comes
			}
			res, capture := runCapture(t, cfg)
			if res.batches != int64(4*len(capture.Batches)) || res.events != int64(4*capture.Events) {
				t.Errorf("sent %d requests of %d events; want 4 passes of %d requests, %d events", res.batches, res.events, len(capture.Batches), capture.Events)
			}
			if tc.workload == auditcapture.Replay && res.bytes != int64(4*capture.Bytes) {
				t.Errorf("replay sent %d bytes, want 4 × %d: a replay keeps the byte length", res.bytes, capture.Bytes)
			}
			if res.status["200"]+res.status["503"] != res.batches || (tc.fb.refuseEvery > 0) != (res.status["503"] > 0) {
				t.Errorf("answers %v for %d requests", res.status, res.batches)
			}
			lost, _ := res.lost()
			wantLost := int64(0)
			if tc.lost {
				wantLost = 1
			}
			if res.auditExpected == 0 || res.auditArrived != res.auditExpected-wantLost || lost != wantLost || res.duplicates != 0 || res.auditUnexpected != 0 {
				t.Errorf("audit spans expected %d, arrived %d, lost %d (want %d), unexpected %d, duplicates %d",
					res.auditExpected, res.auditArrived, lost, wantLost, res.auditUnexpected, res.duplicates)
			}
			if tc.refusedArrived != (res.auditRefusedArrived > 0) {
				t.Errorf("%d spans of refused batches arrived; want some: %v", res.auditRefusedArrived, tc.refusedArrived)
			}
			if res.lag.n != int(res.auditArrived) || res.lag.p50 <= 0 || res.lag.p50 > res.lag.p99 || res.lag.p99 > res.lag.max {
				t.Errorf("lag of %d spans (want %d): p50 %s, p99 %s, max %s", res.lag.n, res.auditArrived, res.lag.p50, res.lag.p99, res.lag.max)
			}
			if res.catchUp != nil || res.extraProcs != 0 {
				t.Errorf("a run without -pause-file or -extra-pids reports a catch-up (%v) or other processes (%d)", res.catchUp, res.extraProcs)
			}
		})
	}
}

// TestForeignSpansAreCountedNotExpected is a run against another tracer (bench-audit's
// KELEMETRY): its spans have IDs of their own, so none is expected, none is lost, and every one
// that arrives is counted and reported.
func TestForeignSpansAreCountedNotExpected(t *testing.T) {
	sinkAddr := freeAddr(t)
	cfg := config{
		url: fakeCollector(t, sinkAddr, fakeBehaviour{foreign: true}), capture: []string{"../../fixtures/deployment"},
		passes: 3, mode: auditcapture.Fresh, sink: sinkAddr, pid: os.Getpid(), clkTck: 100,
		quiet: 300 * time.Millisecond, drainTimeout: time.Minute, label: "kelemetry", conns: 1, report: "audit", foreign: true,
	}
	res, capture := runCapture(t, cfg)
	traced := int64(0)
	for _, b := range capture.Batches {
		var list auditcapture.EventList
		if err := json.Unmarshal(b.Body, &list); err != nil {
			t.Fatal(err)
		}
		for i := range list.Items {
			if auditcapture.Traced(&list.Items[i]) {
				traced++
			}
		}
	}
	lost, _ := res.lost()
	if res.auditExpected != 0 || lost != 0 || res.otherArrived != 3*traced || res.duplicates != 0 {
		t.Errorf("expected %d, lost %d, other spans %d (want %d), duplicates %d", res.auditExpected, lost, res.otherArrived, 3*traced, res.duplicates)
	}
	cols := strings.Split(res.tsv(), "\t")
	if want := fmt.Sprintf("n/a / %d spans / n/a", 3*traced); len(cols) != 14 || cols[10] != want || cols[11] != "n/a" {
		t.Errorf("row %q: want 14 columns, the 11th %q", cols, want)
	}
	var out strings.Builder
	res.print(&out)
	if !strings.Contains(out.String(), fmt.Sprintf("spans arrived %d (", 3*traced)) {
		t.Errorf("the report does not count the foreign spans:\n%s", out.String())
	}
	cfg.report = "tiers"
	if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "-foreign") {
		t.Errorf("-foreign with -report tiers: %v, want an error naming -foreign", err)
	}
}

// TestRunWaitsThroughThePauseAndTimesTheCatchUp is the outage of bench-kafka.sh: the edge answers
// every batch while nothing consumes; the run pauses on its file until the "processing tier" is
// started (here: the held spans are released after the file is removed), then drains and times
// the catch-up from the pause's end, with the processes named in -extra-pids-file counted.
func TestRunWaitsThroughThePauseAndTimesTheCatchUp(t *testing.T) {
	dir := t.TempDir()
	hold := make(chan struct{})
	sinkAddr := freeAddr(t)
	cfg := config{
		url: fakeCollector(t, sinkAddr, fakeBehaviour{hold: hold, answerAfter: 20 * time.Millisecond}), capture: []string{"../../fixtures/deployment"},
		passes: 3, mode: auditcapture.Fresh, sink: sinkAddr, pid: os.Getpid(), clkTck: 100,
		quiet: 200 * time.Millisecond, drainTimeout: time.Minute, label: "fake", conns: 2, report: "tiers",
		pauseFile: filepath.Join(dir, "pause"), extraFile: filepath.Join(dir, "pids"), spansFile: filepath.Join(dir, "spans"),
	}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	const outage = 300 * time.Millisecond
	go func() {
		for {
			if _, err := os.Stat(cfg.pauseFile); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		// The "processing tier": a process that exists (this test's parent), named in the file
		// before the pause ends; its spans come only after the pause's end.
		if err := os.WriteFile(cfg.extraFile, []byte(fmt.Sprintf("%d\n", os.Getppid())), 0o644); err != nil {
			t.Error(err)
		}
		time.Sleep(outage)
		if err := os.Remove(cfg.pauseFile); err != nil {
			t.Error(err)
		}
		time.Sleep(outage)
		close(hold)
	}()
	res, err := run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	lost, _ := res.lost()
	if res.auditExpected == 0 || lost != 0 || res.duplicates != 0 {
		t.Fatalf("audit spans expected %d, arrived %d, lost %d, duplicates %d", res.auditExpected, res.auditArrived, lost, res.duplicates)
	}
	c := res.catchUp
	if c == nil {
		t.Fatal("no catch-up after a pause")
	}
	// Nothing was released before the pause's end, and the pause lasted at least the outage.
	if c.paused < res.sendTime+outage || c.firstAudit <= 0 || c.lastAudit < c.firstAudit || c.drained < c.lastAudit {
		t.Errorf("sent in %s; pause ended at %s, first audit span %s after, last %s, drained %s", res.sendTime, c.paused, c.firstAudit, c.lastAudit, c.drained)
	}
	// Every span waited through the outage after its request was written.
	if res.lag.n != int(res.auditArrived) || res.lag.p50 < 2*outage || res.lag.max < res.lag.p99 {
		t.Errorf("lag of %d spans: p50 %s (want at least %s), p99 %s, max %s", res.lag.n, res.lag.p50, 2*outage, res.lag.p99, res.lag.max)
	}
	if res.extraProcs != 1 {
		t.Errorf("%d other processes counted, want the one of -extra-pids-file", res.extraProcs)
	}
	if _, err := os.Stat(cfg.pauseFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the pause file is back: %v", err)
	}
	if f := strings.Split(res.tsv(), "\t"); len(f) != 17 || f[15] == "-" || f[16] == "-" {
		t.Errorf("tiers row %q: want 17 columns with the catch-up's", f)
	}
	// Every answer was read before the pause began and every span arrived at least an outage
	// after the pause ended, so each lag passes its answer's share by the outage, and so do their
	// percentiles.
	// And no answer came before the edge's wait.
	if res.answer.n != res.lag.n || res.answer.p50 < 20*time.Millisecond || res.lag.p50-res.answer.p50 < outage || res.lag.max-res.answer.max < outage {
		t.Errorf("answers of %d spans: p50 %s, max %s; lags p50 %s, max %s: want the lags an outage past the answers",
			res.answer.n, res.answer.p50, res.answer.max, res.lag.p50, res.lag.max)
	}
	// A line per span, in the order sent; each answered after it was sent (the edge answered
	// at once) and arrived after the outage that followed the answers.
	raw, err := os.ReadFile(cfg.spansFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	if len(lines) != int(res.auditArrived) {
		t.Fatalf("%d lines in -spans-file, want one per arrived span (%d)", len(lines), res.auditArrived)
	}
	var last int64
	for i, line := range lines {
		var sent, answered, arrived int64
		if _, err := fmt.Sscanf(line, "%d\t%d\t%d", &sent, &answered, &arrived); err != nil {
			t.Fatalf("line %d %q: %v", i+1, line, err)
		}
		if sent < last || time.Duration(answered-sent) < 20*time.Millisecond || time.Duration(arrived-answered) < outage {
			t.Fatalf("line %d: sent %d (previous %d), answered %d, arrived %d: want sent in order, answered after the edge's wait, arrived an outage later",
				i+1, sent, last, answered, arrived)
		}
		last = sent
	}
}

// TestRunSendsNothingUntilTheReadyFileIsRemoved is the start of bench-kafka.sh's lag runs: the
// sink listens and the run waits on its file while the processing collectors start, and the
// processes named in -extra-pids-file then count from the first request on.
func TestRunSendsNothingUntilTheReadyFileIsRemoved(t *testing.T) {
	dir := t.TempDir()
	var requests atomic.Int64
	sinkAddr := freeAddr(t)
	cfg := config{
		url: fakeCollector(t, sinkAddr, fakeBehaviour{requests: &requests}), capture: []string{"../../fixtures/deployment"},
		passes: 2, mode: auditcapture.Fresh, sink: sinkAddr, pid: os.Getpid(), clkTck: 100,
		quiet: 200 * time.Millisecond, drainTimeout: time.Minute, label: "fake", conns: 2, report: "tiers",
		readyFile: filepath.Join(dir, "ready"), extraFile: filepath.Join(dir, "pids"),
	}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	var before int64
	go func() {
		for {
			if _, err := os.Stat(cfg.readyFile); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		// The sink listens by now: a client can export to it.
		conn, err := net.DialTimeout("tcp", sinkAddr, time.Second)
		if err != nil {
			t.Errorf("the sink does not listen during the wait: %v", err)
		} else {
			conn.Close()
		}
		if err := os.WriteFile(cfg.extraFile, []byte(fmt.Sprint(os.Getppid())), 0o644); err != nil {
			t.Error(err)
		}
		time.Sleep(200 * time.Millisecond)
		before = requests.Load()
		if err := os.Remove(cfg.readyFile); err != nil {
			t.Error(err)
		}
	}()
	res, err := run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if before != 0 {
		t.Errorf("%d requests were sent before the ready file was removed", before)
	}
	lost, _ := res.lost()
	if res.batches == 0 || requests.Load() != res.batches || lost != 0 || res.extraProcs != 1 || res.catchUp != nil {
		t.Errorf("%d requests received, %d answered, %d spans lost, %d other processes, catch-up %v", requests.Load(), res.batches, lost, res.extraProcs, res.catchUp)
	}
	if f := strings.Split(res.tsv(), "\t"); len(f) != 17 || f[7] == "-" || f[15] != "-" || f[16] != "-" {
		t.Errorf("tiers row %q: want 17 columns, the other processes' CPU and no catch-up", f)
	}
}

func TestRunRefusesALeftoverPauseFile(t *testing.T) {
	pauseFile := filepath.Join(t.TempDir(), "pause")
	if err := os.WriteFile(pauseFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := config{url: "http://127.0.0.1:1/audit/x", sink: "127.0.0.1:0", capture: []string{"../../fixtures/deployment"}, passes: 1,
		pid: os.Getpid(), conns: 1, report: "tiers", pauseFile: pauseFile}
	if _, err := run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "exists already") {
		t.Errorf("run with a leftover pause file: %v", err)
	}
}

func TestPauseEndsWhenTheFileIsRemovedOrTheContextEnds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pause")
	done := make(chan error, 1)
	go func() { done <- pause(context.Background(), path, time.Millisecond) }()
	for {
		if _, err := os.Stat(path); err == nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("pause ended with the file still there: %v", err)
	default:
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("pause after the removal: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- pause(ctx, path, time.Millisecond) }()
	for {
		if _, err := os.Stat(path); err == nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("pause after cancel: %v, want context.Canceled", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a cancelled pause left its file: %v", err)
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := pause(context.Background(), path, time.Millisecond); err == nil {
		t.Error("pause took over a file that was there before")
	}
}

func TestPercentileIsTheNearestRank(t *testing.T) {
	ms := func(vs ...int) []time.Duration {
		d := make([]time.Duration, len(vs))
		for i, v := range vs {
			d[i] = time.Duration(v) * time.Millisecond
		}
		return d
	}
	hundred, thousand := make([]int, 100), make([]int, 1000)
	for i := range thousand {
		thousand[i] = i + 1
	}
	copy(hundred, thousand)
	for _, tc := range []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"no values: zero", nil, 50, 0},
		{"one value is every percentile", ms(7), 99, 7 * time.Millisecond},
		{"p50 of 1..100 ms is 50 ms", ms(hundred...), 50, 50 * time.Millisecond},
		{"p99 of 1..100 ms is 99 ms, not 100", ms(hundred...), 99, 99 * time.Millisecond},
		{"p100 is the maximum", ms(hundred...), 100, 100 * time.Millisecond},
		{"p99.9 of 1..1000 ms is 999 ms, not the maximum", ms(thousand...), 99.9, 999 * time.Millisecond},
		{"p50 of four values is the second", ms(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{"p99 of ten values is the tenth", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 99, 10 * time.Millisecond},
		{"p90 of ten values is the ninth", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 90, 9 * time.Millisecond},
		{"a tiny percentile is the minimum", ms(3, 4, 5), 0.001, 3 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := percentile(tc.sorted, tc.p); got != tc.want {
				t.Errorf("percentile of %d values, p%v = %s, want %s", len(tc.sorted), tc.p, got, tc.want)
			}
		})
	}
}

func TestSummarizeSortsAndTakesTheMaximum(t *testing.T) {
	lags := []time.Duration{9, 1, 5, 3, 7, 2, 8, 4, 6, 10}
	got := summarize(lags)
	if got != (lagSummary{n: 10, p50: 5, p99: 10, max: 10}) {
		t.Errorf("summarize = %+v, want n 10, p50 5, p99 10, max 10", got)
	}
	if got := summarize(nil); got != (lagSummary{}) {
		t.Errorf("summarize(nil) = %+v, want zeros", got)
	}
}

func TestCatchUpRateIsSpansOverFirstToLastArrival(t *testing.T) {
	c := catchUpTime{firstAudit: 2 * time.Second, lastAudit: 12 * time.Second}
	if got := c.rate(5000); got != 500 {
		t.Errorf("rate = %v, want 500 spans/s (5000 over 10 s)", got)
	}
	if got := (&catchUpTime{firstAudit: time.Second, lastAudit: time.Second}).rate(1); got != 0 {
		t.Errorf("rate of one arrival = %v, want 0 (no interval)", got)
	}
}

func TestParsePIDsTakesCommasAndWhiteSpace(t *testing.T) {
	got, err := parsePIDs(" 12,34\n56\t78 ")
	if err != nil || !slices.Equal(got, []int{12, 34, 56, 78}) {
		t.Errorf("parsePIDs = %v, %v; want [12 34 56 78]", got, err)
	}
	if got, err := parsePIDs(""); err != nil || got != nil {
		t.Errorf("parsePIDs(\"\") = %v, %v; want none", got, err)
	}
	for _, bad := range []string{"0", "-3", "12,x", "1.5"} {
		if _, err := parsePIDs(bad); err == nil {
			t.Errorf("parsePIDs(%q) took it", bad)
		}
	}
}

func TestValidateNamesTheFlag(t *testing.T) {
	valid := func() config {
		return config{url: "http://127.0.0.1:9880/audit/x", sink: "127.0.0.1:4317", capture: []string{"c"}, passes: 1,
			pid: 42, conns: 1, report: "audit"}
	}
	for _, tc := range []struct {
		name   string
		change func(*config)
		want   string // in the error; "" for valid
	}{
		{"bench-audit's flags are valid", func(*config) {}, ""},
		{"the tiers report with everything is valid", func(c *config) {
			c.report, c.conns, c.extraPIDs, c.readyFile, c.pauseFile, c.extraFile = "tiers", 4, []int{7, 8}, "r", "p", "f"
		}, ""},
		{"a PID file read at the start is valid", func(c *config) { c.report, c.readyFile, c.extraFile = "tiers", "r", "f" }, ""},
		{"no connection", func(c *config) { c.conns = 0 }, "-conns"},
		{"a negative batch", func(c *config) { c.batch = -1 }, "-batch"},
		{"an unknown report", func(c *config) { c.report = "kafka" }, "-report"},
		{"other processes are not in the audit report", func(c *config) { c.extraPIDs = []int{7} }, "-report tiers"},
		{"a pause is not in the audit report", func(c *config) { c.pauseFile = "p" }, "-report tiers"},
		{"span times are not in the audit report", func(c *config) { c.spansFile = "s" }, "-report tiers"},
		{"the collector counted twice", func(c *config) { c.report, c.extraPIDs = "tiers", []int{7, 42} }, "-extra-pids"},
		{"a PID file without a wait", func(c *config) { c.report, c.extraFile = "tiers", "f" }, "-ready-file or -pause-file"},
		{"a start gate is not in the audit report", func(c *config) { c.readyFile = "r" }, "-report tiers"},
		{"one file for both waits", func(c *config) { c.report, c.readyFile, c.pauseFile = "tiers", "x", "x" }, "two files"},
		{"a remote target", func(c *config) { c.url = "http://10.0.0.1:9880/audit/x" }, "-url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := valid()
			tc.change(&c)
			err := c.validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("validate: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("validate = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// An object span emitted twice with its IDs arrives once plus a duplicate: not lost. One that
// never arrives is.
func TestLostObjectSpansLeaveOutTheirSecondEmissions(t *testing.T) {
	for _, c := range []struct {
		emitted          float64
		arrived, objDups int64
		want             string
	}{
		{1605, 1593, 12, "0"},
		{1605, 1593, 0, "12"},
		{1605, 1590, 12, "3"},
		{-1, 10, 0, "n/a"},
	} {
		r := result{objectsEmitted: c.emitted, objectsArrived: c.arrived, objectDuplicates: c.objDups, duplicates: c.objDups}
		if _, got := r.lost(); got != c.want {
			t.Errorf("emitted %v, arrived %d, duplicates %d: %s lost, want %s", c.emitted, c.arrived, c.objDups, got, c.want)
		}
	}
}
