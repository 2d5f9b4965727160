//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"time"
)

// AuditRouter is the apiserver's audit webhook target: an in-process HTTP server that forwards
// each POST body to the collectors a Route picks. It plays the load balancer in front of
// collector replicas, and lets a test add a replica, split the stream, or take a collector away
// mid-scenario without restarting the apiserver (its webhook URL is fixed at start).
//
// A body is answered 200 only when every target accepted it; otherwise 502, and the apiserver
// retries the batch (as it would against a real collector that is down).
type AuditRouter struct {
	URL string // what the apiserver posts to: http://127.0.0.1:port/audit/<cluster>

	srv *http.Server
	mu  sync.Mutex
	// route picks the targets of POST number n (1-based).
	route     Route
	split     []string // when set, items are dealt over these targets instead of routing bodies
	dealt     int
	posts     int
	refused   int            // bodies a target refused (answered 502)
	delivered map[string]int // target → bodies it accepted
	client    *http.Client
}

// Route returns the base URLs (http://host:port) of the collectors that get POST number n.
// nil or empty: the body is acknowledged and dropped (nobody listens yet).
type Route func(n int, body []byte) []string

// ToAll sends every body to every target.
func ToAll(targets ...string) Route {
	return func(int, []byte) []string { return targets }
}

// RoundRobin sends body n to targets[n % len(targets)]: replicas behind a load balancer.
func RoundRobin(targets ...string) Route {
	return func(n int, _ []byte) []string { return []string{targets[n%len(targets)]} }
}

func startAuditRouter() (*AuditRouter, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &AuditRouter{client: &http.Client{Timeout: 30 * time.Second}, delivered: map[string]int{}}
	r.URL = fmt.Sprintf("http://%s/audit/%s", ln.Addr(), ClusterName)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /audit/{cluster}", r.handle)
	mux.HandleFunc("POST /audit", r.handle)
	r.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

// SetRoute replaces the routing; it applies from the next POST on.
func (r *AuditRouter) SetRoute(route Route) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.route, r.split = route, nil
}

// SplitItems deals the audit events of every POST over targets, one event at a time, each
// target getting its share as an EventList of its own: several replicas then see interleaved
// parts of every batch, as behind a load balancer with many small batches, even when the
// apiserver sends a whole scenario in one or two POSTs. SetRoute ends it.
func (r *AuditRouter) SplitItems(targets ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.split = append([]string(nil), targets...)
}

// Posts returns how many POSTs the apiserver made since the router started.
func (r *AuditRouter) Posts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.posts
}

// Refused returns how many bodies a target refused (the apiserver then retries them).
func (r *AuditRouter) Refused() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refused
}

// Delivered returns how many bodies target (a collector's AuditURL) has accepted.
func (r *AuditRouter) Delivered(target string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.delivered[target]
}

func (r *AuditRouter) handle(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.posts++
	n, route, split := r.posts, r.route, r.split
	r.mu.Unlock()
	if len(split) > 0 {
		r.handleSplit(w, req, body, split)
		return
	}
	if route == nil {
		w.WriteHeader(http.StatusOK)
		return
	}
	for _, target := range route(n, body) {
		if err := r.forward(req.Context(), target+req.URL.Path, req.Header.Get("Content-Type"), body); err != nil {
			log.Printf("e2e: audit router: POST %d to %s: %v", n, target, err)
			r.mu.Lock()
			r.refused++
			r.mu.Unlock()
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		r.mu.Lock()
		r.delivered[target]++
		r.mu.Unlock()
	}
	w.WriteHeader(http.StatusOK)
}

func (r *AuditRouter) handleSplit(w http.ResponseWriter, req *http.Request, body []byte, targets []string) {
	var list struct {
		Kind       string            `json:"kind"`
		APIVersion string            `json:"apiVersion"`
		Items      []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	parts := make([][]json.RawMessage, len(targets))
	r.mu.Lock()
	for _, it := range list.Items {
		parts[r.dealt%len(targets)] = append(parts[r.dealt%len(targets)], it)
		r.dealt++
	}
	r.mu.Unlock()
	for i, target := range targets {
		if len(parts[i]) == 0 {
			continue
		}
		b, _ := json.Marshal(map[string]any{"kind": list.Kind, "apiVersion": list.APIVersion, "items": parts[i]})
		if err := r.forward(req.Context(), target+req.URL.Path, "application/json", b); err != nil {
			log.Printf("e2e: audit router: split part to %s: %v", target, err)
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		r.mu.Lock()
		r.delivered[target]++
		r.mu.Unlock()
	}
	w.WriteHeader(http.StatusOK)
}

func (r *AuditRouter) forward(ctx context.Context, url, contentType string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if contentType == "" {
		contentType = "application/json"
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := r.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%d %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	return nil
}

func (r *AuditRouter) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = r.srv.Shutdown(ctx)
}
