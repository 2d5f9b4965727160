package k8sauditreceiver

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/config/configtls"

	"github.com/kubetrail/kubetrail/internal/auditconv/auditconvtest"
)

// Hostile senders (the rows of issue 30 that reach the webhook), each against the real receiver: what
// the process holds while they are served is measured as the peak of the Go heap over its
// baseline (runtime/metrics, sampled every millisecond: live objects and the garbage not yet
// collected, what the process takes from the OS for them), and bounded with margin by what the
// receiver README promises: 2.5 times max_in_flight_bytes.

// heapSampler records the peak of the heap's objects while a hostile load runs.
type heapSampler struct {
	base  uint64
	peak  uint64
	limit int64 // the memory limit before sampling, restored by over
	stop  chan struct{}
	done  sync.WaitGroup
}

const heapObjects = "/memory/classes/heap/objects:bytes"

func readHeap() uint64 {
	s := []metrics.Sample{{Name: heapObjects}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// sampleHeap starts sampling after two collections, so that the baseline is what is live, the
// pools (bodies, chunks, decoders) emptied by the second. While it samples, the Go memory limit
// is the baseline plus twice bound, as a deployment's GOMEMLIMIT is set (the chart: 80 % of the
// container's limit): without one, the garbage of refused bodies waits for a collection at twice
// the heap last marked, and how far the peak then overshoots depends on how busy the machine is
// (2.81 × the bound in a CI run on a loaded machine, under 2.5 × elsewhere), not on what the
// receiver holds. A receiver that holds more than the bound still passes it: the limit is soft.
func sampleHeap(bound int64) *heapSampler {
	runtime.GC()
	runtime.GC()
	h := &heapSampler{base: readHeap(), stop: make(chan struct{})}
	h.limit = debug.SetMemoryLimit(int64(h.base) + 2*bound)
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
	debug.SetMemoryLimit(h.limit)
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
// (429), and the heap stays within the bound. Each client sends its body again after a 429, as
// the apiserver does: on a loaded machine all six can find the budget held by the others at once
// and all get 429 (a CI run saw it), and a body that then runs alone gets its 413.
func TestBodiesOfMillionsOfValuesAreRefusedWithinTheBound(t *testing.T) {
	env := startWebhook(t, func(cfg *Config) { cfg.ServerConfig.MaxRequestBodySize = defaultMaxRequestBodySize })
	body := manyValues(2_000_000)
	const clients = 6
	codes := make(chan int, clients)
	heap := sampleHeap(defaultMaxInFlightBytes)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			code := http.StatusTooManyRequests
			for try := 0; try < 50 && code == http.StatusTooManyRequests; try++ {
				if try > 0 {
					time.Sleep(time.Duration(10+try*10) * time.Millisecond)
				}
				code, _ = postBody(t, env.url, body)
			}
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
			heap := sampleHeap(budget)
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

// fiveMBBatch is an apiserver's batch of 400 RequestResponse events of ConfigMap creates, some
// 5 MB.
func fiveMBBatch(t *testing.T) string {
	t.Helper()
	data := strings.Repeat("x", 6000)
	items := make([]string, 400)
	for i := range items {
		obj := fmt.Sprintf(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm","namespace":"default","uid":"u-%03d"},"data":{"d":%q}}`, i, data)
		ev := strings.Replace(fmt.Sprintf(auditconvtest.OneCreate, fmt.Sprintf("rr-%03d", i)), `"level":"Metadata"`, `"level":"RequestResponse"`, 1)
		items[i] = strings.Replace(ev, `"requestReceivedTimestamp"`, `"requestObject":`+obj+`,"responseObject":`+obj+`,"requestReceivedTimestamp"`, 1)
	}
	batch := `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` + strings.Join(items, ",") + `]}`
	if len(batch) < 5<<20-(1<<18) {
		t.Fatalf("the batch is %d bytes, want about 5 MB", len(batch))
	}
	return batch
}

// dribble sends one byte a second on conn until it fails or stop is closed.
func dribble(conn net.Conn, stop <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			if _, err := conn.Write([]byte(" ")); err != nil {
				return
			}
		}
	}
}

// TestSlowSendersCannotHoldTheBudget: 1,100 connections each declare a 1 MB body and send a byte
// a second (1 KB/s in all). When each body's reservation started at 64 KiB they held the whole
// 64 MiB bound for each read_timeout, and every real batch got 429. Now each holds what it sent
// rounded up to 4 KiB, so a 5 MB batch posted while they are all open gets its 200; and each is
// cut after its first two seconds at a byte a second (min_body_rate), answered 408.
func TestSlowSendersCannotHoldTheBudget(t *testing.T) {
	r, url, tel := startReceiver(t, &switchConsumer{}, nil)
	env := &webhookEnv{url: url, tel: tel}
	batch := fiveMBBatch(t)
	const senders = 1100
	heap := sampleHeap(defaultMaxInFlightBytes)
	stop := make(chan struct{})
	defer close(stop)
	conns := make([]net.Conn, senders)
	for i := range conns {
		conns[i] = dialAndSend(t, url, 1<<20, `{`)
		go dribble(conns[i], stop)
	}
	awaitInFlight(t, r, senders)
	held := env.counted(t, "otelcol_k8s_audit_in_flight_bytes", "")
	t.Logf("%d slow senders hold %d KiB of max_in_flight_bytes", senders, held>>10)
	if code, msg := postBody(t, url, batch); code != http.StatusOK {
		t.Fatalf("a 5 MB batch beside %d slow senders: status %d (%.300s), want 200", senders, code, msg)
	}
	if held > senders*bodyFirstStep {
		t.Errorf("the slow senders held %d bytes, more than %d each", held, bodyFirstStep)
	}
	// Each slow sender is cut and told so.
	var wg sync.WaitGroup
	codes := make(chan int, senders)
	for _, c := range conns {
		wg.Go(func() { codes <- readUntilClosed(t, c) })
	}
	wg.Wait()
	peak := heap.over()
	close(codes)
	answers := map[int]int{}
	for c := range codes {
		answers[c]++
	}
	if answers[http.StatusRequestTimeout] != senders {
		t.Errorf("the slow senders were answered %v, want %d × 408", answers, senders)
	}
	if n := env.counted(t, "otelcol_k8s_audit_rejected_requests", reasonTooSlow); n != senders {
		t.Errorf("rejected too_slow = %d, want %d", n, senders)
	}
	requireWithin(t, fmt.Sprintf("%d slow senders and a 5 MB batch", senders), peak, defaultMaxInFlightBytes, 2.5)
	awaitGauge(t, env, 0)
}

// TestUnfinishedHeadersAreBounded: 600 connections each sending a header of 1 MB without ever
// ending it held 1.45 GB with Go's default header limit (1 MiB: two copies of it while it
// arrives). With max_header_bytes (16 KiB) each is answered 431 and closed at 20 KiB; 600 more
// that stop just below the limit hold it until read_header_timeout, some 40 KB each. A real
// batch is served meanwhile, and the heap stays within the bound.
func TestUnfinishedHeadersAreBounded(t *testing.T) {
	_, url, tel := startReceiver(t, &switchConsumer{}, nil)
	env := &webhookEnv{url: url, tel: tel}
	batch := fiveMBBatch(t)
	const conns = 600
	// Built once, before the baseline: the heap measured is the server's.
	hugeHeader := []byte("POST /audit HTTP/1.1\r\nHost: kubetrail\r\nX-Pad: " + strings.Repeat("a", 1<<20))
	heldHeader := []byte("POST /audit HTTP/1.1\r\nHost: kubetrail\r\nX-Pad: " + strings.Repeat("a", defaultMaxHeaderBytes-200))
	heap := sampleHeap(defaultMaxInFlightBytes)
	huge := make([]net.Conn, conns)
	for i := range huge {
		c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		huge[i] = c
		go func() {
			_, _ = c.Write(hugeHeader)
		}()
	}
	held := make([]net.Conn, conns)
	for i := range held {
		c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		held[i] = c
		if _, err := c.Write(heldHeader); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	codes := make(chan int, conns)
	for _, c := range huge {
		wg.Go(func() { codes <- readUntilClosed(t, c) })
	}
	if code, msg := postBody(t, url, batch); code != http.StatusOK {
		t.Fatalf("a 5 MB batch beside %d unfinished headers: status %d (%.300s), want 200", 2*conns, code, msg)
	}
	wg.Wait()
	peak := heap.over()
	close(codes)
	answers := map[int]int{}
	for c := range codes {
		answers[c]++
	}
	if answers[http.StatusRequestHeaderFieldsTooLarge] != conns {
		t.Errorf("the 1 MB headers were answered %v, want %d × 431", answers, conns)
	}
	requireWithin(t, fmt.Sprintf("%d headers of 1 MB, %d unfinished headers of 16 KB and a 5 MB batch", conns, conns), peak, defaultMaxInFlightBytes, 2.5)
	awaitGauge(t, env, 0)
}

// TestConnectionsPastMaxConnectionsAreClosed: with max_connections open, one more is closed as
// it is accepted, before anything is read from it, and counted; once one closes, a new one is
// served.
func TestConnectionsPastMaxConnectionsAreClosed(t *testing.T) {
	const limit = 20
	r, url, tel := startReceiver(t, &switchConsumer{}, func(cfg *Config) { cfg.MaxConnections = limit })
	addr := strings.TrimPrefix(url, "http://")
	open := make([]net.Conn, limit)
	for i := range open {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		open[i] = c
	}
	for start := time.Now(); r.openConnections() != limit; time.Sleep(5 * time.Millisecond) {
		if time.Since(start) > guard {
			t.Fatalf("open connections = %d, want %d", r.openConnections(), limit)
		}
	}
	extra := dialAndSend(t, url, 10, `{}`)
	if code := readUntilClosed(t, extra); code != 0 {
		t.Fatalf("the connection past max_connections was answered %d, want closed unanswered", code)
	}
	if n := auditconvtest.MetricSum(t, tel, "otelcol_k8s_audit_refused_connections", reasonTooManyConnections); n != 1 {
		t.Fatalf("refused too_many_connections = %d, want 1", n)
	}
	_ = open[0].Close()
	for start := time.Now(); r.openConnections() != limit-1; time.Sleep(5 * time.Millisecond) {
		if time.Since(start) > guard {
			t.Fatalf("open connections = %d after one closed, want %d", r.openConnections(), limit-1)
		}
	}
	if code, msg := postBody(t, url, eventList("after")); code != http.StatusOK {
		t.Fatalf("once a connection closed: status %d (%s), want 200", code, msg)
	}
}

// TestClientsOfAnotherNameAreRefusedInTheHandshake: a client whose certificate the CA signed
// for a name allowed_client_names does not list is refused in the TLS handshake, before it can
// send headers or a body (600 such clients holding unfinished 1 MB headers held 1.45 GB when
// the name was checked by the handler, after the headers), also with reload_client_ca_file,
// whose per-handshake configuration must check the names too.
func TestClientsOfAnotherNameAreRefusedInTheHandshake(t *testing.T) {
	pki := newTestPKI(t)
	serverCert, serverKey, _ := pki.issue(t, "server", "otelcol-kubetrail", nil, []net.IP{net.IPv4(127, 0, 0, 1)}, x509.ExtKeyUsageServerAuth)
	_, _, apiserver := pki.issue(t, "apiserver", "kube-apiserver-audit", nil, nil, x509.ExtKeyUsageClientAuth)
	_, _, kubelet := pki.issue(t, "kubelet", "system:node:node-1", []string{"node-1"}, nil, x509.ExtKeyUsageClientAuth)
	header := []byte("POST /audit HTTP/1.1\r\nHost: kubetrail\r\nX-Pad: " + strings.Repeat("a", 1<<20))
	for _, reload := range []bool{false, true} {
		t.Run(fmt.Sprintf("reload_client_ca_file=%v", reload), func(t *testing.T) {
			_, url, tel := startReceiver(t, &switchConsumer{}, func(cfg *Config) {
				cfg.ServerConfig.TLS = configoptional.Some(configtls.ServerConfig{
					Config:             configtls.Config{CertFile: serverCert, KeyFile: serverKey},
					ClientCAFile:       filepath.Join(pki.dir, "ca.crt"),
					ReloadClientCAFile: reload,
				})
				cfg.AllowedClientNames = []string{"kube-apiserver-audit"}
			})
			addr := strings.TrimPrefix(url, "http://")
			dial := func(cert tls.Certificate) (*tls.Conn, error) {
				return tls.Dial("tcp", addr, &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}})
			}
			const clients = 100
			heap := sampleHeap(defaultMaxInFlightBytes)
			var wg sync.WaitGroup
			errs := make(chan error, clients)
			for range clients {
				wg.Go(func() {
					c, err := dial(kubelet)
					if err != nil {
						errs <- err
						return
					}
					defer c.Close()
					_, _ = c.Write(header)
					_ = c.SetReadDeadline(time.Now().Add(guard))
					_, err = c.Read(make([]byte, 1))
					errs <- err
				})
			}
			wg.Wait()
			peak := heap.over()
			close(errs)
			for err := range errs {
				if err == nil || !strings.Contains(err.Error(), "bad certificate") {
					t.Fatalf("a client of another name: %v, want the TLS alert bad certificate", err)
				}
			}
			if n := auditconvtest.MetricSum(t, tel, "otelcol_k8s_audit_refused_connections", reasonClientNotAllowed); n != clients {
				t.Fatalf("refused client_not_allowed = %d, want %d", n, clients)
			}
			requireWithin(t, fmt.Sprintf("%d clients of another name with 1 MB headers", clients), peak, defaultMaxInFlightBytes, 0.5)
			c, err := dial(apiserver)
			if err != nil {
				t.Fatalf("the allowed client: %v", err)
			}
			defer c.Close()
			body := eventList("allowed")
			fmt.Fprintf(c, "POST /audit HTTP/1.1\r\nHost: kubetrail\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("the allowed client: %v, %v; want 200", resp, err)
			}
		})
	}
}

// TestASlowCompressedBodyIsCut: min_body_rate watches a compressed body's bytes as sent, before
// and after the decoder's header: a gzip body that stops after its first bytes, and one that
// stops before its decoder could read its header, are each answered 408.
func TestASlowCompressedBodyIsCut(t *testing.T) {
	_, url, tel := startReceiver(t, &switchConsumer{}, nil)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = io.WriteString(zw, strings.Repeat(" ", 1<<20))
	_ = zw.Close()
	for _, sent := range []int{4, 200} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		fmt.Fprintf(conn, "POST /audit HTTP/1.1\r\nHost: kubetrail\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n", gz.Len())
		_, _ = conn.Write(gz.Bytes()[:sent])
		if code := readUntilClosed(t, conn); code != http.StatusRequestTimeout {
			t.Fatalf("a gzip body stopped after %d bytes: status %d, want 408", sent, code)
		}
	}
	if n := auditconvtest.MetricSum(t, tel, "otelcol_k8s_audit_rejected_requests", reasonTooSlow); n != 2 {
		t.Fatalf("rejected too_slow = %d, want 2", n)
	}
}
