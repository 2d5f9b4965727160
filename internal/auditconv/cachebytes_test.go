package auditconv

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/kubetrail/kubetrail/internal/auditconv/auditconvtest"

	"go.opentelemetry.io/collector/component/componenttest"
)

// configMapEvent is a RequestResponse create of ConfigMap i whose data is size bytes.
func configMapEvent(i, size int) string {
	data := make([]byte, size)
	for j := range data {
		data[j] = 'a' + byte((i+j)%26)
	}
	body := fmt.Sprintf(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm-%d","namespace":"ns","uid":"u-%d","resourceVersion":"%d"},"data":{"blob":%q}}`,
		i, i, 100+i, data)
	return fmt.Sprintf(`{"level":"RequestResponse","auditID":"a-%d","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/ns/configmaps","verb":"create",
"user":{"username":"alice"},"sourceIPs":["10.0.0.7"],"userAgent":"test/v1",
"objectRef":{"resource":"configmaps","namespace":"ns","name":"cm-%d","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":201},
"responseObject":%s,
"requestReceivedTimestamp":"2026-11-21T10:45:54.106207Z","stageTimestamp":"2026-11-21T10:45:54.109001Z"}`, i, i, body)
}

// feed decodes and converts one body, as a door would.
func feed(t testing.TB, c *Converter, body []byte) {
	t.Helper()
	pooled := GetEvents()
	events, err := c.DecodeBody(body, *pooled)
	defer PutEvents(pooled, events)
	if err != nil {
		t.Fatal(err)
	}
	var st Stats
	c.Convert("testbed", events, &st)
}

// startConverter is a Converter of the default settings, changed by mutate, whose cache
// counts with instruments of the given names in a test telemetry.
func startConverter(t *testing.T, mutate func(*Settings)) (*Converter, *componenttest.Telemetry) {
	t.Helper()
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	m := tel.NewTelemetrySettings().MeterProvider.Meter("auditconv")
	var ins Telemetry
	var err error
	for _, e := range []error{
		func() error {
			ins.CacheObjects, err = m.Int64UpDownCounter("otelcol_k8s_audit_diff_cache_objects")
			return err
		}(),
		func() error {
			ins.CacheBytes, err = m.Int64UpDownCounter("otelcol_k8s_audit_diff_cache_bytes")
			return err
		}(),
		func() error {
			ins.CacheEvictions, err = m.Int64Counter("otelcol_k8s_audit_diff_cache_evictions")
			return err
		}(),
	} {
		if e != nil {
			t.Fatal(e)
		}
	}
	s := defaultSettings()
	if mutate != nil {
		mutate(s)
	}
	return New(Options{Settings: *s, ScopeName: goldenScope, Telemetry: ins}), tel
}

// checkAccounting asserts that the bytes the cache counts are the sum of its entries'
// footprints, within the bound, and what the metric reports.
func checkAccounting(t *testing.T, r *Converter, tel *componenttest.Telemetry) int64 {
	t.Helper()
	c := r.cache
	c.mu.Lock()
	var sum int64
	n := 0
	for e := c.root.next; e != &c.root; e = e.next {
		sum += e.footprint()
		n++
	}
	charged, entries := c.bytes, len(c.entries)
	c.mu.Unlock()
	if n != entries {
		t.Fatalf("LRU list has %d entries, map %d", n, entries)
	}
	if charged != sum {
		t.Fatalf("cache counts %d bytes, its entries' footprints sum to %d", charged, sum)
	}
	if charged > c.maxBytes {
		t.Fatalf("cache holds %d bytes, bound %d", charged, c.maxBytes)
	}
	if got := auditconvtest.MetricSum(t, tel, "otelcol_k8s_audit_diff_cache_bytes", ""); got != charged {
		t.Fatalf("otelcol_k8s_audit_diff_cache_bytes = %d, cache holds %d", got, charged)
	}
	if got := auditconvtest.MetricSum(t, tel, "otelcol_k8s_audit_diff_cache_objects", ""); got != int64(entries) {
		t.Fatalf("otelcol_k8s_audit_diff_cache_objects = %d, cache holds %d", got, entries)
	}
	return charged
}

func TestManyLargeBodiesStayWithinTheByteBound(t *testing.T) {
	const bound = 4 << 20
	r, tel := startConverter(t, func(cfg *Settings) { cfg.DiffCacheMaxBytes = bound })
	// 240 ConfigMaps of 100 KB each, 8 per batch: 24 MB of bodies, all among the most
	// recently written (kept parsed), against a 4 MiB bound.
	const objects, size, perBatch = 240, 100_000, 8
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := 0; i < objects; i += perBatch {
		items := make([]string, perBatch)
		for j := range items {
			items[j] = configMapEvent(i+j, size)
		}
		feed(t, r, []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":[`+strings.Join(items, ",")+`]}`))
	}
	// Twice: the first collection moves what sync.Pools hold (a batch's body buffer, index
	// nodes) to their victim caches, the second frees it; what a pool keeps is not retained.
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	// The runtime's word, not the cache's own accounting: what stays on the heap after the
	// batches is the cache, within its bound, plus a little (connections, telemetry).
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > bound+(2<<20) {
		t.Fatalf("heap grew by %d bytes for a cache bounded at %d", grown, bound)
	}
	charged := checkAccounting(t, r, tel)
	if charged < bound/2 {
		t.Fatalf("cache holds %d bytes: the bound should be close to full", charged)
	}
	if n := auditconvtest.MetricSum(t, tel, "otelcol_k8s_audit_diff_cache_evictions", reasonEvictedBytes); n == 0 {
		t.Fatal("no evictions counted with reason bytes")
	}
	if n := auditconvtest.MetricSum(t, tel, "otelcol_k8s_audit_diff_cache_evictions", reasonEvictedCount); n != 0 {
		t.Fatalf("%d evictions counted with reason count, under a count bound never reached", n)
	}
	// The most recent objects are the ones kept.
	r.cache.mu.Lock()
	newest := r.cache.root.next
	r.cache.mu.Unlock()
	if want := fmt.Sprintf("/cm-%d", objects-1); !strings.HasSuffix(newest.key, want) || !newest.hasBody() {
		t.Fatalf("most recent entry %q (body %v), want the last ConfigMap with its body", newest.key, newest.hasBody())
	}
}

func TestCacheAccountingHoldsOverTheFixtures(t *testing.T) {
	// Creates, updates, scales, conflicts, deletions and recreations of every fixture through
	// a cache far smaller than them: whatever path an entry takes, the bytes stay counted.
	r, tel := startConverter(t, func(cfg *Settings) { cfg.DiffCacheMaxBytes = 24 << 10 })
	for _, scenario := range []string{"conflict", "deployment", "job", "recreate", "secret", "unschedulable"} {
		for _, body := range auditconvtest.FixtureBodies(t, scenario) {
			feed(t, r, body)
			checkAccounting(t, r, tel)
		}
	}
	if n := auditconvtest.MetricSum(t, tel, "otelcol_k8s_audit_diff_cache_evictions", reasonEvictedBytes); n == 0 {
		t.Fatal("the fixtures should not fit in 24 KiB")
	}
}

// testBody is a ConfigMap body of about size bytes.
func testBody(name string, size int) []byte {
	return fmt.Appendf(nil, `{"kind":"ConfigMap","metadata":{"name":%q},"data":{"v":%q}}`, name, strings.Repeat("x", size))
}

func TestByteBoundEvictsTheLeastRecentlyUsed(t *testing.T) {
	var evictions []string
	c := newObjectCache(1000, nil)
	put := func(key string, size int) *cacheEntry {
		e := c.entry(key, "")
		c.setBody(e, testBody(key, size), nil)
		return e
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	one := put("probe", 10_000).cost
	c.remove(c.entries["probe"])
	// Room for three such entries, not four.
	c.maxBytes, c.onEvict = 3*one+one/2, func(reason string) { evictions = append(evictions, reason) }

	put("a", 10_000)
	put("b", 10_000)
	put("c", 10_000)
	if len(evictions) != 0 {
		t.Fatalf("evictions %v while three fit", evictions)
	}
	c.get("a") // a is used again: b is now the least recently used
	put("d", 10_000)
	if c.entries["b"] != nil || c.entries["a"] == nil || c.entries["c"] == nil || c.entries["d"] == nil {
		t.Fatalf("after touching a and adding d: entries %v, want a, c, d", keysOf(c))
	}
	if strings.Join(evictions, ",") != evictBytes {
		t.Fatalf("evictions %v, want one for bytes", evictions)
	}

	// A body larger than the whole bound is not kept, and evicts nobody else for it.
	evictions = nil
	e := put("huge", int(4*one))
	if e.hasBody() || c.entries["huge"] == nil {
		t.Fatal("the oversized body must be dropped, its entry (writes, UID) kept")
	}
	if c.bytes > c.maxBytes {
		t.Fatalf("%d bytes over the bound %d", c.bytes, c.maxBytes)
	}
	if strings.Join(evictions, ",") != evictTooLarge {
		t.Fatalf("evictions %v, want only too_large", evictions)
	}
	if c.entries["a"] == nil || c.entries["c"] == nil || c.entries["d"] == nil {
		t.Fatalf("entries %v, want a, c, d kept", keysOf(c))
	}
}

func keysOf(c *objectCache) []string {
	var ks []string
	for e := c.root.next; e != &c.root; e = e.next {
		ks = append(ks, e.key)
	}
	return ks
}

func TestDiffCacheMaxBytesIsValidated(t *testing.T) {
	cfg := defaultSettings()
	if cfg.DiffCacheMaxBytes != 64<<20 {
		t.Fatalf("default diff_cache_max_bytes = %d, want 64 MiB", cfg.DiffCacheMaxBytes)
	}
	cfg.DiffCacheMaxBytes = 0
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "diff_cache_max_bytes") {
		t.Fatalf("diff_cache_max_bytes 0 with diffs on: %v, want an error naming the key", err)
	}
	cfg.DiffCacheSize = 0
	if err := cfg.Validate(); err != nil {
		t.Fatalf("diff_cache_max_bytes does not matter with diffs off: %v", err)
	}
}

// TestAGoneObjectsStorageTakesTheNextNewBody: the body storage of an entry the cache let go is
// the spare that the next object seen for the first time is compacted into; one too large to be
// worth keeping is not kept outside the cache's bytes.
func TestAGoneObjectsStorageTakesTheNextNewBody(t *testing.T) {
	r, tel := startConverter(t, func(cfg *Settings) { cfg.DiffCacheSize = 1 })
	c := r.cache
	bodyOf := func(name string) []byte {
		c.mu.Lock()
		defer c.mu.Unlock()
		for e := c.root.next; e != &c.root; e = e.next {
			if strings.HasSuffix(e.key, "/"+name) {
				return e.body
			}
		}
		return nil
	}
	list := func(ev string) []byte {
		return []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":[` + ev + `]}`)
	}
	feed(t, r, list(configMapEvent(0, 2000)))
	first := bodyOf("cm-0")
	if first == nil {
		t.Fatal("cm-0 is not cached")
	}
	feed(t, r, list(configMapEvent(1, 2000))) // evicts cm-0: a cache of one object
	second := bodyOf("cm-1")
	if bodyOf("cm-0") != nil || second == nil {
		t.Fatal("cm-1 should have taken cm-0's place")
	}
	if unsafe.SliceData(second) != unsafe.SliceData(first) {
		t.Fatal("cm-1's body did not take the storage cm-0's body left")
	}
	if !bytes.Contains(second, []byte(`"name":"cm-1"`)) || bytes.Contains(second, []byte(`cm-0`)) {
		t.Fatalf("cm-1's cached body is not its own: %.120s", second)
	}
	checkAccounting(t, r, tel)

	c.mu.Lock()
	defer c.mu.Unlock()
	c.spare = nil
	c.letGo(make([]byte, 10, maxSpareBytes+1))
	if c.spare != nil {
		t.Fatalf("a spare of %d bytes kept, bound %d", cap(c.spare), maxSpareBytes)
	}
	c.letGo(make([]byte, 10, maxSpareBytes))
	if cap(c.spare) != maxSpareBytes || len(c.spare) != 0 {
		t.Fatalf("the spare is %d of %d bytes, want the body let go, emptied", len(c.spare), cap(c.spare))
	}
}
