package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeEvents lists one item and streams the given watch documents once; later watches block
// until cancelled, as an idle apiserver watch does.
type fakeEvents struct {
	items   []json.RawMessage
	docs    string
	watches int
}

func (f *fakeEvents) List(context.Context) (string, []json.RawMessage, error) {
	return "10", f.items, nil
}

func (f *fakeEvents) Watch(ctx context.Context, rv string) (io.ReadCloser, error) {
	f.watches++
	if f.watches == 1 {
		return io.NopCloser(strings.NewReader(f.docs)), nil
	}
	pr, pw := io.Pipe()
	go func() { <-ctx.Done(); pw.Close() }()
	return pr, nil
}

func body(ids ...string) []byte {
	var items []string
	for _, id := range ids {
		items = append(items, `{"auditID":"`+id+`","stage":"ResponseComplete","verb":"create"}`)
	}
	return []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` + strings.Join(items, ",") + `]}`)
}

func logLine(id string) string {
	return `{"kind":"Event","auditID":"` + id + `","stage":"ResponseComplete","verb":"create"}` + "\n"
}

type harness struct {
	t      *testing.T
	out    string
	log    string
	srv    *httptest.Server
	events *fakeEvents
}

func newHarness(t *testing.T, settle time.Duration) *harness {
	dir := t.TempDir()
	h := &harness{t: t, out: filepath.Join(dir, "fixture"), log: filepath.Join(dir, "audit.log"),
		events: &fakeEvents{
			items: []json.RawMessage{json.RawMessage(`{"metadata":{"name":"listed"},"reason":"RegisteredNode"}`)},
			docs:  `{"type":"ADDED","object":{"kind":"Event","apiVersion":"events.k8s.io/v1","metadata":{"name":"watched","resourceVersion":"11"}}}` + "\n",
		}}
	if err := os.WriteFile(h.log, []byte(logLine("before")), 0o644); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(config{out: h.out, auditLog: h.log, scenario: "demo", k8sVersion: "v1.36.3",
		settleTimeout: settle, eventsQuiet: 10 * time.Millisecond,
		newEventSource: func(string) (eventSource, error) { return h.events, nil }})
	h.srv = httptest.NewServer(rec.handler())
	t.Cleanup(func() { rec.close(); h.srv.Close() })
	return h
}

func (h *harness) post(path string, b []byte) *http.Response {
	h.t.Helper()
	resp, err := http.Post(h.srv.URL+path, "application/json", bytes.NewReader(b))
	if err != nil {
		h.t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

func (h *harness) appendLog(s string) {
	f, err := os.OpenFile(h.log, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) stop() summary {
	h.t.Helper()
	resp, err := http.Post(h.srv.URL+"/control/stop", "", nil)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		h.t.Fatalf("stop: %d %s", resp.StatusCode, b)
	}
	var s summary
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		h.t.Fatal(err)
	}
	return s
}

func (h *harness) read(name string) string {
	h.t.Helper()
	b, err := os.ReadFile(filepath.Join(h.out, name))
	if err != nil {
		h.t.Fatal(err)
	}
	return string(b)
}

func TestRecorderWritesOnlyWhatHappensWhileRecording(t *testing.T) {
	h := newHarness(t, 5*time.Second)
	h.post("/audit/testbed", body("before"))
	if r := h.post("/control/start", nil); r.StatusCode != http.StatusOK {
		t.Fatalf("start: %d", r.StatusCode)
	}
	first, second := body("a", "b"), body("c")
	h.appendLog(logLine("a") + logLine("b") + logLine("c"))
	h.post("/audit/testbed", first)
	h.post("/audit", second)
	s := h.stop()

	if got := h.read("audit-webhook/0001.json"); got != string(first) {
		t.Errorf("0001.json is not the first POST body byte for byte:\n%s", got)
	}
	if got := h.read("audit-webhook/0002.json"); got != string(second) {
		t.Errorf("0002.json is not the second POST body:\n%s", got)
	}
	if _, err := os.Stat(filepath.Join(h.out, "audit-webhook", "0003.json")); err == nil {
		t.Error("a body posted before start was written")
	}
	if got, want := h.read("audit.log"), logLine("a")+logLine("b")+logLine("c"); got != want {
		t.Errorf("audit.log holds the lines written before start too, or misses some:\n%s", got)
	}
	lines := strings.Split(strings.TrimSpace(h.read("events.jsonl")), "\n")
	if len(lines) != 2 {
		t.Fatalf("events.jsonl has %d lines, want the listed and the watched event:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	if !strings.HasPrefix(lines[0], `{"type":"ADDED","object":{"kind":"Event","apiVersion":"events.k8s.io/v1","metadata":{"name":"listed"}`) {
		t.Errorf("a listed item is not written as an ADDED watch event with kind and apiVersion: %s", lines[0])
	}
	if lines[1] != strings.TrimSpace(h.events.docs) {
		t.Errorf("a watch document is not written as delivered: %s", lines[1])
	}
	want := counts{AuditWebhookPosts: 2, AuditWebhookEvents: 3, AuditLogLines: 3, WatchEvents: 2}
	if s.Counts != want {
		t.Errorf("counts = %+v, want %+v", s.Counts, want)
	}
	var onDisk summary
	if err := json.Unmarshal([]byte(h.read("scenario.json")), &onDisk); err != nil || onDisk.Name != "demo" || onDisk.KubernetesVersion != "v1.36.3" || onDisk.Counts != want {
		t.Errorf("scenario.json = %+v (%v)", onDisk, err)
	}
	if _, err := time.Parse(time.RFC3339Nano, onDisk.Start); err != nil {
		t.Errorf("start is not RFC 3339: %v", err)
	}
}

func TestStopWaitsForTheWebhookToCatchUpWithTheLog(t *testing.T) {
	h := newHarness(t, 5*time.Second)
	h.post("/control/start", nil)
	h.appendLog(logLine("late"))
	done := make(chan summary)
	go func() { done <- h.stop() }()
	select {
	case s := <-done:
		t.Fatalf("stop returned before the webhook delivered the logged event: %+v", s)
	case <-time.After(200 * time.Millisecond):
	}
	h.post("/audit/testbed", body("late"))
	s := <-done
	if s.Counts.AuditMissingFromWebhook != 0 || s.Counts.AuditWebhookPosts != 1 {
		t.Errorf("counts = %+v, want the late batch recorded and nothing missing", s.Counts)
	}
}

func TestStopCountsLoggedEventsThatNeverArrive(t *testing.T) {
	h := newHarness(t, 100*time.Millisecond)
	h.post("/control/start", nil)
	h.appendLog(logLine("lost") + `{"auditID":"partial`) // a line still being written is left out
	s := h.stop()
	if s.Counts.AuditMissingFromWebhook != 1 || s.Counts.AuditLogLines != 1 {
		t.Errorf("counts = %+v, want 1 logged line missing from the webhook", s.Counts)
	}
	if got := h.read("audit.log"); got != logLine("lost") {
		t.Errorf("audit.log = %q, want only complete lines", got)
	}
}

func TestControlEndpointsRefuseOutOfOrderCalls(t *testing.T) {
	h := newHarness(t, time.Second)
	if r := h.post("/control/stop", nil); r.StatusCode != http.StatusInternalServerError {
		t.Errorf("stop before start: %d, want 500", r.StatusCode)
	}
	h.post("/control/start", nil)
	if r := h.post("/control/start", nil); r.StatusCode != http.StatusInternalServerError {
		t.Errorf("second start: %d, want 500", r.StatusCode)
	}
}
