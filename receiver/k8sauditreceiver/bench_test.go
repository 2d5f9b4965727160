package k8sauditreceiver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/receiver/k8sauditreceiver/internal/metadata"
)

// fixtureBodies returns the recorded webhook bodies of a scenario, in arrival order.
func fixtureBodies(tb testing.TB, scenario string) [][]byte {
	tb.Helper()
	return webhookBodies(tb, filepath.Join(fixturesDir, scenario))
}

// requestResponseCapture is the benchmark capture that audits reads with their bodies.
const requestResponseCapture = "../../testbed/bench/requestresponse-deployment"

// webhookBodies returns the webhook bodies recorded in dir (a scenario's fixtures or a benchmark
// capture), in arrival order.
func webhookBodies(tb testing.TB, dir string) [][]byte {
	tb.Helper()
	posts, err := filepath.Glob(filepath.Join(dir, "audit-webhook", "*.json"))
	if err != nil || len(posts) == 0 {
		tb.Fatalf("no webhook captures in %s", dir)
	}
	slices.Sort(posts)
	var out [][]byte
	for _, p := range posts {
		data, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, data)
	}
	return out
}

// metadataBatch turns the deployment fixture into 400-event EventLists at Metadata level (no
// bodies): the apiserver's default batch size and the level most clusters audit at.
func metadataBatch(tb testing.TB) ([]byte, int) {
	var items []map[string]any
	for _, body := range fixtureBodies(tb, "deployment") {
		var list struct {
			Items []map[string]any `json:"items"`
		}
		if err := json.Unmarshal(body, &list); err != nil {
			tb.Fatal(err)
		}
		items = append(items, list.Items...)
	}
	const batch = 400
	out := make([]map[string]any, 0, batch)
	for i := 0; len(out) < batch; i++ {
		src := items[i%len(items)]
		ev := make(map[string]any, len(src))
		for k, v := range src {
			ev[k] = v
		}
		delete(ev, "requestObject")
		delete(ev, "responseObject")
		ev["level"] = "Metadata"
		ev["auditID"] = fmt.Sprintf("%s-%d", src["auditID"], i)
		out = append(out, ev)
	}
	data, err := json.Marshal(map[string]any{"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": out})
	if err != nil {
		tb.Fatal(err)
	}
	return data, batch
}

func benchReceiver(b *testing.B) (*auditReceiver, http.Handler) {
	return benchReceiverTo(b, consumertest.NewNop())
}

// benchReceiverTo is benchReceiver with the spans going to next.
func benchReceiverTo(b *testing.B, next consumer.Traces) (*auditReceiver, http.Handler) {
	cfg := createDefaultConfig().(*Config)
	cfg.Cluster = "bench"
	r, err := newAuditReceiver(receivertest.NewNopSettings(metadata.Type), cfg, next)
	if err != nil {
		b.Fatal(err)
	}
	return r, (&webhook{r: r, maxBody: 64 << 20, inFlight: newByteBudget(1 << 30)}).routes()
}

func post(b *testing.B, h http.Handler, body []byte) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(context.Background(), http.MethodPost, "/audit", bytes.NewReader(body)))
	if rec.Code != http.StatusOK {
		b.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
}

// BenchmarkWebhook measures decode + convert + consume of real EventLists through the webhook
// handler (no network): Metadata level, and the recorded RequestResponse deployment scenario
// replayed into a fresh converter each time so that every update is really diffed.
func BenchmarkWebhook(b *testing.B) {
	b.Run("Metadata", func(b *testing.B) {
		body, n := metadataBatch(b)
		_, h := benchReceiver(b)
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			post(b, h, body)
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("RequestResponse", func(b *testing.B) {
		bodies := fixtureBodies(b, "deployment")
		events, size := 0, 0
		for _, body := range bodies {
			evs, err := decodeBody(body)
			if err != nil {
				b.Fatal(err)
			}
			events += len(evs)
			size += len(body)
		}
		r, h := benchReceiver(b)
		b.SetBytes(int64(size))
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			r.conv = newConverter(r.cfg, "bench", nil)
			for _, body := range bodies {
				post(b, h, body)
			}
		}
		b.ReportMetric(float64(events)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
}

// BenchmarkReplay posts every recorded webhook body of every scenario through one long-lived
// receiver, each pass with every auditID rewritten (same length), as make bench-audit does end
// to end: after the first pass the writes are no-ops of known objects, the steady state of a
// replayed stream. It reports CPU time and bytes allocated per posted event.
func BenchmarkReplay(b *testing.B) {
	variants, events := replayVariants(b)
	_, h := benchReceiver(b)
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for b.Loop() {
		for _, body := range variants[n%len(variants)] {
			post(b, h, body)
		}
		n++
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(events*b.N), "µs/event")
}

// replayVariants returns every recorded webhook body of every scenario in 64 variants, each
// with every auditID rewritten (same length), and the number of events of one variant.
func replayVariants(b *testing.B) ([][][]byte, int) {
	paths, err := filepath.Glob(filepath.Join(fixturesDir, "*", "audit-webhook", "*.json"))
	if err != nil || len(paths) == 0 {
		b.Fatal("no recorded bodies")
	}
	slices.Sort(paths)
	var bodies [][]byte
	events := 0
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			b.Fatal(err)
		}
		evs, err := decodeBody(data)
		if err != nil {
			b.Fatal(err)
		}
		events += len(evs)
		bodies = append(bodies, data)
	}
	const passes = 64
	variants := make([][][]byte, passes)
	for p := range variants {
		for _, body := range bodies {
			variants[p] = append(variants[p], auditIDPattern.ReplaceAllFunc(body, func(m []byte) []byte {
				out := slices.Clone(m)
				copy(out[len(`"auditID":"`):], fmt.Sprintf("%08x", p))
				return out
			}))
		}
	}
	return variants, events
}

// BenchmarkSpanFloor measures what the spans of a replayed pass cost whoever builds them: the
// receiver's own output in BenchmarkReplay's steady state (a pass after the first), copied into
// new pdata (pdata: CopyTo allocates every span, event, attribute and value wrapper a builder
// must, but shares the strings, so it is a lower bound of building them) and encoded as OTLP
// protobuf (otlp: what the otlp exporter does before gRPC frames it). Per posted event, next to
// BenchmarkReplay's figure: the part of the audit path no decoder can save.
func BenchmarkSpanFloor(b *testing.B) {
	variants, events := replayVariants(b)
	sink := new(consumertest.TracesSink)
	_, h := benchReceiverTo(b, sink)
	for pass := range 2 {
		sink.Reset()
		for _, body := range variants[pass] {
			post(b, h, body)
		}
	}
	batches, spans := sink.AllTraces(), sink.SpanCount()
	if spans == 0 {
		b.Fatal("a replayed pass gave no span")
	}
	var marshaler ptrace.ProtoMarshaler
	encoded := 0
	for _, td := range batches {
		encoded += marshaler.TracesSize(td)
	}
	perEvent := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(events*b.N), "µs/event")
		b.ReportMetric(float64(spans)/float64(events), "spans/event")
		b.ReportMetric(float64(encoded)/float64(spans), "OTLP-B/span")
	}
	b.Run("pdata", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, td := range batches {
				td.CopyTo(ptrace.NewTraces())
			}
		}
		perEvent(b)
	})
	b.Run("otlp", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, td := range batches {
				if _, err := marshaler.MarshalTraces(td); err != nil {
					b.Fatal(err)
				}
			}
		}
		perEvent(b)
	})
}

var auditIDPattern = regexp.MustCompile(`"auditID":"[0-9a-f]{8}`)

// BenchmarkScanMeta scans every recorded request and response body of every scenario for
// identity, owner, the trace-context annotation and a Pod's node: the per-body work of the
// hot path, without the rest of the conversion's noise.
func BenchmarkScanMeta(b *testing.B) {
	paths, err := filepath.Glob(filepath.Join(fixturesDir, "*", "audit-webhook", "*.json"))
	if err != nil || len(paths) == 0 {
		b.Fatal("no webhook captures")
	}
	var bodies [][]byte
	size := 0
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			b.Fatal(err)
		}
		evs, err := decodeBody(data)
		if err != nil {
			b.Fatal(err)
		}
		for _, ev := range evs {
			for _, raw := range [][]byte{ev.RequestObject, ev.ResponseObject} {
				if hasBody(raw) {
					bodies = append(bodies, raw)
					size += len(raw)
				}
			}
		}
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		for _, raw := range bodies {
			scanMeta(raw, model.DefaultTraceContextAnnotation)
		}
	}
}

// BenchmarkDecodeCapture decodes the benchmark capture that audits reads with their bodies
// (testbed/bench/requestresponse-deployment) both ways in one run, the responses the converter
// indexes indexed in both: every body validated, and, as the webhook reads them, the bodies of
// events the filters drop only delimited.
func BenchmarkDecodeCapture(b *testing.B) {
	bodies := webhookBodies(b, requestResponseCapture)
	events, size := 0, 0
	for _, data := range bodies {
		evs, err := decodeBody(data)
		if err != nil {
			b.Fatal(err)
		}
		events, size = events+len(evs), size+len(data)
	}
	conv := newConverter(createDefaultConfig().(*Config), "bench", nil)
	for _, mode := range []struct {
		name string
		r    bodyReader
	}{{"validate", bodyReader{index: true}}, {"delimit-dropped", bodyReader{conv: conv, index: true}}} {
		b.Run(mode.name, func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			pooled := new([]auditEvent)
			for b.Loop() {
				for _, body := range bodies {
					evs, err := decodeDocument(body, true, *pooled, mode.r)
					if err != nil {
						b.Fatal(err)
					}
					putEvents(pooled, evs)
				}
			}
			b.ReportMetric(float64(events)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkSkipBody finds the end of every list and get response of the same capture (the
// bodies the filters drop) by validating it and by delimiting it.
func BenchmarkSkipBody(b *testing.B) {
	var bodies [][]byte
	size := 0
	for _, data := range webhookBodies(b, requestResponseCapture) {
		evs, err := decodeBody(data)
		if err != nil {
			b.Fatal(err)
		}
		for _, ev := range evs {
			if readVerbs[ev.Verb] && hasBody(ev.ResponseObject) {
				bodies, size = append(bodies, ev.ResponseObject), size+len(ev.ResponseObject)
			}
		}
	}
	if len(bodies) == 0 {
		b.Fatal("no read responses in the capture")
	}
	for _, mode := range []struct {
		name string
		skip func([]byte) (int, error)
	}{
		{"validate", func(d []byte) (int, error) { return skipValue(d, 0, 0) }},
		{"delimit", func(d []byte) (int, error) { return delimitValue(d, 0) }},
	} {
		b.Run(mode.name, func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				for _, body := range bodies {
					if end, err := mode.skip(body); err != nil || end != len(body) {
						b.Fatalf("ended at %d of %d: %v", end, len(body), err)
					}
				}
			}
		})
	}
}

// BenchmarkDiffFlat diffs each recorded object's successive bodies (the pairs of one UID in
// arrival order, as the cache sees them) and encodes each body as a snapshot: the diff and
// snapshot work of the hot path, alone.
func BenchmarkDiffFlat(b *testing.B) {
	lastOf := map[string]int{}
	var flats []flatBody
	var pairs [][2]int
	for _, raw := range fixtureObjects(b) {
		f, ok := flatten(raw, nil)
		if !ok {
			b.Fatal("a recorded object does not index")
		}
		uid := f.meta("").UID
		if uid == "" {
			continue
		}
		if i, ok := lastOf[uid]; ok {
			pairs = append(pairs, [2]int{i, len(flats)})
		}
		lastOf[uid] = len(flats)
		flats = append(flats, f)
	}
	b.Run("diff", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, p := range pairs {
				diffFlat(&flats[p[0]], &flats[p[1]])
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(pairs)), "ns/pair")
	})
	b.Run("snapshot", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for i := range flats {
				encodeFlat(&flats[i])
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(flats)), "ns/body")
	})
}
