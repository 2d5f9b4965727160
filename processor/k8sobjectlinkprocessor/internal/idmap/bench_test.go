package idmap

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

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
