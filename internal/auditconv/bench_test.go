package auditconv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/kubetrail/kubetrail/internal/auditconv/auditconvtest"
	"github.com/kubetrail/kubetrail/internal/auditconv/internal/jsonscan"
	"github.com/kubetrail/kubetrail/internal/model"
)

// BenchmarkScanMeta scans every recorded request and response body of every scenario for
// identity, owner, the trace-context annotation and a Pod's node: the per-body work of the
// hot path, without the rest of the conversion's noise.
func BenchmarkScanMeta(b *testing.B) {
	paths, err := filepath.Glob(filepath.Join(auditconvtest.FixturesDir(), "*", "audit-webhook", "*.json"))
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
	keys := newContextKeys(model.DefaultTraceContextAnnotations())
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		for _, raw := range bodies {
			scanMeta(raw, keys)
		}
	}
}

// BenchmarkDecodeCapture decodes the benchmark capture that audits reads with their bodies
// (testbed/bench/requestresponse-deployment) both ways in one run, the responses the converter
// indexes indexed in both: every body validated, and, as the webhook reads them, the bodies of
// events the filters drop only delimited.
func BenchmarkDecodeCapture(b *testing.B) {
	bodies := auditconvtest.WebhookBodies(b, auditconvtest.RequestResponseCapture())
	events, size := 0, 0
	for _, data := range bodies {
		evs, err := decodeBody(data)
		if err != nil {
			b.Fatal(err)
		}
		events, size = events+len(evs), size+len(data)
	}
	conv := newConverter(defaultSettings(), "bench")
	for _, mode := range []struct {
		name string
		r    bodyReader
	}{{"validate", bodyReader{index: true}}, {"delimit-dropped", bodyReader{filter: &conv.filters, index: true}}} {
		b.Run(mode.name, func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			pooled := new([]Event)
			for b.Loop() {
				for _, body := range bodies {
					evs, err := decodeDocument(body, true, false, *pooled, mode.r)
					if err != nil {
						b.Fatal(err)
					}
					PutEvents(pooled, evs)
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
	for _, data := range auditconvtest.WebhookBodies(b, auditconvtest.RequestResponseCapture()) {
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
		{"validate", func(d []byte) (int, error) { return jsonscan.SkipValue(d, 0, 0) }},
		{"delimit", func(d []byte) (int, error) { return jsonscan.DelimitValue(d, 0) }},
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
		uid := f.meta(nil).UID
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

// BenchmarkSharedDiffBase converts every recorded scenario's events in batches of 50 with the
// diff cache alone and with the shared diff base on the real redis-server (one replica; two
// replicas dealt the batches in turn), each run from empty converters and an empty key prefix:
// what sharing costs per event, in CPU of this process while it converts (starting and closing
// the clients left out), and what it saves in skipped diffs.
func BenchmarkSharedDiffBase(b *testing.B) {
	requireSharedRedis(b)
	var events []Event
	for _, s := range scenarios(b) {
		events = append(events, scenarioEvents(b, s)...)
	}
	const batch = 50
	for _, bc := range []struct {
		name     string
		replicas int
		shared   bool
	}{{"local/1", 1, false}, {"local/2", 2, false}, {"shared/1", 1, true}, {"shared/2", 2, true}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			skipped := 0
			var cpu time.Duration // of the conversions alone: not of starting and closing clients
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				s := defaultSettings()
				if bc.shared {
					s = sharedSettings(b, sharedRedisAddr)
				}
				convs := make([]*Converter, bc.replicas)
				for r := range convs {
					convs[r] = New(Options{Settings: *s})
					if err := convs[r].Start(context.Background()); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				cpu0 := processCPU()
				for j, n := 0, 0; j < len(events); j, n = j+batch, n+1 {
					var st Stats
					convs[n%len(convs)].convert(goldenCluster, events[j:min(j+batch, len(events))], &st)
					skipped += st.SkippedDiffs(ReasonDiffBaseNotSeen)
				}
				cpu += processCPU() - cpu0
				b.StopTimer()
				for _, c := range convs {
					_ = c.Close()
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*len(events)), "cpu-ns/event")
			b.ReportMetric(float64(skipped)/float64(b.N), "skipped-diffs/op")
		})
	}
}

// processCPU is the CPU time this process has used, user and system: a benchmark that waits on
// Redis reports what it spent, not what it waited.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkHistoryMemory keeps objects with a full write history (a create and seven updates,
// each with the apiserver's UUID auditID and decimal resourceVersions) and, in "tombstones",
// then deletes them: what each kept object costs the heap and what the cache charges for it.
func BenchmarkHistoryMemory(b *testing.B) {
	const objects, updates = 2000, 7
	for _, deleted := range []bool{false, true} {
		name := "live"
		if deleted {
			name = "tombstones"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			var bodies [][]byte
			for i := range objects {
				bodies = append(bodies, historyEvents(i, updates, deleted)...)
			}
			var heap, charged int64
			for b.Loop() {
				before := heapAfterGC()
				c := New(Options{Settings: *defaultSettings(), ScopeName: goldenScope})
				for _, body := range bodies {
					feed(b, c, body)
				}
				heap = heapAfterGC() - before
				c.cache.mu.Lock()
				var n int
				charged, n = c.cache.bytes, len(c.cache.entries)
				c.cache.mu.Unlock()
				if n != objects {
					b.Fatalf("cache holds %d objects, want %d", n, objects)
				}
				runtime.KeepAlive(c)
			}
			b.ReportMetric(float64(heap)/objects, "heap-B/object")
			b.ReportMetric(float64(charged)/objects, "charged-B/object")
		})
	}
}

// historyEvents is ConfigMap i's create, its updates and, when deleted, its deletion, one
// audit event per body.
func historyEvents(i, updates int, deleted bool) [][]byte {
	uid := fmt.Sprintf("6f1c2a3b-4d5e-4f60-8a7b-%012x", i)
	rv := 1000 + i*100
	obj := func(rv int) string {
		return fmt.Sprintf(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm-%d","namespace":"ns","uid":%q,"resourceVersion":"%d"},"data":{"k":"v%d"}}`,
			i, uid, rv, rv)
	}
	event := func(n int, verb, uri, req, resp string, code int) []byte {
		s := fmt.Sprintf(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"RequestResponse","auditID":"0b6c1e2f-3a4d-4e5f-9a6b-%06x%06x","stage":"ResponseComplete","requestURI":%q,"verb":%q,
"user":{"username":"alice"},"sourceIPs":["10.0.0.7"],"userAgent":"test/v1",
"objectRef":{"resource":"configmaps","namespace":"ns","name":"cm-%d","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":%d},`,
			i, n, uri, verb, i, code)
		if req != "" {
			s += `"requestObject":` + req + `,`
		}
		if resp != "" {
			s += `"responseObject":` + resp + `,`
		}
		return []byte(s + `"requestReceivedTimestamp":"2026-11-21T10:45:54.106207Z","stageTimestamp":"2026-11-21T10:45:54.109001Z"}`)
	}
	item := fmt.Sprintf("/api/v1/namespaces/ns/configmaps/cm-%d", i)
	out := [][]byte{event(0, "create", "/api/v1/namespaces/ns/configmaps", "", obj(rv), 201)}
	for n := 1; n <= updates; n++ {
		out = append(out, event(n, "update", item, obj(rv), obj(rv+1), 200))
		rv++
	}
	if deleted {
		out = append(out, event(updates+1, "delete", item, "", "", 200))
	}
	return out
}

// heapAfterGC is the live heap after two collections (the second frees what the first's
// finalizers let go).
func heapAfterGC() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
