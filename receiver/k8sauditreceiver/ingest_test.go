package k8sauditreceiver

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/kubetrail/kubetrail/internal/auditconv"
	"github.com/kubetrail/kubetrail/internal/auditconv/auditconvtest"
)

// TestOneBadItemIsRefusedAlone: items that are JSON but not valid events are refused one by
// one, counted and logged; the good items of the same batch become spans and the batch is
// answered 200, so the apiserver does not retry (and finally drop) the good events with them.
func TestOneBadItemIsRefusedAlone(t *testing.T) {
	env := startWebhook(t, nil)
	items := []string{
		fmt.Sprintf(auditconvtest.OneCreate, "good-1"),
		strings.Replace(fmt.Sprintf(auditconvtest.OneCreate, "bad-time"), `"2026-11-21T10:45:54.106207Z"`, `"21/11/2026"`, 1),
		strings.Replace(fmt.Sprintf(auditconvtest.OneCreate, "bad-verb"), `"verb":"create"`, `"verb":["create"]`, 1),
		`"not an event"`,
		strings.Replace(fmt.Sprintf(auditconvtest.OneCreate, "year-1"), `"2026-11-21T10:45:54.106207Z"`, `"0001-06-01T00:00:00Z"`, 1),
		strings.Replace(fmt.Sprintf(auditconvtest.OneCreate, "year-9999"), `"2026-11-21T10:45:54.106207Z"`, `"9999-12-31T23:59:59Z"`, 1),
		fmt.Sprintf(auditconvtest.OneCreate, "good-2"),
	}
	if code := postItems(t, env.url, items...); code != http.StatusOK {
		t.Fatalf("status %d, want 200: the good items are taken", code)
	}
	if got := strings.Join(env.next.ids(), ","); got != "good-1,good-2" {
		t.Fatalf("spans for %s, want good-1,good-2", got)
	}
	if n := env.counted(t, "otelcol_k8s_audit_dropped_events", auditconv.ReasonInvalidEvent); n != 3 {
		t.Fatalf("dropped invalid_event = %d, want 3", n)
	}
	if n := env.counted(t, "otelcol_k8s_audit_dropped_events", auditconv.ReasonInvalidTimestamp); n != 2 {
		t.Fatalf("dropped invalid_timestamp = %d, want 2", n)
	}
}

// gateConsumer holds every batch until it is opened.
type gateConsumer struct {
	entered chan struct{}
	open    chan struct{}
	mu      sync.Mutex
	spans   int
}

func (g *gateConsumer) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

func (g *gateConsumer) ConsumeTraces(ctx context.Context, td ptrace.Traces) error {
	g.entered <- struct{}{}
	select {
	case <-g.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	g.mu.Lock()
	g.spans += td.SpanCount()
	g.mu.Unlock()
	return nil
}

// TestInFlightBytesAreBounded: concurrent large bodies are read and decoded only up to
// max_in_flight_bytes; the others are answered 429 with Retry-After, their bodies dropped as read.
func TestInFlightBytesAreBounded(t *testing.T) {
	ids := make([]string, 60)
	for i := range ids {
		ids[i] = fmt.Sprintf("id-%02d", i)
	}
	body := eventList(ids...)
	size := int64(len(body))
	held := heldBy(size, len(ids))
	gate := &gateConsumer{entered: make(chan struct{}, 8), open: make(chan struct{})}
	env := startWebhookWith(t, gate, func(cfg *Config) {
		cfg.ServerConfig.MaxRequestBodySize = size
		cfg.MaxInFlightBytes = 2*held + held/2 // room for two requests, not three
	})

	const senders = 5
	codes := make(chan int, senders)
	retryAfter := make(chan string, senders)
	var wg sync.WaitGroup
	post := func() {
		defer wg.Done()
		resp, err := http.Post(env.url+"/audit", "application/json", strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return
		}
		_ = resp.Body.Close()
		codes <- resp.StatusCode
		retryAfter <- resp.Header.Get("Retry-After")
	}
	// Two requests get in and are held by the pipeline with their bodies decoded.
	for range 2 {
		wg.Add(1)
		go post()
		<-gate.entered
	}
	// The others find the budget spent.
	for range senders - 2 {
		wg.Add(1)
		go post()
	}
	for range senders - 2 {
		if code, ra := <-codes, <-retryAfter; code != http.StatusTooManyRequests || ra == "" {
			t.Fatalf("status %d, Retry-After %q; want 429 with Retry-After", code, ra)
		}
	}
	close(gate.open)
	wg.Wait()
	for range 2 {
		if code := <-codes; code != http.StatusOK {
			t.Fatalf("a held request was answered %d, want 200", code)
		}
	}
	if n := env.counted(t, "otelcol_k8s_audit_rejected_requests", reasonInFlightBytes); n != senders-2 {
		t.Fatalf("rejected in_flight_bytes = %d, want %d", n, senders-2)
	}
	// The budget is returned: a new request goes through.
	gate.entered = make(chan struct{}, 1)
	resp, err := http.Post(env.url+"/audit", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("after the held requests ended: status %d", resp.StatusCode)
	}
}

// heldBy is what a request whose body of size bytes (under 64 KiB) decodes into events events
// holds of max_in_flight_bytes: its body and the byte that finds its end, and
// auditconv.EventBytes per event and for the list itself, charged 64 KiB at a time.
func heldBy(size int64, events int) int64 {
	const step = 64 << 10
	decoded := int64(events+1) * auditconv.EventBytes
	return size + 1 + (decoded+step-1)/step*step
}

// postItems posts the audit events (JSON texts) to the webhook at url as one EventList and
// returns the answer's status code.
func postItems(t *testing.T, url string, items ...string) int {
	t.Helper()
	body := `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` + strings.Join(items, ",") + `]}`
	resp, err := http.Post(url+"/audit", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// TestFilteredBodiesAreDelimitedNotValidated: the body of an event the filters drop is only
// delimited, so a list response with a bad number in it does not cost its batch a 400; the same
// body on a traced write still refuses the batch; and on an event that a member after the body
// keeps after all (objectRef written last), the body is validated then and the event alone is
// refused and counted.
func TestFilteredBodiesAreDelimitedNotValidated(t *testing.T) {
	const bad = `{"kind":"ConfigMapList","items":[{"data":{"n":01,"s":"\q"}}]}`
	withBody := func(id, verb, body string) string {
		ev := strings.Replace(fmt.Sprintf(auditconvtest.OneCreate, id), `"verb":"create"`, `"verb":"`+verb+`"`, 1)
		return strings.Replace(ev, `"requestReceivedTimestamp"`, `"responseObject":`+body+`,"requestReceivedTimestamp"`, 1)
	}
	env := startWebhook(t, nil)
	if code := postItems(t, env.url, withBody("list", "list", bad), fmt.Sprintf(auditconvtest.OneCreate, "ok")); code != http.StatusOK {
		t.Fatalf("a malformed body of a filtered read: status %d, want 200", code)
	}
	if n := env.next.spans(); n != 1 || env.counted(t, "otelcol_k8s_audit_filtered_events", auditconv.ReasonReadVerb) != 1 {
		t.Fatalf("%d spans, want the create's alone, the list counted as a filtered read", n)
	}
	if code := postItems(t, env.url, withBody("write", "create", bad)); code != http.StatusBadRequest {
		t.Fatalf("a malformed body of a traced write: status %d, want 400", code)
	}

	// objectRef after the body: the decoder saw a non-resource request when it reached it.
	late := fmt.Sprintf(auditconvtest.OneCreate, "late")
	ref := late[strings.Index(late, `"objectRef"`):strings.Index(late, `,"responseStatus"`)]
	late = strings.Replace(late, ref+",", "", 1)
	late = strings.Replace(late, `"stageTimestamp"`, ref+`,"stageTimestamp"`, 1)
	good := strings.Replace(late, `"auditID":"late"`, `"auditID":"late-good"`, 1)
	if code := postItems(t, env.url,
		strings.Replace(late, `"requestReceivedTimestamp"`, `"responseObject":`+bad+`,"requestReceivedTimestamp"`, 1),
		strings.Replace(good, `"requestReceivedTimestamp"`, `"responseObject":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm"}},"requestReceivedTimestamp"`, 1),
	); code != http.StatusOK {
		t.Fatalf("status %d, want 200", code)
	}
	if got := env.next.ids(); !slices.Contains(got, "late-good") || slices.Contains(got, "late") {
		t.Fatalf("spans of %v: want late-good's and not late's, whose body is malformed", got)
	}
	if n := env.counted(t, "otelcol_k8s_audit_dropped_events", auditconv.ReasonInvalidEvent); n != 1 {
		t.Fatalf("dropped invalid events = %d, want 1", n)
	}
}
