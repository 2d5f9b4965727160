package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// eventSource is the raw events.k8s.io/v1 API: the recorder keeps the bytes the apiserver sent
// rather than re-encoding typed objects, so fixtures are what a watch really delivers.
type eventSource interface {
	// List returns the collection's resourceVersion and its items as JSON objects.
	List(ctx context.Context) (string, []json.RawMessage, error)
	// Watch opens a watch stream of {"type","object"} JSON documents from resourceVersion rv.
	Watch(ctx context.Context, rv string) (io.ReadCloser, error)
}

type apiEventSource struct{ rc rest.Interface }

func newAPIEventSource(kubeconfig string) (eventSource, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return apiEventSource{rc: cs.EventsV1().RESTClient()}, nil
}

func (s apiEventSource) List(ctx context.Context) (string, []json.RawMessage, error) {
	b, err := s.rc.Get().Resource("events").DoRaw(ctx)
	if err != nil {
		return "", nil, fmt.Errorf("list events.k8s.io/v1 events: %w", err)
	}
	var list struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return "", nil, fmt.Errorf("decode events list: %w", err)
	}
	return list.Metadata.ResourceVersion, list.Items, nil
}

func (s apiEventSource) Watch(ctx context.Context, rv string) (io.ReadCloser, error) {
	return s.rc.Get().Resource("events").Param("watch", "true").Param("resourceVersion", rv).
		Param("allowWatchBookmarks", "false").Stream(ctx)
}

// eventRecorder writes events.jsonl: the initial list as ADDED lines, then every watch event.
type eventRecorder struct {
	src    eventSource
	f      *os.File
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	n    int
	last time.Time
}

// listItemPrefix turns a list item into a watch object: list responses omit each item's kind and
// apiVersion, which watch events carry.
var listItemPrefix = []byte(`{"kind":"Event","apiVersion":"events.k8s.io/v1",`)

func startEventRecorder(ctx context.Context, src eventSource, path string) (*eventRecorder, error) {
	rv, items, err := src.List(ctx)
	if err != nil {
		return nil, err
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	e := &eventRecorder{src: src, f: f, done: make(chan struct{}), last: time.Now()}
	for _, it := range items {
		obj := []byte(it)
		if !bytes.HasPrefix(obj, []byte(`{"kind"`)) && len(obj) > 2 {
			obj = append(append([]byte{}, listItemPrefix...), obj[1:]...)
		}
		if err := e.write("ADDED", obj); err != nil {
			f.Close()
			return nil, err
		}
	}
	wctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go e.watch(wctx, rv)
	return e, nil
}

func (e *eventRecorder) write(typ string, obj []byte) error {
	line, err := json.Marshal(struct {
		Type   string          `json:"type"`
		Object json.RawMessage `json:"object"`
	}{typ, obj})
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	e.last = time.Now()
	_, err = e.f.Write(append(line, '\n'))
	return err
}

// writeRaw writes one watch document as the apiserver sent it.
func (e *eventRecorder) writeRaw(doc []byte) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	e.last = time.Now()
	_, err := e.f.Write(append(bytes.TrimSpace(doc), '\n'))
	return err
}

func (e *eventRecorder) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n
}

// watch follows the stream from rv, reopening it where it ended (the apiserver closes watches
// after a timeout) and re-listing only when the resourceVersion is gone.
func (e *eventRecorder) watch(ctx context.Context, rv string) {
	defer close(e.done)
	for ctx.Err() == nil {
		next, err := e.follow(ctx, rv)
		if ctx.Err() != nil {
			return
		}
		switch {
		case errors.Is(err, errGone):
			log.Printf("record: events watch expired at %s; re-listing (events in the gap are lost)", rv)
			if next, _, err = e.src.List(ctx); err != nil {
				log.Printf("record: %v", err)
			}
		case err != nil:
			log.Printf("record: events watch: %v", err)
		}
		if next != "" {
			rv = next
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

var errGone = errors.New("resourceVersion too old")

func (e *eventRecorder) follow(ctx context.Context, rv string) (string, error) {
	stream, err := e.src.Watch(ctx, rv)
	if err != nil {
		return rv, err
	}
	defer stream.Close()
	dec := json.NewDecoder(stream)
	for {
		var doc json.RawMessage
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				return rv, nil
			}
			return rv, err
		}
		var head struct {
			Type   string `json:"type"`
			Object struct {
				Code     int `json:"code"`
				Metadata struct {
					ResourceVersion string `json:"resourceVersion"`
				} `json:"metadata"`
			} `json:"object"`
		}
		if err := json.Unmarshal(doc, &head); err != nil {
			return rv, fmt.Errorf("watch document: %w", err)
		}
		if head.Type == "ERROR" {
			if head.Object.Code == 410 {
				return "", errGone
			}
			return rv, fmt.Errorf("watch error: %s", doc)
		}
		if err := e.writeRaw(doc); err != nil {
			return rv, err
		}
		rv = head.Object.Metadata.ResourceVersion
	}
}

// stop waits until no watch event arrived for quiet (at most maxWait), stops the watch and closes
// the file. Controllers write Events while they act, so the last ones trail the last audit batch.
func (e *eventRecorder) stop(quiet, maxWait time.Duration) (int, error) {
	deadline := time.Now().Add(maxWait)
	for time.Now().Before(deadline) {
		e.mu.Lock()
		idle := time.Since(e.last)
		e.mu.Unlock()
		if idle >= quiet {
			break
		}
		time.Sleep(quiet - idle)
	}
	e.cancel()
	<-e.done
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n, e.f.Close()
}
