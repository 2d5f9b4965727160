//go:build dist

package distribution_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // the exporter's default compression
	"sigs.k8s.io/yaml"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/testbed/auditcapture"
)

// countingSink is an OTLP gRPC trace backend that remembers every span it received (and its
// parent), so a test can ask whether a given span and its ancestors arrived.
type countingSink struct {
	ptraceotlp.UnimplementedGRPCServer
	mu      sync.Mutex
	parents map[pcommon.SpanID]pcommon.SpanID
	copies  int
}

func (s *countingSink) Export(_ context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rss := req.Traces().ResourceSpans()
	for i := range rss.Len() {
		sss := rss.At(i).ScopeSpans()
		for j := range sss.Len() {
			spans := sss.At(j).Spans()
			for k := range spans.Len() {
				sp := spans.At(k)
				if _, dup := s.parents[sp.SpanID()]; dup {
					s.copies++
				}
				s.parents[sp.SpanID()] = sp.ParentSpanID()
			}
		}
	}
	return ptraceotlp.NewExportResponse(), nil
}

// missing returns how many of want have not arrived, and how many arrived spans name a parent
// that has not: an acknowledged span is only delivered with the object spans it hangs under.
func (s *countingSink) missing(want map[pcommon.SpanID]string) (spans, parents int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range want {
		if _, ok := s.parents[id]; !ok {
			spans++
		}
	}
	for _, parent := range s.parents {
		if _, ok := s.parents[parent]; !parent.IsEmpty() && !ok {
			parents++
		}
	}
	return spans, parents
}

// outageConfig is the in-cluster config of the Kubernetes manifests, reshaped to run on loopback
// without a cluster: the audit webhook alone, over plain HTTP (no Events list-watch), the in-memory ID map (no
// Redis, no owner lookups), state in dir, the exporter pointed at sink. The exporter keeps the
// shipped shape — its queue, storage, batching, overflow and retry settings — with smaller sizes,
// so that a few recorded captures fill its queue, and shorter retry intervals.
func outageConfig(t *testing.T, dir string, auditPort, healthPort, sinkPort int) string {
	t.Helper()
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(clusterConfig(t)), &cfg); err != nil {
		t.Fatal(err)
	}
	section := func(m map[string]any, keys ...string) map[string]any {
		for _, k := range keys {
			next, ok := m[k].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[k] = next
			}
			m = next
		}
		return m
	}
	section(cfg, "extensions", "health_check")["endpoint"] = fmt.Sprintf("127.0.0.1:%d", healthPort)
	for name, ext := range section(cfg, "extensions") {
		if e, ok := ext.(map[string]any); ok && e["directory"] != nil {
			sub := filepath.Join(dir, strings.ReplaceAll(name, "/", "_"))
			e["directory"] = sub
			if c, ok := e["compaction"].(map[string]any); ok {
				c["directory"] = sub
			}
		}
	}
	receivers := section(cfg, "receivers")
	delete(receivers, "k8s_event_spans")
	audit := section(receivers, "k8s_audit")
	audit["endpoint"] = fmt.Sprintf("127.0.0.1:%d", auditPort)
	// Plain HTTP on loopback: this test is about the queue; tls_test.go proves the manifest's
	// authentication (TLS, client CA, allowed_client_names) through the same binary.
	delete(audit, "tls")
	delete(audit, "allowed_client_names")
	link := section(cfg, "processors", "k8s_object_link")
	delete(link, "id_map")
	delete(link, "owner_lookup")

	otlp := section(cfg, "exporters", "otlp_grpc")
	otlp["endpoint"] = fmt.Sprintf("127.0.0.1:%d", sinkPort)
	queue := section(otlp, "sending_queue")
	switch queue["sizer"] {
	case "bytes":
		queue["queue_size"] = 1 << 20
	case "items":
		queue["queue_size"] = 500
	default: // requests, the exporter's default
		queue["queue_size"] = 4
	}
	if batch, ok := queue["batch"].(map[string]any); ok && batch["sizer"] == "bytes" {
		batch["min_size"], batch["max_size"] = 16<<10, 64<<10
	}
	retry := section(otlp, "retry_on_failure")
	retry["initial_interval"], retry["max_interval"] = "100ms", "1s"

	section(cfg, "service", "pipelines", "traces")["receivers"] = []any{"k8s_audit"}
	section(cfg, "service", "telemetry", "metrics")["level"] = "none"
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// startCollector runs the binary on config (YAML text) until the test ends.
func startCollector(t *testing.T, config string, healthPort int, env ...string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	startCollectorFile(t, path, healthPort, env...)
}

// startCollectorFile runs the binary on a config file until the test ends and waits until its
// health_check extension on healthPort answers.
func startCollectorFile(t *testing.T, path string, healthPort int, env ...string) {
	t.Helper()
	c := launch(t, path, env...)
	t.Cleanup(func() {
		c.stop()
		if t.Failed() {
			config, _ := os.ReadFile(path)
			t.Logf("collector config:\n%s\ncollector log:\n%s", config, c.logs.String())
		}
	})
	waitHealthy(t, c, healthPort)
}

// waitHealthy waits up to 30 s until the health_check extension of c on healthPort answers 200.
func waitHealthy(t *testing.T, c *launched, healthPort int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", healthPort))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if gone, err := c.exitedEarly(); gone {
			t.Fatalf("the collector exited: %v\n%s", err, c.logs.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("the collector did not become healthy: %v\n%s", err, c.logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// posted is one webhook batch and the audit spans it should yield.
type posted struct {
	body  []byte
	spans map[pcommon.SpanID]string // audit span ID -> auditID
}

// TestWebhook200IsAPromiseWhileTheBackendIsDown runs the shipped in-cluster pipeline shape with its
// OTLP backend down: the webhook must either refuse a batch with a code the apiserver retries
// (429/503 with Retry-After) or, having answered 200, deliver every span of it — and the object
// spans those hang under — once the backend is up. The batches it refused are then redelivered,
// as the apiserver does, and must arrive too.
func TestWebhook200IsAPromiseWhileTheBackendIsDown(t *testing.T) {
	requireBinary(t)
	dirs, err := filepath.Glob(filepath.Join(root, "testbed", "fixtures", "*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no recorded captures: %v", err)
	}
	capture, err := auditcapture.Load(false, dirs...)
	if err != nil {
		t.Fatal(err)
	}

	auditPort, healthPort, sinkPort := freePort(t), freePort(t), freePort(t)
	startCollector(t, outageConfig(t, t.TempDir(), auditPort, healthPort, sinkPort), healthPort,
		"KUBETRAIL_CLUSTER=outage", "POD_IP=127.0.0.1", "OTLP_ENDPOINT=unused")

	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	post := func(body []byte) (int, string) {
		resp, err := client.Post(fmt.Sprintf("http://127.0.0.1:%d/audit/outage", auditPort), "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Retry-After")
	}

	// Backend down: every scenario again and again, each pass with new auditIDs (replay copies:
	// the same objects, so after the first pass their spans go straight to the exporter rather
	// than wait owner_wait in the processor), until the exporter's queue has refused a few batches.
	var acked, refused []posted
	now := time.Now()
	for n := uint64(0); n < 40 && len(refused) < 5; n++ {
		for _, p := range pass(t, capture, 0x0d, n, now) {
			switch code, retryAfter := post(p.body); code {
			case http.StatusOK:
				acked = append(acked, p)
			case http.StatusServiceUnavailable, http.StatusTooManyRequests:
				if retryAfter == "" {
					t.Errorf("a refusal (%d) without Retry-After", code)
				}
				refused = append(refused, p)
			default:
				t.Fatalf("a batch answered %d with the backend down: neither accepted nor retryable", code)
			}
		}
	}
	t.Logf("backend down: %d batches answered 200, %d refused with a retryable code", len(acked), len(refused))
	if len(acked) == 0 {
		t.Fatal("no batch was accepted with the backend down: the queue cannot hold anything")
	}
	if len(refused) == 0 {
		t.Error("no batch was refused with the backend down: something accepts spans it cannot keep")
	}

	// Backend up.
	sink := startSink(t, sinkPort)
	want := map[pcommon.SpanID]string{}
	for _, p := range acked {
		for id, auditID := range p.spans {
			want[id] = auditID
		}
	}
	// The apiserver redelivers what was refused, with backoff, until it is taken.
	for _, p := range refused {
		for deadline := time.Now().Add(90 * time.Second); ; {
			code, _ := post(p.body)
			if code == http.StatusOK {
				break
			}
			if code != http.StatusServiceUnavailable && code != http.StatusTooManyRequests {
				t.Fatalf("a redelivered batch answered %d", code)
			}
			if time.Now().After(deadline) {
				t.Fatalf("a redelivered batch was still refused (%d) 90 s after the backend came back", code)
			}
			time.Sleep(500 * time.Millisecond)
		}
		for id, auditID := range p.spans {
			want[id] = auditID
		}
	}

	sink.requireDelivered(t, want)
}

// pass renders every batch of one pass over capture (copy n of the replay workload, auditIDs
// tagged with nonce) and the audit spans each batch should yield.
func pass(t *testing.T, capture *auditcapture.Capture, nonce byte, n uint64, now time.Time) []posted {
	t.Helper()
	vals := capture.Values(auditcapture.CopyTag{Nonce: nonce, N: n}, now, auditcapture.Replay)
	out := make([]posted, 0, len(capture.Batches))
	for i := range capture.Batches {
		p := posted{body: capture.Batches[i].Render(nil, vals), spans: map[pcommon.SpanID]string{}}
		var list auditcapture.EventList
		if err := json.Unmarshal(p.body, &list); err != nil {
			t.Fatal(err)
		}
		for j := range list.Items {
			if ev := &list.Items[j]; auditcapture.Traced(ev) {
				p.spans[model.AuditSpanID(ev.AuditID)] = ev.AuditID
			}
		}
		out = append(out, p)
	}
	return out
}

// startSink serves a countingSink on port until the test ends.
func startSink(t *testing.T, port int) *countingSink {
	t.Helper()
	lis, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	sink := &countingSink{parents: map[pcommon.SpanID]pcommon.SpanID{}}
	srv := grpc.NewServer()
	ptraceotlp.RegisterGRPCServer(srv, sink)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return sink
}

// requireDelivered waits (bounded: the exporter retries every second at most, held spans leave
// after owner_wait) until every span of want and every parent of an arrived span has arrived.
func (s *countingSink) requireDelivered(t *testing.T, want map[pcommon.SpanID]string) {
	t.Helper()
	var spans, parents int
	for deadline := time.Now().Add(90 * time.Second); ; {
		spans, parents = s.missing(want)
		if spans == 0 && parents == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if spans != 0 {
		t.Errorf("%d of the %d audit spans of acknowledged batches never reached the backend", spans, len(want))
	}
	if parents != 0 {
		t.Errorf("%d spans reached the backend without the object span they hang under", parents)
	}
	s.mu.Lock()
	t.Logf("backend received %d distinct spans (%d audit spans expected), %d duplicate copies", len(s.parents), len(want), s.copies)
	s.mu.Unlock()
}

// TestPersistentQueueSurvivesARestartWhileTheBackendIsDown acknowledges batches with the backend
// down, stops the collector (SIGTERM, as a rolling update or a rescheduled pod does) before a single
// span could leave, and starts it again on the same state directory with the backend up: every
// acknowledged span must arrive, from the exporter's persistent queue, with its object spans.
func TestPersistentQueueSurvivesARestartWhileTheBackendIsDown(t *testing.T) {
	requireBinary(t)
	dirs, err := filepath.Glob(filepath.Join(root, "testbed", "fixtures", "*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no recorded captures: %v", err)
	}
	capture, err := auditcapture.Load(false, dirs...)
	if err != nil {
		t.Fatal(err)
	}
	auditPort, healthPort, sinkPort := freePort(t), freePort(t), freePort(t)
	state := t.TempDir()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(outageConfig(t, state, auditPort, healthPort, sinkPort)), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"KUBETRAIL_CLUSTER=outage", "POD_IP=127.0.0.1", "OTLP_ENDPOINT=unused"}
	run := func() *launched {
		c := launch(t, path, env...)
		t.Cleanup(func() {
			c.stop()
			if t.Failed() {
				t.Logf("collector log:\n%s", c.logs.String())
			}
		})
		waitHealthy(t, c, healthPort)
		return c
	}

	first := run()
	client := &http.Client{Timeout: 30 * time.Second}
	want := map[pcommon.SpanID]string{}
	for _, p := range pass(t, capture, 0x0e, 0, time.Now()) {
		resp, err := client.Post(fmt.Sprintf("http://127.0.0.1:%d/audit/restart", auditPort), "application/json", bytes.NewReader(p.body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			continue // refused with a retryable code: the apiserver keeps it, this test does not count it
		}
		for id, auditID := range p.spans {
			want[id] = auditID
		}
	}
	if len(want) == 0 {
		t.Fatal("no batch was accepted with the backend down")
	}
	if !first.stop() {
		t.Fatalf("the collector did not stop within 30 s of SIGTERM with the backend down:\n%s", first.logs.String())
	}
	t.Logf("stopped with %d acknowledged audit spans and the backend down", len(want))

	sink := startSink(t, sinkPort)
	run()
	sink.requireDelivered(t, want)
}
