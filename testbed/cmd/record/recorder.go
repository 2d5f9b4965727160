package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

type config struct {
	listen, addrFile, out       string
	kubeconfig, auditLog        string
	scenario, k8sVersion, notes string
	auditPolicy                 string
	settleTimeout               time.Duration
	eventsQuiet                 time.Duration                                // stop waits for this long without a watch event
	newEventSource              func(kubeconfig string) (eventSource, error) // tests replace it
	now                         func() time.Time
}

// auditKey identifies one audit event record: the same request appears once per stage.
type auditKey struct{ id, stage string }

// auditEventList is the part of an audit.k8s.io/v1 EventList (or of one audit log line) the
// recorder needs to know which events have arrived.
type auditEventList struct {
	Items []auditEventHead `json:"items"`
}

type auditEventHead struct {
	AuditID string `json:"auditID"`
	Stage   string `json:"stage"`
}

type recorder struct {
	cfg config

	mu        sync.Mutex
	recording bool
	posts     int
	items     int
	seen      map[auditKey]struct{}
	changed   chan struct{} // closed and replaced whenever a webhook POST arrives while recording
	start     time.Time
	logOffset int64
	events    *eventRecorder
}

func newRecorder(cfg config) *recorder {
	if cfg.now == nil {
		cfg.now = time.Now
	}
	if cfg.newEventSource == nil {
		cfg.newEventSource = newAPIEventSource
	}
	if cfg.eventsQuiet == 0 {
		cfg.eventsQuiet = time.Second
	}
	return &recorder{cfg: cfg, seen: map[auditKey]struct{}{}, changed: make(chan struct{})}
}

func (r *recorder) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /audit", r.handleAudit)
	mux.HandleFunc("POST /audit/{cluster}", r.handleAudit)
	mux.HandleFunc("POST /control/start", r.handleStart)
	mux.HandleFunc("POST /control/stop", r.handleStop)
	return mux
}

func (r *recorder) handleAudit(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	// The apiserver retries a batch it could not deliver: answering an error would only duplicate
	// it, so a body the recorder cannot store is logged and acknowledged.
	if err := r.storeAudit(body); err != nil {
		log.Printf("record: %v", err)
	}
	w.WriteHeader(http.StatusOK)
}

func (r *recorder) storeAudit(body []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.recording {
		return nil
	}
	var list auditEventList
	if err := json.Unmarshal(body, &list); err != nil {
		return fmt.Errorf("audit webhook body %d is not an EventList: %w", r.posts+1, err)
	}
	r.posts++
	name := filepath.Join(r.cfg.out, "audit-webhook", fmt.Sprintf("%04d.json", r.posts))
	if err := os.WriteFile(name, body, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	r.items += len(list.Items)
	for _, it := range list.Items {
		r.seen[auditKey{it.AuditID, it.Stage}] = struct{}{}
	}
	close(r.changed)
	r.changed = make(chan struct{})
	return nil
}

func (r *recorder) handleStart(w http.ResponseWriter, req *http.Request) {
	if err := r.startRecording(req.Context()); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (r *recorder) startRecording(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.recording {
		return errors.New("already recording")
	}
	if err := os.MkdirAll(filepath.Join(r.cfg.out, "audit-webhook"), 0o755); err != nil {
		return err
	}
	var offset int64
	if r.cfg.auditLog != "" {
		st, err := os.Stat(r.cfg.auditLog)
		if err != nil {
			return fmt.Errorf("audit log: %w", err)
		}
		offset = st.Size()
	}
	src, err := r.cfg.newEventSource(r.cfg.kubeconfig)
	if err != nil {
		return fmt.Errorf("events source: %w", err)
	}
	ev, err := startEventRecorder(ctx, src, filepath.Join(r.cfg.out, "events.jsonl"))
	if err != nil {
		return err
	}
	r.recording, r.start, r.logOffset, r.events = true, r.cfg.now(), offset, ev
	log.Printf("record: recording (audit log offset %d, %d Events listed)", offset, ev.count())
	return nil
}

// summary is scenario.json.
type summary struct {
	Name              string `json:"name"`
	KubernetesVersion string `json:"kubernetes_version"`
	Start             string `json:"start"`
	End               string `json:"end"`
	AuditPolicy       string `json:"audit_policy,omitempty"`
	Counts            counts `json:"counts"`
	Notes             string `json:"notes,omitempty"`
}

type counts struct {
	AuditWebhookPosts  int `json:"audit_webhook_posts"`
	AuditWebhookEvents int `json:"audit_webhook_events"`
	AuditLogLines      int `json:"audit_log_lines"`
	WatchEvents        int `json:"watch_events"`
	// Audit events in the log that never arrived through the webhook before settle-timeout.
	AuditMissingFromWebhook int `json:"audit_missing_from_webhook"`
}

func (r *recorder) handleStop(w http.ResponseWriter, req *http.Request) {
	s, err := r.stopRecording(req.Context())
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(s)
}

func (r *recorder) stopRecording(ctx context.Context) (summary, error) {
	r.mu.Lock()
	if !r.recording {
		r.mu.Unlock()
		return summary{}, errors.New("not recording")
	}
	end, offset := r.cfg.now(), r.logOffset
	r.mu.Unlock()

	var logBytes []byte
	var want []auditKey
	if r.cfg.auditLog != "" {
		var err error
		if logBytes, want, err = readAuditLog(r.cfg.auditLog, offset); err != nil {
			return summary{}, err
		}
	}
	missing := r.waitForWebhook(ctx, want)

	r.mu.Lock()
	r.recording = false
	ev := r.events
	r.events = nil
	s := summary{
		Name: r.cfg.scenario, KubernetesVersion: r.cfg.k8sVersion,
		Start: r.start.UTC().Format(time.RFC3339Nano), End: end.UTC().Format(time.RFC3339Nano),
		AuditPolicy: r.cfg.auditPolicy, Notes: r.cfg.notes,
		Counts: counts{AuditWebhookPosts: r.posts, AuditWebhookEvents: r.items, AuditLogLines: len(want),
			AuditMissingFromWebhook: missing},
	}
	r.mu.Unlock()

	n, err := ev.stop(r.cfg.eventsQuiet, 5*r.cfg.eventsQuiet)
	if err != nil {
		return summary{}, err
	}
	s.Counts.WatchEvents = n
	if err := os.WriteFile(filepath.Join(r.cfg.out, "audit.log"), logBytes, 0o644); err != nil {
		return summary{}, err
	}
	js, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return summary{}, err
	}
	if err := os.WriteFile(filepath.Join(r.cfg.out, "scenario.json"), append(js, '\n'), 0o644); err != nil {
		return summary{}, err
	}
	log.Printf("record: stopped: %+v", s.Counts)
	return s, nil
}

// waitForWebhook blocks until every key in want has arrived through the webhook, the settle
// timeout passes or ctx ends, and returns how many never arrived. The log file is written
// synchronously and the webhook in batches, so the file is the reference for "everything".
func (r *recorder) waitForWebhook(ctx context.Context, want []auditKey) int {
	deadline := time.NewTimer(r.cfg.settleTimeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		missing := 0
		for _, k := range want {
			if _, ok := r.seen[k]; !ok {
				missing++
			}
		}
		changed := r.changed
		r.mu.Unlock()
		if missing == 0 {
			return 0
		}
		select {
		case <-changed:
		case <-deadline.C:
			log.Printf("record: %d audit events of the log never arrived through the webhook", missing)
			return missing
		case <-ctx.Done():
			return missing
		}
	}
}

// readAuditLog returns the audit log's bytes from offset to the last complete line and the
// (auditID, stage) of each line.
func readAuditLog(path string, offset int64) ([]byte, []auditKey, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("audit log: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, nil, fmt.Errorf("audit log %s: %w", path, err)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, nil, fmt.Errorf("audit log %s: %w", path, err)
	}
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[:i+1]
	} else {
		b = nil
	}
	var keys []auditKey
	for line := range bytes.Lines(b) {
		var h auditEventHead
		if err := json.Unmarshal(line, &h); err != nil {
			return nil, nil, fmt.Errorf("audit log %s: line %d: %w", path, len(keys)+1, err)
		}
		keys = append(keys, auditKey{h.AuditID, h.Stage})
	}
	return b, keys, nil
}

func (r *recorder) close() {
	r.mu.Lock()
	ev := r.events
	r.events, r.recording = nil, false
	r.mu.Unlock()
	if ev != nil {
		_, _ = ev.stop(0, 0)
	}
}
