package faultproxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Match selects the requests a fault applies to.
type Match func(*http.Request) bool

// Watches matches the watch requests of a resource (its plural, e.g. "events") that go on from a
// resource version, not the watch-list requests that stand for a list (sendInitialEvents).
func Watches(resource string) Match {
	return func(r *http.Request) bool { return isWatch(r) && !isWatchList(r) && hasResource(r, resource) }
}

// Relists matches the requests that (re)list a resource: a list (GET of a collection, not a
// watch), or a watch-list (a watch with sendInitialEvents, client-go's streaming list).
func Relists(resource string) Match {
	return func(r *http.Request) bool {
		if !hasResource(r, resource) || r.Method != http.MethodGet {
			return false
		}
		return isWatchList(r) || (!isWatch(r) && strings.HasSuffix(r.URL.Path, "/"+resource))
	}
}

func isWatchList(r *http.Request) bool {
	return isWatch(r) && r.URL.Query().Get("sendInitialEvents") == "true"
}

// Resource matches every request of a resource (e.g. "leases"), whatever the verb.
func Resource(resource string) Match {
	return func(r *http.Request) bool { return hasResource(r, resource) }
}

func isWatch(r *http.Request) bool {
	w := r.URL.Query().Get("watch")
	return w == "true" || w == "1"
}

func hasResource(r *http.Request, resource string) bool {
	p := r.URL.Path
	return strings.HasSuffix(p, "/"+resource) || strings.Contains(p, "/"+resource+"/")
}

type answer struct {
	match  Match
	status int
}

// HTTP is a fault-injecting plain-HTTP front for a kube-apiserver.
type HTTP struct {
	port
	upstream *url.URL
	proxy    *httputil.ReverseProxy
	srv      *http.Server
	answers  []answer
	expire   Match
	streams  map[*context.CancelFunc]bool // in-flight requests: watch or not
	conns    map[net.Conn]struct{}

	requests atomic.Int64
	answered atomic.Int64
	ended    atomic.Int64
}

// ListenHTTP starts a front on 127.0.0.1 (a free port) for the apiserver and credentials of the
// kubeconfig file.
func ListenHTTP(kubeconfig string) (*HTTP, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	up, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: server %q: %w", kubeconfig, cfg.Host, err)
	}
	h := &HTTP{upstream: up, streams: map[*context.CancelFunc]bool{}, conns: map[net.Conn]struct{}{}}
	if err := h.open(); err != nil {
		return nil, err
	}
	h.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(up)
			pr.Out.Host = up.Host
		},
		Transport:      rt,
		FlushInterval:  -1, // watches stream
		ModifyResponse: h.gateBody,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			writeStatus(w, http.StatusBadGateway, "ServiceUnavailable", "fault proxy: "+err.Error())
		},
	}
	h.srv = &http.Server{Handler: http.HandlerFunc(h.serveHTTP), ReadHeaderTimeout: 10 * time.Second,
		ConnState: h.connState}
	h.wg.Add(1)
	go h.serve(h.ln)
	return h, nil
}

// Addr is the front's address (127.0.0.1:port); it stays the same across Refuse and Pass.
func (h *HTTP) Addr() string { return h.addr }

// Requests is the number of requests the front received.
func (h *HTTP) Requests() int64 { return h.requests.Load() }

// Answered is the number of requests the front answered with an injected status or expiry.
func (h *HTTP) Answered() int64 { return h.answered.Load() }

// Ended is the number of in-flight watches EndWatches ended.
func (h *HTTP) Ended() int64 { return h.ended.Load() }

// WriteKubeconfig writes a kubeconfig that names the front and no credentials (the front adds
// its own), for the collector under test.
func (h *HTTP) WriteKubeconfig(path string) error {
	body := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: faultproxy
  cluster: {server: "http://%s"}
users:
- name: faultproxy
  user: {}
contexts:
- name: faultproxy
  context: {cluster: faultproxy, user: faultproxy}
current-context: faultproxy
`, h.addr)
	return os.WriteFile(path, []byte(body), 0o600)
}

// Answer makes the front answer every request that match selects with status (401, 403, 503…)
// and an API Status body, as the apiserver would, until Pass.
func (h *HTTP) Answer(status int, match Match) {
	h.mu.Lock()
	h.answers = append(h.answers, answer{match: match, status: status})
	h.mu.Unlock()
}

// Expire makes the front answer the watch requests that match selects as the apiserver answers a
// watch from a resource version it no longer has: 200, one ERROR event with a 410 Expired
// Status, and the end of the stream; until Pass.
func (h *HTTP) Expire(match Match) {
	h.mu.Lock()
	h.expire = match
	h.mu.Unlock()
}

// EndWatches ends every watch in flight (the client sees its stream end) and returns how many.
func (h *HTTP) EndWatches() int {
	h.mu.Lock()
	var cancels []context.CancelFunc
	for c, watch := range h.streams {
		if watch {
			cancels = append(cancels, *c)
		}
	}
	h.mu.Unlock()
	for _, c := range cancels {
		c()
	}
	h.ended.Add(int64(len(cancels)))
	return len(cancels)
}

// Freeze holds every response in flight and every new request: connections stay open and
// nothing arrives, as from an apiserver behind a dead network path. Pass releases them.
func (h *HTTP) Freeze() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.freezeLocked()
}

// Refuse closes every connection and stops listening: the apiserver is unreachable until Pass.
func (h *HTTP) Refuse() {
	h.mu.Lock()
	h.stopListeningLocked()
	conns := h.conns
	h.conns = map[net.Conn]struct{}{}
	var cancels []context.CancelFunc
	for c := range h.streams {
		cancels = append(cancels, *c)
	}
	h.mu.Unlock()
	for _, c := range cancels {
		c()
	}
	for c := range conns {
		_ = c.Close()
	}
}

// Pass ends every fault: injected answers and expiry cleared, frozen responses released, the
// port listening again.
func (h *HTTP) Pass() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.answers, h.expire = nil, nil
	return h.passLocked(h.serve)
}

// Close stops the front.
func (h *HTTP) Close() error {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.Refuse()
	_ = h.Pass()
	err := h.srv.Close()
	h.wg.Wait()
	return err
}

func (h *HTTP) serve(ln net.Listener) {
	defer h.wg.Done()
	_ = h.srv.Serve(ln)
}

func (h *HTTP) connState(c net.Conn, s http.ConnState) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch s {
	case http.StateNew:
		if h.ln == nil {
			_ = c.Close()
			return
		}
		h.conns[c] = struct{}{}
	case http.StateClosed, http.StateHijacked:
		delete(h.conns, c)
	}
}

func (h *HTTP) serveHTTP(w http.ResponseWriter, r *http.Request) {
	h.requests.Add(1)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	h.mu.Lock()
	frozen := h.frozen
	h.streams[&cancel] = isWatch(r)
	var status int
	for _, a := range h.answers {
		if a.match(r) {
			status = a.status
		}
	}
	expire := h.expire != nil && h.expire(r)
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.streams, &cancel)
		h.mu.Unlock()
	}()
	select {
	case <-frozen:
	case <-ctx.Done():
		return
	}
	switch {
	case status != 0:
		h.answered.Add(1)
		writeStatus(w, status, reasonOf(status), "fault proxy: injected")
		return
	case expire:
		h.answered.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_ = json.NewEncoder(w).Encode(map[string]any{"type": "ERROR", "object": statusBody(http.StatusGone, "Expired",
			"fault proxy: too old resource version")})
		return
	}
	h.proxy.ServeHTTP(w, r.WithContext(ctx))
}

// gateBody makes a response body wait while the front is frozen.
func (h *HTTP) gateBody(resp *http.Response) error {
	resp.Body = &gatedBody{ReadCloser: resp.Body, h: h, ctx: resp.Request.Context()}
	return nil
}

type gatedBody struct {
	io.ReadCloser
	h   *HTTP
	ctx context.Context
}

func (b *gatedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	select {
	case <-b.h.gate():
		return n, err
	case <-b.ctx.Done():
		return 0, b.ctx.Err()
	}
}

func reasonOf(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "Unauthorized"
	case http.StatusForbidden:
		return "Forbidden"
	case http.StatusGone:
		return "Expired"
	case http.StatusTooManyRequests:
		return "TooManyRequests"
	case http.StatusServiceUnavailable:
		return "ServiceUnavailable"
	}
	return "InternalError"
}

func statusBody(code int, reason, msg string) map[string]any {
	return map[string]any{"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
		"status": "Failure", "message": msg, "reason": reason, "code": code}
}

func writeStatus(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(statusBody(code, reason, msg))
}
