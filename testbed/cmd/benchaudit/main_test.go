package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

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
		mu      sync.Mutex
		n       int
		dropped bool
	)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
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
				sp.SetSpanID(model.AuditSpanID(list.Items[i].AuditID))
				sp.Attributes().PutStr(model.AttrSpanType, model.SpanTypeAudit)
			}
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
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestRunSendsEveryPassPipelinedAndCountsWhatArrives(t *testing.T) {
	for _, tc := range []struct {
		name     string
		workload auditcapture.Mode
		fb       fakeBehaviour
		// what the result must say of the audit spans
		lost, refusedArrived bool
	}{
		{name: "replay: every traced event of every pass arrives once", workload: auditcapture.Replay},
		{name: "fresh: every traced event of every pass arrives once", workload: auditcapture.Fresh},
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
			}
			if tc.lost {
				cfg.drainTimeout = 3 * time.Second // the missing span never comes
			}
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
		})
	}
}
