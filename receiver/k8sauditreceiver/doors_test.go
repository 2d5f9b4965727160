package k8sauditreceiver

import (
	"fmt"
	"net/http"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kubetrail/kubetrail/internal/auditconv/auditconvtest"
)

// The hostile rows of issue 30 that reach the webhook, each against the real receiver: what
// the process holds while they are served is measured as the peak of the Go heap over its
// baseline (runtime/metrics, sampled every millisecond: live objects and the garbage not yet
// collected, what the process takes from the OS for them), and bounded with margin by what the
// receiver README promises: 2.5 times max_in_flight_bytes.

// heapSampler records the peak of the heap's objects while a hostile load runs.
type heapSampler struct {
	base uint64
	peak uint64
	stop chan struct{}
	done sync.WaitGroup
}

const heapObjects = "/memory/classes/heap/objects:bytes"

func readHeap() uint64 {
	s := []metrics.Sample{{Name: heapObjects}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// sampleHeap starts sampling after a collection, so that the baseline is what is live.
func sampleHeap() *heapSampler {
	runtime.GC()
	h := &heapSampler{base: readHeap(), stop: make(chan struct{})}
	h.peak = h.base
	h.done.Add(1)
	go func() {
		defer h.done.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			if v := readHeap(); v > h.peak {
				h.peak = v
			}
			select {
			case <-h.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return h
}

// over stops sampling and returns the peak over the baseline.
func (h *heapSampler) over() int64 {
	close(h.stop)
	h.done.Wait()
	return int64(h.peak) - int64(h.base)
}

// requireWithin fails when the peak passes times × bound.
func requireWithin(t *testing.T, what string, peak, bound int64, times float64) {
	t.Helper()
	t.Logf("%s: heap peak +%.1f MiB over the baseline, %.2f × max_in_flight_bytes (%d MiB)", what, float64(peak)/(1<<20), float64(peak)/float64(bound), bound>>20)
	if float64(peak) > times*float64(bound) {
		t.Fatalf("%s: the heap peaked %d MiB over its baseline, past %.1f × max_in_flight_bytes (%d MiB)", what, peak>>20, times, int64(times*float64(bound))>>20)
	}
}

// manyValues is an EventList of one traced update whose response body (the object, indexed for
// its diff) holds n values of two bytes each: [0,0,…].
func manyValues(n int) string {
	obj := `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm","namespace":"default","uid":"u1","resourceVersion":"7"},"data":{"a":[` +
		strings.TrimSuffix(strings.Repeat("0,", n), ",") + `]}}`
	ev := strings.Replace(fmt.Sprintf(auditconvtest.OneCreate, "values"), `"verb":"create"`, `"verb":"update"`, 1)
	ev = strings.Replace(ev, `"level":"Metadata"`, `"level":"RequestResponse"`, 1)
	ev = strings.Replace(ev, `"requestReceivedTimestamp"`, `"responseObject":`+obj+`,"requestReceivedTimestamp"`, 1)
	return `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` + ev + `]}`
}

// TestBodiesOfMillionsOfValuesAreRefusedWithinTheBound: six clients post at once a 4 MB body
// whose one item's object holds two million values. Indexed for a diff, each value is a node
// of the index: 140 MB a body before the index was charged as it grew (+0.84 GB for the six).
// Now each node is charged before its storage grows, a body whose values alone would pass
// max_in_flight_bytes is a 413 (too_many_values) as soon as they do, the others wait their turn
// (429), and the heap stays within the bound.
func TestBodiesOfMillionsOfValuesAreRefusedWithinTheBound(t *testing.T) {
	env := startWebhook(t, func(cfg *Config) { cfg.ServerConfig.MaxRequestBodySize = defaultMaxRequestBodySize })
	body := manyValues(2_000_000)
	const clients = 6
	codes := make(chan int, clients)
	heap := sampleHeap()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			code, _ := postBody(t, env.url, body)
			codes <- code
		})
	}
	wg.Wait()
	peak := heap.over()
	close(codes)
	refused := 0
	for code := range codes {
		switch code {
		case http.StatusRequestEntityTooLarge:
			refused++
		case http.StatusTooManyRequests:
		default:
			t.Errorf("status %d, want 413, or 429 while another body holds the budget", code)
		}
	}
	if n := env.counted(t, "otelcol_k8s_audit_rejected_requests", reasonTooManyValues); n != int64(refused) || refused == 0 {
		t.Fatalf("rejected too_many_values = %d, %d bodies answered 413 (want the same, at least one)", n, refused)
	}
	requireWithin(t, "six 4 MB bodies of 2,000,000 values", peak, defaultMaxInFlightBytes, 2.5)
	awaitGauge(t, env, 0)
	if code, msg := postBody(t, env.url, manyValues(1000)); code != http.StatusOK {
		t.Fatalf("a body of 1,000 values: status %d (%.200s), want 200", code, msg)
	}
}
