package k8sauditreceiver

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

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

// sampleHeap starts sampling after two collections, so that the baseline is what is live, the
// pools (bodies, chunks, decoders) emptied by the second.
func sampleHeap() *heapSampler {
	runtime.GC()
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

// bombOf is a body in encoding that inflates to the start of an EventList and then 64 MiB of
// spaces, past the default max_request_body_size (20 MiB). zstd's frame declares a 16 MiB
// window, within confighttp's bound (max_request_body_size); lz4's blocks are of the largest
// size, 4 MiB.
func bombOf(t *testing.T, encoding string) []byte {
	t.Helper()
	head := `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[`
	spaces := bytes.Repeat([]byte(" "), 1<<20)
	var buf bytes.Buffer
	var zw io.WriteCloser
	switch encoding {
	case "snappy":
		// The block format declares its decoded length first, and confighttp refuses one
		// past the limit before decoding: the costliest body is one of exactly the limit.
		whole := append([]byte(head), bytes.Repeat(spaces, 20)...)
		return snappy.Encode(nil, whole[:defaultMaxRequestBodySize])
	case "gzip":
		zw, _ = gzip.NewWriterLevel(&buf, gzip.BestCompression)
	case "zstd":
		w, err := zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.SpeedBestCompression), zstd.WithWindowSize(16<<20))
		if err != nil {
			t.Fatal(err)
		}
		zw = w
	case "lz4":
		w := lz4.NewWriter(&buf)
		if err := w.Apply(lz4.BlockSizeOption(lz4.Block4Mb)); err != nil {
			t.Fatal(err)
		}
		zw = w
	case "x-snappy-framed":
		zw = snappy.NewBufferedWriter(&buf)
	default:
		t.Fatalf("no bomb for %q", encoding)
	}
	_, _ = io.WriteString(zw, head)
	for range 64 {
		_, _ = zw.Write(spaces)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// postEncoded posts body with a Content-Encoding on a connection of its own and returns the
// status, or the error (a reset connection) as -1.
func postEncoded(url, encoding string, body []byte) (int, error) {
	req, err := http.NewRequest(http.MethodPost, url+"/audit", bytes.NewReader(body))
	if err != nil {
		return -1, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Encoding", encoding)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 6 * guard}).Do(req)
	if err != nil {
		return -1, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// TestOnlyNoneAndGzipAreAcceptedByDefault: a zstd body, whose decoder may hold up to
// max_request_body_size before a byte reaches the handler, is refused (400, bad_encoding) unless
// compression_algorithms lists zstd.
func TestOnlyNoneAndGzipAreAcceptedByDefault(t *testing.T) {
	env := startWebhook(t, nil)
	bomb := bombOf(t, "zstd")
	for _, enc := range []string{"zstd", "lz4", "snappy", "x-snappy-framed", "zlib", "deflate"} {
		if code, err := postEncoded(env.url, enc, bomb); err != nil || code != http.StatusBadRequest {
			t.Errorf("%s: status %d (%v), want 400", enc, code, err)
		}
	}
	if n := env.counted(t, "otelcol_k8s_audit_rejected_requests", reasonBadEncoding); n != 6 {
		t.Fatalf("rejected bad_encoding = %d, want 6", n)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = io.WriteString(zw, eventList("gz-1"))
	_ = zw.Close()
	if code, err := postEncoded(env.url, "gzip", gz.Bytes()); err != nil || code != http.StatusOK {
		t.Fatalf("gzip: status %d (%v), want 200", code, err)
	}
}

// TestBombsOfEveryEncodingStayWithinTheBound: with each encoding listed in
// compression_algorithms, clients post at once a body that inflates past
// max_request_body_size (sixty zstd bombs of 65 KB took +1.2 GB: each decoder's window was
// outside the bound). Each request is charged its decoder before it is made, so each is
// answered 413, or 429 when the budget cannot hold its decoder, never reset, and the heap stays
// within 2.5 times max_in_flight_bytes.
func TestBombsOfEveryEncodingStayWithinTheBound(t *testing.T) {
	for _, tc := range []struct {
		encoding string
		clients  int
		refusal  int // the answer when the decoder was made: a body past the limit, or snappy's
		// block of exactly max_request_body_size (a larger one is refused before it is
		// decoded), decoded whole and found to be no JSON
	}{
		{"zstd", 60, http.StatusRequestEntityTooLarge},
		{"lz4", 20, http.StatusRequestEntityTooLarge},
		{"snappy", 20, http.StatusBadRequest},
		{"x-snappy-framed", 20, http.StatusRequestEntityTooLarge},
		{"gzip", 20, http.StatusRequestEntityTooLarge},
	} {
		t.Run(tc.encoding, func(t *testing.T) {
			var budget int64
			env := startWebhook(t, func(cfg *Config) {
				cfg.ServerConfig.MaxRequestBodySize = defaultMaxRequestBodySize
				cfg.ServerConfig.CompressionAlgorithms = []string{"", tc.encoding}
				// The default, or what validation asks for when a decoder needs more (snappy).
				cfg.MaxInFlightBytes = max(cfg.MaxInFlightBytes, cfg.largestRequest())
				budget = cfg.MaxInFlightBytes
			})
			bomb := bombOf(t, tc.encoding)
			codes := make(chan int, tc.clients)
			heap := sampleHeap()
			var wg sync.WaitGroup
			for range tc.clients {
				wg.Go(func() {
					code, err := postEncoded(env.url, tc.encoding, bomb)
					if err != nil {
						t.Error(err)
					}
					codes <- code
				})
			}
			wg.Wait()
			peak := heap.over()
			close(codes)
			answers := map[int]int{}
			for code := range codes {
				answers[code]++
			}
			if answers[tc.refusal]+answers[http.StatusTooManyRequests] != tc.clients {
				t.Errorf("answers %v: want %d, or 429 when the budget has no room", answers, tc.refusal)
			}
			t.Logf("answers %v", answers)
			requireWithin(t, fmt.Sprintf("%d %s bombs of %d KB", tc.clients, tc.encoding, len(bomb)>>10), peak, budget, 2.5)
			awaitGauge(t, env, 0)
		})
	}
}
