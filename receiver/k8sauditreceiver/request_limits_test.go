package k8sauditreceiver

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kubetrail/kubetrail/internal/auditconv/auditconvtest"
)

// tinyItems is an EventList of n items of two bytes each ({} and a comma).
func tinyItems(n int) string {
	return `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` + strings.TrimSuffix(strings.Repeat("{},", n), ",") + `]}`
}

// postBody posts body to /audit and returns the status code and the answer.
func postBody(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := (&http.Client{Timeout: guard}).Post(url+"/audit", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, string(msg)
}

// TestAMillionTinyItemsAreRefusedEarly: 3 MB of {} items is a million events, each a whole
// Event once decoded. The body is refused with 413 at the item past max_events_per_request,
// without decoding the rest: what the request allocates stays near the body's size (the
// million items cost 2 GB decoded).
func TestAMillionTinyItemsAreRefusedEarly(t *testing.T) {
	body := tinyItems(1_000_000)
	env := startWebhook(t, func(cfg *Config) { cfg.ServerConfig.MaxRequestBodySize = 4 << 20 })

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	code, msg := postBody(t, env.url, body)
	runtime.ReadMemStats(&after)

	if code != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d (%.200s), want 413", code, msg)
	}
	if !strings.Contains(msg, `"kind":"Status"`) || !strings.Contains(msg, "max_events_per_request") {
		t.Fatalf("the answer must be a Status naming max_events_per_request, got %s", msg)
	}
	if n := env.counted(t, "otelcol_k8s_audit_rejected_requests", reasonTooManyEvents); n != 1 {
		t.Fatalf("rejected too_many_events = %d, want 1", n)
	}
	// Everything the process allocated during the request, client and server: the body read
	// (some 3 MB, a few times over while its buffer grows) and 10,000 decoded events (some
	// 20 MB with the slice's growth). Decoding the million items allocates 2 GB.
	const bound = 100 << 20
	t.Logf("the request allocated %d KB", (after.TotalAlloc-before.TotalAlloc)>>10)
	if grown := after.TotalAlloc - before.TotalAlloc; grown > bound {
		t.Fatalf("the request allocated %d MB, bound %d MB: the decoder did not stop at the limit", grown>>20, bound>>20)
	}
	if n := env.next.spans(); n != 0 {
		t.Fatalf("%d spans from a refused body", n)
	}
}

// TestMaxEventsPerRequestIsTheLastAccepted: a body of exactly max_events_per_request events (the
// default, 10,000 real ones) is accepted whole; one more event is a 413.
func TestMaxEventsPerRequestIsTheLastAccepted(t *testing.T) {
	env := startWebhook(t, func(cfg *Config) { cfg.ServerConfig.MaxRequestBodySize = 16 << 20 })
	ids := make([]string, defaultMaxEventsPerRequest+1)
	for i := range ids {
		ids[i] = fmt.Sprintf("ev-%05d", i)
	}
	if code, msg := postBody(t, env.url, eventList(ids[:defaultMaxEventsPerRequest]...)); code != http.StatusOK {
		t.Fatalf("%d events: status %d (%.200s), want 200", defaultMaxEventsPerRequest, code, msg)
	}
	if n := env.next.spans(); n != defaultMaxEventsPerRequest {
		t.Fatalf("spans = %d, want %d", n, defaultMaxEventsPerRequest)
	}
	if code, msg := postBody(t, env.url, eventList(ids...)); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("%d events: status %d (%.200s), want 413", len(ids), code, msg)
	}
	if n := env.next.spans(); n != defaultMaxEventsPerRequest {
		t.Fatalf("spans = %d after the refused body, want %d: nothing of it goes on", n, defaultMaxEventsPerRequest)
	}
}

// TestDecodedEventsAreChargedToTheBudget: a small body of many tiny items holds far more once
// decoded than its bytes; the budget charges each decoded event, so such a body does not fit
// beside a request in flight where its bytes alone would. The refusal is a 429 like any other
// full budget, and the charge is given back.
func TestDecodedEventsAreChargedToTheBudget(t *testing.T) {
	const maxEvents = 1000
	gate := &gateConsumer{entered: make(chan struct{}, 1), open: make(chan struct{})}
	ids := make([]string, 100)
	for i := range ids {
		ids[i] = fmt.Sprintf("held-%03d", i)
	}
	held := eventList(ids...)
	env := startWebhookWith(t, gate, func(cfg *Config) {
		cfg.MaxEventsPerRequest = maxEvents
		// Just what validation asks for: one body of the largest size with the most events
		// (uncompressed bodies only: no decoder to make room for).
		cfg.ServerConfig.CompressionAlgorithms = []string{""}
		cfg.MaxInFlightBytes = cfg.largestRequest()
	})
	done := postAsync(env.url, held)
	<-gate.entered

	// 3 KB of bytes, 900 events: 1.8 MB decoded, which the budget no longer has.
	tiny := tinyItems(900)
	if int64(len(tiny)) > heldBy(int64(len(held)), len(ids)) {
		t.Fatal("the tiny body must be smaller than what the held request holds")
	}
	code, msg := postBody(t, env.url, tiny)
	if code != http.StatusTooManyRequests {
		t.Fatalf("status %d (%s), want 429: the decoded events do not fit beside the held request", code, msg)
	}
	if n := env.counted(t, "otelcol_k8s_audit_rejected_requests", reasonInFlightBytes); n != 1 {
		t.Fatalf("rejected in_flight_bytes = %d, want 1", n)
	}
	close(gate.open)
	if code := <-done; code != http.StatusOK {
		t.Fatalf("the held request answered %d", code)
	}
	if code, msg := postBody(t, env.url, tiny); code != http.StatusOK {
		t.Fatalf("alone, the tiny body: status %d (%s), want 200", code, msg)
	}
	awaitGauge(t, env, 0)
}

// awaitGauge waits until otelcol_k8s_audit_in_flight_bytes is want: a request's reservation is
// given back when its handler returns, just after its answer.
func awaitGauge(t *testing.T, env *webhookEnv, want int64) {
	t.Helper()
	for start := time.Now(); ; time.Sleep(5 * time.Millisecond) {
		got := env.counted(t, "otelcol_k8s_audit_in_flight_bytes", "")
		if got == want {
			return
		}
		if time.Since(start) > guard {
			t.Fatalf("otelcol_k8s_audit_in_flight_bytes = %d, want %d", got, want)
		}
	}
}

// TestSlowSendersDoNotStarveTheApiserver: connections that declare a body of almost
// max_request_body_size and send it a byte at a time hold what they sent, not what they
// declared. Three of them held 60 MiB of the 64 MiB budget, and every batch over 4 MiB got 429;
// now an apiserver's batch of 400 RequestResponse events (5 MB) goes through beside them.
func TestSlowSendersDoNotStarveTheApiserver(t *testing.T) {
	r, url, tel := startReceiver(t, &switchConsumer{}, nil)
	env := &webhookEnv{url: url, tel: tel}
	cfg := r.cfg
	if cfg.bodyLimit() != 20<<20 || cfg.MaxInFlightBytes != 64<<20 {
		t.Fatalf("the defaults changed: max_request_body_size %d, max_in_flight_bytes %d", cfg.bodyLimit(), cfg.MaxInFlightBytes)
	}
	// Each slow request is in its handler, holding its reservation, before the next one.
	for i := range 3 {
		before := env.counted(t, "otelcol_k8s_audit_in_flight_bytes", "")
		dialAndSend(t, url, 20971000, `{`)
		awaitInFlight(t, r, i+1)
		for start := time.Now(); env.counted(t, "otelcol_k8s_audit_in_flight_bytes", "") <= before; time.Sleep(5 * time.Millisecond) {
			if time.Since(start) > guard {
				t.Fatalf("slow sender %d holds nothing", i)
			}
		}
	}
	t.Logf("three slow senders hold %d bytes", env.counted(t, "otelcol_k8s_audit_in_flight_bytes", ""))

	data := strings.Repeat("x", 6000)
	items := make([]string, 400)
	for i := range items {
		obj := fmt.Sprintf(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm","namespace":"default","uid":"u-%03d"},"data":{"d":%q}}`, i, data)
		ev := strings.Replace(fmt.Sprintf(auditconvtest.OneCreate, fmt.Sprintf("rr-%03d", i)), `"level":"Metadata"`, `"level":"RequestResponse"`, 1)
		items[i] = strings.Replace(ev, `"requestReceivedTimestamp"`, `"requestObject":`+obj+`,"responseObject":`+obj+`,"requestReceivedTimestamp"`, 1)
	}
	batch := `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` + strings.Join(items, ",") + `]}`
	if len(batch) < 5<<20-(1<<18) {
		t.Fatalf("the batch is %d bytes, want about 5 MB", len(batch))
	}
	if code, msg := postBody(t, url, batch); code != http.StatusOK {
		t.Fatalf("a 5 MB batch beside three slow senders: status %d (%.300s), want 200", code, msg)
	}
	if n := env.counted(t, "otelcol_k8s_audit_rejected_requests", reasonInFlightBytes); n != 0 {
		t.Fatalf("rejected in_flight_bytes = %d, want 0", n)
	}
}

// TestABodyDeclaredTooLargeIsRefusedUnread: a declared length above max_request_body_size is a
// 413 at once, whatever arrives after the headers.
func TestABodyDeclaredTooLargeIsRefusedUnread(t *testing.T) {
	r, url, tel := startReceiver(t, &switchConsumer{}, nil)
	conn := dialAndSend(t, url, int(r.cfg.bodyLimit())+1, `{`)
	if code := readUntilClosed(t, conn); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413", code)
	}
	if n := auditconvtest.MetricSum(t, tel, "otelcol_k8s_audit_rejected_requests", reasonTooLarge); n != 1 {
		t.Fatalf("rejected too_large = %d, want 1", n)
	}
}

// TestADecodedBodyLargerThanTheBudgetIsA413: lists inside an event cost several times their
// bytes once decoded (a string header per "" of a sourceIPs list); a body that would pass
// max_in_flight_bytes on its own, decoded, is refused for good (413), not asked to retry.
func TestADecodedBodyLargerThanTheBudgetIsA413(t *testing.T) {
	env := startWebhook(t, func(cfg *Config) {
		cfg.ServerConfig.MaxRequestBodySize = 4 << 20
		cfg.MaxEventsPerRequest = 10
		cfg.MaxInFlightBytes = cfg.largestRequest()
	})
	ips := strings.TrimSuffix(strings.Repeat(`"",`, 1_000_000), ",")
	code, msg := postBody(t, env.url, `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{"sourceIPs":[`+ips+`]}]}`)
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "max_in_flight_bytes") {
		t.Fatalf("status %d (%s), want 413 naming max_in_flight_bytes", code, msg)
	}
	if n := env.counted(t, "otelcol_k8s_audit_rejected_requests", reasonTooLarge); n != 1 {
		t.Fatalf("rejected too_large = %d, want 1", n)
	}
	awaitGauge(t, env, 0)
}

// gzipBomb is a gzip body that inflates to the start of an EventList and then to spaces: one
// gzip member of 64 MiB of spaces (64 KB) repeated, each member a 1000th of what it inflates
// to, members times.
func gzipBomb(t testing.TB, members int) []byte {
	t.Helper()
	var head, member bytes.Buffer
	for i, out := range []*bytes.Buffer{&head, &member} {
		zw, err := gzip.NewWriterLevel(out, gzip.BestCompression)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			_, _ = io.WriteString(zw, `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[`)
		} else {
			spaces := bytes.Repeat([]byte(" "), 1<<20)
			for range 64 {
				_, _ = zw.Write(spaces)
			}
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return append(head.Bytes(), bytes.Repeat(member.Bytes(), members)...)
}

// TestConcurrentGzipBombsEachGetTheir413: 60 clients post at once a gzip body that inflates
// past max_request_body_size. Each is answered 413, or 429 when max_in_flight_bytes has no room
// for its decoder as it arrives, and none sees its connection reset: the decompressed body stops
// at the bound with compressed bytes still unsent or unread, and a connection closed so is reset
// under the client's write, its answer lost.
func TestConcurrentGzipBombsEachGetTheir413(t *testing.T) {
	_, url, tel := startReceiver(t, &switchConsumer{}, nil)
	bomb := gzipBomb(t, 64)
	t.Logf("the bomb is %d KB, inflating to 4 GiB", len(bomb)>>10)
	const clients = 60
	type result struct {
		code int
		err  error
	}
	results := make(chan result, clients)
	start := make(chan struct{})
	for range clients {
		go func() {
			<-start
			req, err := http.NewRequest(http.MethodPost, url+"/audit", bytes.NewReader(bomb))
			if err != nil {
				results <- result{err: err}
				return
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Content-Encoding", "gzip")
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr, Timeout: 3 * guard}).Do(req)
			if err != nil {
				results <- result{err: err}
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			results <- result{code: resp.StatusCode}
		}()
	}
	close(start)
	var failed []string
	var tooLarge, busy int64
	for range clients {
		r := <-results
		switch {
		case r.err == nil && r.code == http.StatusRequestEntityTooLarge:
			tooLarge++
		case r.err == nil && r.code == http.StatusTooManyRequests:
			busy++
		default:
			failed = append(failed, fmt.Sprintf("%d %v", r.code, r.err))
		}
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d clients got neither 413 nor 429: %v", len(failed), clients, failed)
	}
	t.Logf("%d answered 413, %d answered 429 (no room for their decoder)", tooLarge, busy)
	if n := auditconvtest.MetricSum(t, tel, "otelcol_k8s_audit_rejected_requests", reasonTooLarge); n != tooLarge {
		t.Fatalf("rejected too_large = %d, want %d", n, tooLarge)
	}
	if n := auditconvtest.MetricSum(t, tel, "otelcol_k8s_audit_rejected_requests", reasonInFlightBytes); n != busy {
		t.Fatalf("rejected in_flight_bytes = %d, want %d", n, busy)
	}
}
