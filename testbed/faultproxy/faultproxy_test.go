package faultproxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
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

// echo is a TCP server that writes back every line it reads.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { _ = ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip writes line on c and reads it back within d.
func roundTrip(c net.Conn, r *bufio.Reader, line string, d time.Duration) (string, error) {
	if _, err := fmt.Fprintln(c, line); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(d))
	got, err := r.ReadString('\n')
	return strings.TrimSpace(got), err
}

func TestTCPFreezeCutRefusePass(t *testing.T) {
	p, err := ListenTCP(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundTrip(c, r, "one", 2*time.Second); err != nil || got != "one" {
		t.Fatalf("pass: %q, %v", got, err)
	}

	p.Freeze()
	if got, err := roundTrip(c, r, "two", 300*time.Millisecond); err == nil {
		t.Fatalf("frozen: read %q, want a timeout", got)
	}
	if err := p.Pass(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "two\n" {
		t.Fatalf("after the freeze: %q, %v; want the held line", got, err)
	}

	p.Slow(200 * time.Millisecond)
	start := time.Now()
	if got, err := roundTrip(c, r, "slow", 2*time.Second); err != nil || got != "slow" {
		t.Fatalf("slow: %q, %v", got, err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("slow: the round trip took %s, want at least the delay", d)
	}
	_ = p.Pass()

	p.Cut()
	if _, err := roundTrip(c, r, "three", 2*time.Second); err == nil {
		t.Fatal("cut: the connection still answers")
	}
	if p.CutCount() < 2 {
		t.Errorf("cut: %d connections closed, want both ends", p.CutCount())
	}

	p.Refuse()
	if c2, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		c2.Close()
		t.Fatal("refuse: connecting succeeded")
	}
	if err := p.Pass(); err != nil {
		t.Fatal(err)
	}
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("after refuse: %v", err)
	}
	defer c3.Close()
	if got, err := roundTrip(c3, bufio.NewReader(c3), "four", 2*time.Second); err != nil || got != "four" {
		t.Fatalf("after refuse: %q, %v", got, err)
	}
	if p.Accepted() != 2 {
		t.Errorf("accepted %d connections, want 2", p.Accepted())
	}
}

// apiserver stands in for a kube-apiserver: a list of events, and a watch that streams one
// event and then waits for the client to leave.
func apiserver(t *testing.T) (kubeconfig string) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") == "true" {
			w.WriteHeader(http.StatusOK)
			fmt.Fprintln(w, `{"type":"ADDED","object":{"kind":"Event"}}`)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		fmt.Fprintln(w, `{"kind":"EventList","items":[]}`)
	}))
	t.Cleanup(srv.Close)
	kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	body := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: %q}}]\n"+
		"users: [{name: u, user: {}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n", srv.URL)
	if err := os.WriteFile(kubeconfig, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestHTTPAnswersExpiresEndsFreezesRefuses(t *testing.T) {
	h, err := ListenHTTP(apiserver(t))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	base := "http://" + h.Addr()
	list := base + "/api/v1/namespaces/a/events"
	if code, body := get(t, list); code != 200 || !strings.Contains(body, "EventList") {
		t.Fatalf("pass: %d %s", code, body)
	}

	h.Answer(http.StatusForbidden, Relists("events"))
	code, body := get(t, list)
	var st struct {
		Kind, Reason string
		Code         int
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil || code != 403 || st.Kind != "Status" || st.Reason != "Forbidden" || st.Code != 403 {
		t.Fatalf("answer 403: %d %s (%v)", code, body, err)
	}
	if code, _ := get(t, base+"/api/v1/namespaces/a/pods"); code != 200 {
		t.Errorf("answer 403 for events: pods got %d", code)
	}
	if code, _ := get(t, list+"?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"); code != 403 {
		t.Errorf("a watch-list is a relist: got %d, want 403", code)
	}

	h.Expire(Watches("events"))
	code, body = get(t, list+"?watch=true")
	if code != 200 || !strings.Contains(body, `"type":"ERROR"`) || !strings.Contains(body, `"code":410`) {
		t.Fatalf("expire: %d %s", code, body)
	}
	if h.Answered() != 3 {
		t.Errorf("answered %d, want 3", h.Answered())
	}
	if err := h.Pass(); err != nil {
		t.Fatal(err)
	}

	// A watch in flight, ended by the front.
	resp, err := http.Get(list + "?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(resp.Body)
	if line, err := r.ReadString('\n'); err != nil || !strings.Contains(line, "ADDED") {
		t.Fatalf("watch: %q %v", line, err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for h.EndWatches() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("EndWatches found no watch in flight")
		}
		time.Sleep(10 * time.Millisecond)
	}
	ended := make(chan error, 1)
	go func() { _, err := io.ReadAll(r); ended <- err }()
	select {
	case err := <-ended:
		t.Logf("the ended watch's stream: %v", err) // nil or an unexpected EOF: both end it
	case <-time.After(2 * time.Second):
		t.Fatal("the ended watch is still streaming")
	}
	resp.Body.Close()

	h.Freeze()
	c := &http.Client{Timeout: 300 * time.Millisecond}
	if resp, err := c.Get(list); err == nil {
		resp.Body.Close()
		t.Fatal("frozen: a request was answered")
	}
	_ = h.Pass()
	if code, _ := get(t, list); code != 200 {
		t.Fatalf("after the freeze: %d", code)
	}

	h.Refuse()
	if c, err := net.DialTimeout("tcp", h.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatal("refuse: connecting succeeded")
	}
	if err := h.Pass(); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, list); code != 200 {
		t.Fatalf("after refuse: %d", code)
	}
	kc := filepath.Join(t.TempDir(), "front")
	if err := h.WriteKubeconfig(kc); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(kc); !strings.Contains(string(b), "http://"+h.Addr()) {
		t.Errorf("kubeconfig does not name the front:\n%s", b)
	}
}
