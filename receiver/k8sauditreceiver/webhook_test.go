package k8sauditreceiver

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/golden"

	"github.com/kubetrail/kubetrail/internal/auditconv"
	"github.com/kubetrail/kubetrail/internal/auditconv/auditconvtest"
	"github.com/kubetrail/kubetrail/receiver/k8sauditreceiver/internal/metadata"
)

func eventList(ids ...string) string { return auditconvtest.EventList(ids...) }

// switchConsumer accepts into a sink, or refuses with err when set.
type switchConsumer struct {
	mu       sync.Mutex
	err      error
	n        int
	auditIDs []string
	refusals int
}

func (c *switchConsumer) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

func (c *switchConsumer) ConsumeTraces(_ context.Context, td ptrace.Traces) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		c.refusals++
		return c.err
	}
	c.n += td.SpanCount()
	for _, s := range auditconvtest.AllSpans(td) {
		v, _ := s.Attributes().Get("k8s.audit.id")
		c.auditIDs = append(c.auditIDs, v.Str())
	}
	return nil
}

func (c *switchConsumer) refuse(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
}

func (c *switchConsumer) ids() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.auditIDs)
}

func (c *switchConsumer) spans() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

type webhookEnv struct {
	url  string
	next *switchConsumer
	tel  *componenttest.Telemetry
}

func startWebhook(t *testing.T, mutate func(*Config)) *webhookEnv {
	t.Helper()
	next := &switchConsumer{}
	env := startWebhookWith(t, next, mutate)
	env.next = next
	return env
}

// startWebhookWith starts a webhook receiver feeding next.
func startWebhookWith(t *testing.T, next consumer.Traces, mutate func(*Config)) *webhookEnv {
	t.Helper()
	cfg := createDefaultConfig().(*Config)
	cfg.ServerConfig.NetAddr.Endpoint = "127.0.0.1:0"
	cfg.Cluster = "c1"
	cfg.ServerConfig.MaxRequestBodySize = 64 << 10
	if mutate != nil {
		mutate(cfg)
	}
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	set := receivertest.NewNopSettings(metadata.Type)
	set.TelemetrySettings = tel.NewTelemetrySettings()
	r, err := newTracesReceiver(set, cfg, next)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return &webhookEnv{url: "http://" + r.listenAddr().String(), tel: tel}
}

// counted returns the value of one of the receiver's counters for a reason.
func (e *webhookEnv) counted(t *testing.T, name, reason string) int64 {
	t.Helper()
	return auditconvtest.MetricSum(t, e.tel, name, reason)
}

func TestWebhookStatusCodes(t *testing.T) {
	tests := []struct {
		name       string
		method     string
		path       string
		body       string
		gzip       bool
		noCluster  bool
		refuse     error
		wantCode   int
		wantSpans  int
		retryAfter bool
		reason     string
	}{
		{name: "an EventList is answered 200 once the pipeline took its spans", method: "POST", path: "/audit", body: eventList("a", "b"), wantCode: 200, wantSpans: 2},
		{name: "a single Event is accepted too", method: "POST", path: "/audit/prod-eu-1", body: fmt.Sprintf(`{"kind":"Event","apiVersion":"audit.k8s.io/v1",%s`, strings.TrimPrefix(fmt.Sprintf(auditconvtest.OneCreate, "x"), "{")), wantCode: 200, wantSpans: 1},
		{name: "a gzip body is decompressed", method: "POST", path: "/audit", body: eventList("g"), gzip: true, wantCode: 200, wantSpans: 1},
		{name: "an EventList with nothing to trace is still accepted", method: "POST", path: "/audit", body: `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[]}`, wantCode: 200},
		{name: "malformed JSON is a 400", method: "POST", path: "/audit", body: `{"kind":"EventList",`, wantCode: 400, reason: reasonMalformedJSON},
		{name: "another apiVersion is a 400", method: "POST", path: "/audit", body: `{"kind":"EventList","apiVersion":"audit.k8s.io/v1beta1","items":[]}`, wantCode: 400, reason: reasonWrongKind},
		{name: "another kind is a 400", method: "POST", path: "/audit", body: `{"kind":"Pod","apiVersion":"audit.k8s.io/v1"}`, wantCode: 400, reason: reasonWrongKind},
		{name: "a body over max_request_body_size is a 413", method: "POST", path: "/audit", body: eventList(strings.Split(strings.Repeat("x,", 200), ",")...), wantCode: 413, reason: reasonTooLarge},
		{name: "GET is a 405", method: "GET", path: "/audit", wantCode: 405, reason: reasonMethod},
		{name: "an unknown path is a 404", method: "POST", path: "/events", body: eventList("a"), wantCode: 404, reason: reasonNotFound},
		{name: "a nested path is a 404", method: "POST", path: "/audit/a/b", body: eventList("a"), wantCode: 404, reason: reasonNotFound},
		{name: "/audit without a configured cluster is a 404", method: "POST", path: "/audit", noCluster: true, body: eventList("a"), wantCode: 404, reason: reasonNoCluster},
		{name: "/audit/{cluster} without a configured cluster works", method: "POST", path: "/audit/dev", noCluster: true, body: eventList("a"), wantCode: 200, wantSpans: 1},
		{name: "an unsafe cluster name in the path is a 404", method: "POST", path: "/audit/-bad-", body: eventList("a"), wantCode: 404, reason: reasonNotFound},
		{name: "a busy pipeline is a 503 with Retry-After", method: "POST", path: "/audit", body: eventList("a"), refuse: errors.New("data refused due to high memory usage"), wantCode: 503, retryAfter: true, reason: reasonPipelineBusy},
		{name: "a pipeline asking for 429 gets a 429 with Retry-After", method: "POST", path: "/audit", body: eventList("a"), refuse: consumererror.NewOTLPHTTPError(errors.New("slow down"), http.StatusTooManyRequests), wantCode: 429, retryAfter: true, reason: reasonPipelineBusy},
		{name: "a permanent refusal is a 500 without Retry-After", method: "POST", path: "/audit", body: eventList("a"), refuse: consumererror.NewPermanent(errors.New("bad data")), wantCode: 500, reason: reasonPipelineFailure},
		{name: "an unsupported Content-Encoding is a 400", method: "POST", path: "/audit", body: eventList("a"), wantCode: 400, reason: reasonBadEncoding},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := startWebhook(t, func(cfg *Config) {
				if tt.noCluster {
					cfg.Cluster = ""
				}
			})
			env.next.refuse(tt.refuse)
			var body io.Reader = strings.NewReader(tt.body)
			if tt.gzip {
				var buf bytes.Buffer
				zw := gzip.NewWriter(&buf)
				_, _ = zw.Write([]byte(tt.body))
				_ = zw.Close()
				body = &buf
			}
			req, err := http.NewRequest(tt.method, env.url+tt.path, body)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			if tt.gzip {
				req.Header.Set("Content-Encoding", "gzip")
			}
			if tt.reason == reasonBadEncoding {
				req.Header.Set("Content-Encoding", "br-unknown")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			msg, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != tt.wantCode {
				t.Fatalf("status = %d (%s), want %d", resp.StatusCode, msg, tt.wantCode)
			}
			if got := env.next.spans(); got != tt.wantSpans {
				t.Fatalf("the pipeline got %d spans by the time of the answer, want %d", got, tt.wantSpans)
			}
			if (resp.Header.Get("Retry-After") != "") != tt.retryAfter {
				t.Fatalf("Retry-After = %q, want present = %v", resp.Header.Get("Retry-After"), tt.retryAfter)
			}
			if tt.reason != "" {
				if n := env.counted(t, "otelcol_k8s_audit_rejected_requests", tt.reason); n != 1 {
					t.Fatalf("rejected requests with reason %q = %d, want 1", tt.reason, n)
				}
				if !strings.Contains(string(msg), `"kind":"Status"`) {
					t.Fatalf("an error is answered with a Status body, got %s", msg)
				}
			}
		})
	}
}

func TestWebhookCountsFilteredEvents(t *testing.T) {
	env := startWebhook(t, nil)
	lease := strings.Replace(fmt.Sprintf(auditconvtest.OneCreate, "l"), `"resource":"configmaps"`, `"resource":"leases","apiGroup":"coordination.k8s.io"`, 1)
	get := strings.Replace(fmt.Sprintf(auditconvtest.OneCreate, "g"), `"verb":"create"`, `"verb":"get"`, 1)
	body := `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` + lease + "," + get + "," + fmt.Sprintf(auditconvtest.OneCreate, "ok") + `]}`
	resp, err := http.Post(env.url+"/audit", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || env.next.spans() != 1 {
		t.Fatalf("status %d, spans %d", resp.StatusCode, env.next.spans())
	}
	if env.counted(t, "otelcol_k8s_audit_filtered_events", auditconv.ReasonExcludedResource) != 1 ||
		env.counted(t, "otelcol_k8s_audit_filtered_events", auditconv.ReasonReadVerb) != 1 {
		t.Fatal("filtered events must be counted by reason")
	}
	if _, err := env.tel.GetMetric("otelcol_receiver_accepted_spans"); err != nil {
		t.Fatalf("obsreport must count accepted spans: %v", err)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

func TestLifecycleStartStopTwice(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	cfg.ServerConfig.NetAddr.Endpoint = freePort(t)
	cfg.Cluster = "c1"
	cfg.Files = []string{t.TempDir() + "/audit.log"}
	f := NewFactory()
	// Without keep-alives: a pooled connection to the previous server would fail the POST.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for round := range 2 {
		// A new instance on the same endpoint proves the port is released; the same
		// instance restarted proves Shutdown leaves it startable.
		r, err := f.CreateTraces(context.Background(), receivertest.NewNopSettings(metadata.Type), cfg, &switchConsumer{})
		if err != nil {
			t.Fatal(err)
		}
		for restart := range 2 {
			if err := r.Start(context.Background(), componenttest.NewNopHost()); err != nil {
				t.Fatalf("round %d start %d: %v", round, restart, err)
			}
			resp, err := client.Post("http://"+cfg.ServerConfig.NetAddr.Endpoint+"/audit", "application/json", strings.NewReader(eventList("a")))
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if err := r.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	r, err := f.CreateTraces(context.Background(), receivertest.NewNopSettings(metadata.Type), cfg, &switchConsumer{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal("shutdown without start must be fine:", err)
	}
}

func TestStartFailsOnAMissingStorageExtension(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	cfg.ServerConfig.NetAddr.Endpoint = ""
	cfg.Cluster = "c1"
	cfg.Files = []string{t.TempDir() + "/audit.log"}
	id := component.MustNewID("file_storage")
	cfg.Storage = &id
	r, err := NewFactory().CreateTraces(context.Background(), receivertest.NewNopSettings(metadata.Type), cfg, &switchConsumer{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background(), componenttest.NewNopHost()); err == nil || !strings.Contains(err.Error(), "storage:") {
		t.Fatalf("start = %v, want an error naming storage", err)
	}
	_ = r.Shutdown(context.Background())
}

func TestConcurrentBatchesAreAllAccepted(t *testing.T) {
	env := startWebhook(t, func(cfg *Config) { cfg.ServerConfig.MaxRequestBodySize = 0 })
	bodies := fixtureBodies(t, "deployment")
	want, err := golden.ReadTraces(auditconvtest.GoldenPath("deployment"))
	if err != nil {
		t.Fatal(err)
	}
	const senders = 6
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for i := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, body := range bodies {
				resp, err := http.Post(fmt.Sprintf("%s/audit/cluster-%d", env.url, i), "application/json", bytes.NewReader(body))
				if err != nil {
					errs <- err
					return
				}
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					errs <- fmt.Errorf("sender %d: status %d", i, resp.StatusCode)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got, want := env.next.spans(), senders*want.SpanCount(); got != want {
		t.Fatalf("spans = %d, want %d", got, want)
	}
}

// newTracesReceiver is the receiver with only a traces output, next.
func newTracesReceiver(set receiver.Settings, cfg *Config, next consumer.Traces) (*auditReceiver, error) {
	r, err := newAuditReceiver(set, cfg)
	if err != nil {
		return nil, err
	}
	r.next = next
	return r, nil
}
