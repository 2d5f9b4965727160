package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/kubetrail/kubetrail/testbed/auditcapture"
)

func TestValidateRefusesAnythingButLoopback(t *testing.T) {
	for _, tc := range []struct {
		name string
		url  string
		ok   bool
	}{
		{"127.0.0.1 is accepted", "http://127.0.0.1:9880/audit/x", true},
		{"localhost is refused (it may resolve elsewhere)", "http://localhost:9880/audit/x", false},
		{"another host is refused", "http://10.0.0.1:9880/audit/x", false},
		{"https is refused", "https://127.0.0.1:9880/audit/x", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := config{url: tc.url, duration: time.Second, maxEvents: 1, connections: 1}
			if err := c.validate(); (err == nil) != tc.ok {
				t.Errorf("validate(%s) = %v", tc.url, err)
			}
		})
	}
}

func TestRunStopsAtMaxEventsAndCountsWhatWasSent(t *testing.T) {
	s, err := auditcapture.Load(true, "../../fixtures/deployment")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		received int
		auditIDs = map[string]bool{}
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var list auditcapture.EventList
		if err := json.Unmarshal(body, &list); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, it := range list.Items {
			received++
			auditIDs[it.AuditID] = true
		}
	}))
	defer srv.Close()

	// Two rounds of the scenario and a bit: the third copy stops at the bound.
	maxEvents := int64(2*s.Events + s.Batches[0].Events)
	res, err := run(context.Background(), config{url: srv.URL, duration: time.Minute, maxEvents: maxEvents, connections: 1, scenarios: []*auditcapture.Capture{s}})
	if err != nil {
		t.Fatal(err)
	}
	if res.events != maxEvents || int64(received) != maxEvents || res.accepted != maxEvents {
		t.Errorf("sent %d, accepted %d, server received %d; want %d each", res.events, res.accepted, received, maxEvents)
	}
	if len(auditIDs) != received {
		t.Errorf("%d distinct auditIDs in %d events: copies repeat IDs", len(auditIDs), received)
	}
	if res.status["200"] != res.batches || int64(len(res.latencies)) != res.batches {
		t.Errorf("status %v, %d latencies for %d batches", res.status, len(res.latencies), res.batches)
	}
}
