package k8sobjectlinkprocessor

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/idmap"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/metadata"
)

// benchFleet is a namespace of Deployments, each with one ReplicaSet and podsPerRS Pods.
type benchFleet struct {
	deploys, rss []model.Object
	pods         []model.Object
	apiserver    bool // batches carry audit IDs and the apiserver's request spans
}

func newBenchFleet(deployments, podsPerRS int) *benchFleet {
	f := &benchFleet{}
	for d := range deployments {
		dep := deploy
		dep.Name, dep.UID = fmt.Sprintf("app-%d", d), fmt.Sprintf("5f0c3a1e-0000-4000-8000-%012d", d)
		rs := rsA
		rs.Name, rs.UID, rs.Owner = dep.Name+"-6d4b", fmt.Sprintf("7a1d2b3c-0000-4000-8000-%012d", d), ownerOf(dep)
		f.deploys, f.rss = append(f.deploys, dep), append(f.rss, rs)
		for p := range podsPerRS {
			pod := podA1
			pod.Name, pod.UID, pod.Owner = fmt.Sprintf("%s-%05d", rs.Name, p), fmt.Sprintf("9c8b7a6d-%04d-4000-8000-%012d", p, d), ownerOf(rs)
			f.pods = append(f.pods, pod)
		}
	}
	return f
}

// batchAt is one realistic audit/event batch: mostly spans about objects already seen (Pod
// status updates, Events naming only the Pod), a fifth about objects new to the processor.
func (f *benchFleet) batchAt(i, size int, at time.Time) ptrace.Traces {
	acts := make([]activity, 0, size)
	var requests []ptrace.Traces
	for j := range size {
		n := i*size + j
		id := fmt.Sprintf("audit-%d", n)
		switch j % 5 {
		case 0: // a Pod never seen before, with its owner (the replicaset-controller's create)
			rs := f.rss[j%len(f.rss)]
			pod := podA1
			pod.Name, pod.UID, pod.Owner = fmt.Sprintf("%s-new-%d", rs.Name, n), fmt.Sprintf("1e2d3c4b-0000-4000-8000-%012d", n), ownerOf(rs)
			acts = append(acts, audit(pod, id, at))
		case 1: // an Event about a known Pod: no owner on the span, the relation knows it
			acts = append(acts, event(withoutOwner(f.pods[j%len(f.pods)]), id, at))
		case 2:
			acts = append(acts, audit(f.rss[j%len(f.rss)], id, at))
		default:
			acts = append(acts, audit(f.pods[j%len(f.pods)], id, at))
		}
		if f.apiserver && j%5 != 1 {
			// Audit spans carry their audit ID, and the apiserver's request spans arrive for
			// half of them one batch later and for the other half one batch earlier.
			a := &acts[len(acts)-1]
			a.with = func(s ptrace.Span) { s.Attributes().PutStr(model.AttrAuditID, id) }
			other := n - size
			if j%2 == 1 {
				other = n + size
			}
			requests = append(requests, apiserverRequest(fmt.Sprintf("audit-%d", other), uint64(other+1), at))
		}
	}
	td := batch(acts...)
	for _, r := range requests {
		r.ResourceSpans().MoveAndAppendTo(td.ResourceSpans())
	}
	return td
}

func benchProcess(b *testing.B, cfg *Config, parallel int, apiserver bool) {
	const batchSize = 200
	fleet := newBenchFleet(100, 50)
	fleet.apiserver = apiserver
	cfg.APIServerJoin.Enabled = apiserver
	clk := newFakeClock(time.Now())
	p, err := newProcessor(processortest.NewNopSettings(metadata.Type), cfg, consumertest.NewNop(), clk)
	if err != nil {
		b.Fatal(err)
	}
	if err := p.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	at := model.WindowStart(clk.Now(), cfg.Window).Add(time.Minute)
	// Warm up: the fleet's RS and Deployments are known, as in a running collector.
	var warm []activity
	for k, rs := range fleet.rss {
		warm = append(warm, audit(fleet.deploys[k], fmt.Sprintf("warm-d-%d", k), at), audit(rs, fmt.Sprintf("warm-rs-%d", k), at))
	}
	if err := p.ConsumeTraces(trustedCtx, batch(warm...)); err != nil {
		b.Fatal(err)
	}
	var rtBefore int64
	if p.redis != nil {
		rtBefore = p.redis.RoundTrips()
	}
	// Building a batch is the receiver's cost, not ours: it happens outside the measured calls.
	// (Pre-building all b.N batches instead would keep hundreds of MB of pdata live and measure
	// the garbage collector scanning it.)
	b.ReportAllocs()
	b.ResetTimer()
	var next atomic.Int64
	var spans atomic.Int64
	busy := make([]time.Duration, max(parallel, 1))
	var cpu time.Duration
	var wg sync.WaitGroup
	for w := range busy {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				if parallel <= 1 {
					b.StopTimer()
				}
				td := fleet.batchAt(int(i), batchSize, at)
				spans.Add(int64(td.SpanCount()))
				if parallel <= 1 {
					b.StartTimer()
				}
				c0, t0 := processCPU(), time.Now()
				if err := p.ConsumeTraces(trustedCtx, td); err != nil {
					b.Error(err)
					return
				}
				busy[w] += time.Since(t0)
				if parallel <= 1 {
					cpu += processCPU() - c0
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	// Wall throughput: spans over the busiest worker's time inside ConsumeTraces.
	b.ReportMetric(float64(spans.Load())/slices.Max(busy).Seconds(), "spans/s")
	if parallel <= 1 {
		// Per CPU-second of this process (GC and the Redis client included, the Redis server
		// not): the per-core figure, far less sensitive to other load on a shared machine.
		b.ReportMetric(float64(spans.Load())/cpu.Seconds(), "spans/cpu-s")
	}
	if p.redis != nil {
		b.ReportMetric(float64(p.redis.RoundTrips()-rtBefore)/float64(b.N), "roundtrips/batch")
	}
}

func BenchmarkProcess(b *testing.B) {
	redisCfg := func(b *testing.B) *Config {
		requireRedis(b)
		cfg := memoryConfig()
		cfg.IDMap.Backend = BackendRedis
		cfg.IDMap.Redis.Addresses = []string{redisAddr}
		cfg.IDMap.Redis.KeyPrefix = fmt.Sprintf("kubetrail-bench:%d:", time.Now().UnixNano())
		cleanupPrefix(b, redisAddr, cfg.IDMap.Redis.KeyPrefix)
		return cfg
	}
	b.Run("memory", func(b *testing.B) { benchProcess(b, memoryConfig(), 1, false) })
	b.Run("redis", func(b *testing.B) { benchProcess(b, redisCfg(b), 1, false) })
	b.Run("redis-4-concurrent-batches", func(b *testing.B) { benchProcess(b, redisCfg(b), 4, false) })
	// With the apiserver's request spans (KEP-647) joined to the audit spans: the same round
	// trips per batch as without them (the join's Redis records ride on the batch's own).
	b.Run("redis-with-apiserver-spans", func(b *testing.B) { benchProcess(b, redisCfg(b), 1, true) })
}

// processCPU is the user+system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkMemoryIDMapHolding1MObjectWindows measures the heap one live object-window costs:
// one million Pods, each seen once in one window, through the processor (assignment, relation,
// name index and the dedup mark of the span that introduced it). Run with -benchtime=1x.
func BenchmarkMemoryIDMapHolding1MObjectWindows(b *testing.B) {
	const objects = 1_000_000
	// One fill whatever b.N says (-benchtime 2000x across the package must not mean 2000 fills):
	// the figures are per object, not per iteration.
	for range min(b.N, 1) {
		cfg := memoryConfig()
		cfg.IDMap.Memory.MaxEntries = 10 * objects
		cfg.IDMap.Memory.MaxBytes = 4 << 30
		clk := newFakeClock(time.Now())
		p, err := newProcessor(processortest.NewNopSettings(metadata.Type), cfg, consumertest.NewNop(), clk)
		if err != nil {
			b.Fatal(err)
		}
		at := model.WindowStart(clk.Now(), cfg.Window).Add(time.Minute)
		rs := rsA
		var before runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		const per = 1000
		for i := 0; i < objects; i += per {
			acts := make([]activity, 0, per)
			for j := range per {
				pod := podA1
				pod.Name, pod.UID, pod.Owner = fmt.Sprintf("web-6d4b-%07d", i+j), fmt.Sprintf("9c8b7a6d-0000-4000-8000-%012d", i+j), ownerOf(rs)
				acts = append(acts, audit(pod, fmt.Sprintf("a-%d", i+j), at))
			}
			if err := p.ConsumeTraces(trustedCtx, batch(acts...)); err != nil {
				b.Fatal(err)
			}
		}
		var after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&after)
		mem := p.store.(*idmap.MemoryStore)
		entries := mem.Len()
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/objects, "B/object-window")
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(entries), "B/record")
		b.ReportMetric(float64(entries)/objects, "records/object-window")
		runtime.KeepAlive(p)
		_ = p.Shutdown(context.Background())
	}
}
