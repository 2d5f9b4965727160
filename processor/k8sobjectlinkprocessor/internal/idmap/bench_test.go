package idmap

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/kubetrail/kubetrail/internal/model"
)

// BenchmarkMemoryAssignmentsHolding1M measures what the memory backend keeps per live
// object-window proper (the processor's BenchmarkMemoryIDMapHolding1MObjectWindows measures all
// the records an object leaves): one assignment record (key of a UID-keyed object and window, 32-byte
// value). Run with -benchtime=1x.
func BenchmarkMemoryAssignmentsHolding1M(b *testing.B) {
	const records = 1_000_000
	for range min(b.N, 1) { // one fill whatever b.N says: the figure is per record, not per iteration
		clk := newFakeClock(time.Now())
		m := NewMemoryStore(MemoryConfig{MaxEntries: records, MaxBytes: 1 << 30}, clk.Now, nil)
		w := model.WindowStart(clk.Now(), model.DefaultWindow)
		value := Assignment{TraceID: model.ObjectTraceID("x", w), SpanID: model.ObjectSpanID("x", w)}.Encode()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		ops := make([]Op, 1000)
		for i := 0; i < records; i += len(ops) {
			for j := range ops {
				key := model.UIDKey("prod-eu-1", fmt.Sprintf("9c8b7a6d-0000-4000-8000-%012d", i+j))
				ops[j] = Op{Kind: OpSetIfAbsent, Key: AssignmentKey(key, w), Value: value, ExpireAt: w.Add(time.Hour)}
			}
			_ = m.Do(context.Background(), ops)
		}
		clear(ops)
		runtime.GC()
		runtime.ReadMemStats(&after)
		if m.Len() != records {
			b.Fatalf("holding %d records, want %d", m.Len(), records)
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/records, "B/object-window")
		runtime.KeepAlive(m)
	}
}

// BenchmarkDuplicateMarks measures a span's duplicate check in a full set of a million marks in
// eight generations, as a collector at a steady thousand spans a second holds after 17 minutes:
// one set-if-absent of a mark never seen, which looks in every generation. The clock moves a
// second every thousand marks, so generations are sealed and dropped as the benchmark runs.
func BenchmarkDuplicateMarks(b *testing.B) {
	const held = 1_000_000
	clk := newFakeClock(time.Now())
	m := NewMemoryStore(MemoryConfig{MaxEntries: held, MaxBytes: 1 << 20}, clk.Now, nil)
	ops := make([]Op, 1)
	next := uint64(0)
	mark := func() {
		var id pcommon.SpanID
		next++
		binary.LittleEndian.PutUint64(id[:], next*0x9E3779B97F4A7C15)
		ops[0] = Op{Kind: OpSetIfAbsent, Key: DedupKey(id), ExpireAt: clk.Now().Add(35 * time.Minute)}
		_ = m.Do(context.Background(), ops)
		if ops[0].Found {
			b.Fatal("a new mark found")
		}
		if next%1000 == 0 {
			clk.Advance(time.Second)
		}
	}
	for range held {
		mark()
	}
	b.ResetTimer()
	for b.Loop() {
		mark()
	}
}
