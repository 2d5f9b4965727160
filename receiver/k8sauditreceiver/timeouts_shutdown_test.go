package k8sauditreceiver

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/kubetrail/kubetrail/receiver/k8sauditreceiver/internal/metadata"
)

// guard bounds how long a test waits for something that must happen; it is a hang guard, never
// what decides a pass: the assertions are about what the connection says, not when.
const guard = 10 * time.Second

// idleTimeoutOf is the keep-alive idle timeout confighttp will apply: the keepalive section's,
// or none (net/http then falls back to the read timeout) when the section is unset.
func idleTimeoutOf(cfg *Config) time.Duration {
	if ka := cfg.ServerConfig.Keepalive.Get(); ka != nil {
		return ka.IdleTimeout
	}
	return 0
}

func TestDefaultConfigBoundsEveryRead(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	sc := cfg.ServerConfig
	if sc.ReadHeaderTimeout != 10*time.Second {
		t.Errorf("read_header_timeout = %s, want 10s", sc.ReadHeaderTimeout)
	}
	if sc.ReadTimeout != time.Minute {
		t.Errorf("read_timeout = %s, want 1m: without it a slow body holds a connection forever", sc.ReadTimeout)
	}
	if sc.WriteTimeout != 2*time.Minute {
		t.Errorf("write_timeout = %s, want 2m: past read_timeout, or the 400 of a body cut there is never written", sc.WriteTimeout)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("the defaults do not validate: %v", err)
	}
	if got := idleTimeoutOf(cfg); got != 2*time.Minute {
		t.Errorf("idle timeout = %s, want 2m (longer than the apiserver client's 90s)", got)
	}
}

// dialAndSend opens a raw connection to the webhook and writes the headers of a POST whose
// body is declared far longer than what is then sent.
func dialAndSend(t *testing.T, url string, declared int, body string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", url[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	req := "POST /audit HTTP/1.1\r\nHost: kubetrail\r\nContent-Type: application/json\r\n" +
		"Content-Length: " + strconv.Itoa(declared) + "\r\n\r\n" + body
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	return conn
}

// readUntilClosed reads what the server answers until it closes the connection, and returns
// the answer's status code (0 when it closed without answering). It fails the test if the
// connection is still open after the guard.
func readUntilClosed(t *testing.T, conn net.Conn) int {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(guard)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	code := 0
	if resp, err := http.ReadResponse(br, nil); err == nil {
		code = resp.StatusCode
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	} else if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		t.Fatal("the server neither answered nor closed the connection")
	}
	_, err := br.ReadByte()
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		t.Fatalf("the server answered %d but kept the connection open", code)
	}
	if err == nil {
		t.Fatalf("the server sent more than one answer (status %d first)", code)
	}
	return code
}

func TestASlowBodyIsCutAtTheReadTimeout(t *testing.T) {
	env := startWebhook(t, func(cfg *Config) { cfg.ServerConfig.ReadTimeout = 300 * time.Millisecond })
	conn := dialAndSend(t, env.url, 1<<20, `{"kind":"EventList",`)
	// Dribble a byte every 50 ms: each byte arrives well within any per-read deadline, so only
	// a bound on the whole request can end it.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	code := readUntilClosed(t, conn)
	t.Logf("answered %d, then closed", code)
	close(stop)
	<-done
	if code >= 200 && code < 300 {
		t.Fatalf("a body cut at the read timeout was answered %d", code)
	}
	if n := env.next.spans(); n != 0 {
		t.Fatalf("%d spans from a body that never arrived", n)
	}
}

// TestASlowBodyGetsItsDocumented400: a body still arriving at read_timeout is answered 400
// (reading the body: … i/o timeout) before the connection is closed: the write deadline, set
// with the request's headers, is past the read deadline, as validation requires. With
// confighttp's write_timeout (30 s) under the 1-minute read_timeout the client got no answer.
// Both defaults are scaled down alike, from a minute to a second and a half.
func TestASlowBodyGetsItsDocumented400(t *testing.T) {
	const readTimeout = 1500 * time.Millisecond
	defaults := createDefaultConfig().(*Config).ServerConfig
	scale := float64(readTimeout) / float64(defaults.ReadTimeout)
	env := startWebhook(t, func(cfg *Config) {
		cfg.ServerConfig.ReadTimeout = readTimeout
		cfg.ServerConfig.WriteTimeout = time.Duration(float64(defaults.WriteTimeout) * scale)
	})
	conn := dialAndSend(t, env.url, 32<<10, `{"kind":"EventList",`)
	go func() {
		for range 2 * readTimeout / (100 * time.Millisecond) {
			time.Sleep(100 * time.Millisecond)
			if _, err := conn.Write([]byte(" ")); err != nil {
				return
			}
		}
	}()
	if err := conn.SetReadDeadline(time.Now().Add(guard)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer before the connection ended: %v", err)
	}
	msg, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(msg), "i/o timeout") || !strings.Contains(string(msg), `"kind":"Status"`) {
		t.Fatalf("status %d (%s), want 400 with a Status naming the timeout", resp.StatusCode, msg)
	}
	if n := env.counted(t, "otelcol_k8s_audit_rejected_requests", reasonReadError); n != 1 {
		t.Fatalf("rejected read_error = %d, want 1", n)
	}
}

// holdingConsumer holds every batch until released, or until the request's context ends.
type holdingConsumer struct {
	arrived chan struct{}
	release chan struct{}
	spans   atomic.Int64
}

func newHoldingConsumer() *holdingConsumer {
	return &holdingConsumer{arrived: make(chan struct{}, 16), release: make(chan struct{})}
}

func (c *holdingConsumer) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

func (c *holdingConsumer) ConsumeTraces(ctx context.Context, td ptrace.Traces) error {
	c.arrived <- struct{}{}
	select {
	case <-c.release:
		c.spans.Add(int64(td.SpanCount()))
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startReceiver starts a webhook-only receiver on a free port and returns it, for tests that
// shut it down themselves or look inside.
func startReceiver(t *testing.T, next consumer.Traces, mutate func(*Config)) (*auditReceiver, string, *componenttest.Telemetry) {
	t.Helper()
	r, url, tel, _ := startObservedReceiver(t, next, mutate)
	return r, url, tel
}

// startObservedReceiver is startReceiver with the receiver's logs kept for inspection.
func startObservedReceiver(t *testing.T, next consumer.Traces, mutate func(*Config)) (*auditReceiver, string, *componenttest.Telemetry, *observer.ObservedLogs) {
	t.Helper()
	cfg := createDefaultConfig().(*Config)
	cfg.ServerConfig.NetAddr.Endpoint = "127.0.0.1:0"
	cfg.Cluster = "c1"
	if mutate != nil {
		mutate(cfg)
	}
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	set := receivertest.NewNopSettings(metadata.Type)
	set.TelemetrySettings = tel.NewTelemetrySettings()
	core, logs := observer.New(zap.InfoLevel)
	set.Logger = zap.New(core)
	r, err := newTracesReceiver(set, cfg, next)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Shutdown(context.Background()) })
	return r, "http://" + r.listenAddr().String(), tel, logs
}

// awaitInFlight waits until the webhook is serving n requests.
func awaitInFlight(t *testing.T, r *auditReceiver, n int) {
	t.Helper()
	for start := time.Now(); r.inFlightRequests() != n; time.Sleep(5 * time.Millisecond) {
		if time.Since(start) > guard {
			t.Fatalf("in-flight requests = %d, want %d", r.inFlightRequests(), n)
		}
	}
}

// shutdownAsync runs Shutdown and returns its result on a channel.
func shutdownAsync(ctx context.Context, r *auditReceiver) <-chan error {
	done := make(chan error, 1)
	go func() { done <- r.Shutdown(ctx) }()
	return done
}

func awaitShutdown(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("shutdown: %v", err)
		}
	case <-time.After(guard):
		t.Fatal("shutdown did not return")
	}
}

func TestShutdownEndsAHeldBodyWithinItsContext(t *testing.T) {
	r, url, _, logs := startObservedReceiver(t, &switchConsumer{}, nil)
	// Headers and the start of a body, then nothing: the client holds the request open.
	conn := dialAndSend(t, url, 4096, `{"kind":"EventList","apiVersion":"audit.k8s.io/v1",`)
	awaitInFlight(t, r, 1)

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := shutdownAsync(ctx, r)
	if code := readUntilClosed(t, conn); code != http.StatusServiceUnavailable {
		t.Fatalf("held request answered %d, want 503 so that the apiserver sends the batch again", code)
	}
	awaitShutdown(t, done)
	warned := logs.FilterMessageSnippet("shutdown time is over").All()
	if len(warned) != 1 || warned[0].Level != zap.WarnLevel || warned[0].ContextMap()["requests_cut"] != int64(1) {
		t.Fatalf("want one warning counting the cut request, got %v", warned)
	}
}

func TestShutdownWithoutADeadlineIsStillBounded(t *testing.T) {
	// The collector shuts its components down with a context that has no deadline.
	r, url, _ := startReceiver(t, &switchConsumer{}, nil)
	r.shutdownBudget = 300 * time.Millisecond
	conn := dialAndSend(t, url, 4096, `{"kind":"EventList",`)
	awaitInFlight(t, r, 1)
	done := shutdownAsync(context.Background(), r)
	if code := readUntilClosed(t, conn); code != http.StatusServiceUnavailable {
		t.Fatalf("held request answered %d, want 503", code)
	}
	awaitShutdown(t, done)
}

func TestShutdownLetsARequestInThePipelineComplete(t *testing.T) {
	next := newHoldingConsumer()
	r, url, _, logs := startObservedReceiver(t, next, nil)
	resp := postAsync(url, eventList("a1"))
	<-next.arrived
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	done := shutdownAsync(ctx, r)
	close(next.release)
	if code := <-resp; code != http.StatusOK {
		t.Fatalf("a request the pipeline took during shutdown answered %d, want 200", code)
	}
	awaitShutdown(t, done)
	if n := next.spans.Load(); n != 1 {
		t.Fatalf("spans = %d, want 1", n)
	}
	if n := logs.FilterMessageSnippet("shutdown time is over").Len(); n != 0 {
		t.Fatal("a shutdown that drained in time must not warn")
	}
}

func TestShutdownAnswers503ToARequestStuckInThePipeline(t *testing.T) {
	next := newHoldingConsumer() // never released
	r, url, _ := startReceiver(t, next, nil)
	resp := postAsync(url, eventList("a1"))
	<-next.arrived
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := shutdownAsync(ctx, r)
	if code := <-resp; code != http.StatusServiceUnavailable {
		t.Fatalf("a request still in the pipeline at the deadline answered %d, want 503", code)
	}
	awaitShutdown(t, done)
}

// postAsync posts body to the webhook in the background; the channel gets the status code, or 0
// when the request failed.
func postAsync(url, body string) <-chan int {
	resp := make(chan int, 1)
	go func() {
		res, err := (&http.Client{Timeout: guard}).Post(url+"/audit", "application/json", strings.NewReader(body))
		if err != nil {
			resp <- 0
			return
		}
		_ = res.Body.Close()
		resp <- res.StatusCode
	}()
	return resp
}
