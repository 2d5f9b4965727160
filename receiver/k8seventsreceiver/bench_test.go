package k8seventsreceiver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/receiver/k8seventsreceiver/internal/metadata"
)

// benchEvents are realistic Events: a scheduler note, a UUID, managedFields as the apiserver
// returns them.
func benchEvents(n int) []*eventsv1.Event {
	evs := make([]*eventsv1.Event, n)
	for i := range evs {
		uid := fmt.Sprintf("%08x-7f06-47c9-b26f-2a710af8cb81", i)
		evs[i] = testEvent(uid, strconv.Itoa(1000+i), withNamespace(fmt.Sprintf("team-%d", i%10)), func(ev *eventsv1.Event) {
			ev.Name = fmt.Sprintf("web-%d.18ea099874f8915f", i)
			ev.Regarding.Name = fmt.Sprintf("web-%d", i)
			ev.Regarding.UID = types.UID(fmt.Sprintf("%08x-0000-47c9-b26f-2a710af8cb81", i))
		})
	}
	return evs
}

// BenchmarkEventToSpan measures one Event version through the tracker and the converter, in
// batches of maxBatchItems like the pipeline.
func BenchmarkEventToSpan(b *testing.B) {
	evs := benchEvents(maxBatchItems)
	tm := newTelemetry(b)
	conv := &converter{cluster: "bench", mapper: model.BuiltinMapper(), window: model.DefaultWindow}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var spans int
	for i := 0; i < b.N; {
		tr := newTracker(tm.set.Logger, tm.tb, time.Now, 0, nil)
		builder := model.NewTracesBuilder(metadata.ScopeName, "bench")
		for j := 0; j < len(evs) && i < b.N; j, i = j+1, i+1 {
			ev, _ := strip(evs[j])
			item, _ := tr.observe(ev, false)
			for _, s := range item.spans {
				conv.appendSpan(builder, s)
			}
		}
		spans += builder.SpanCount()
	}
	elapsed := time.Since(start).Seconds()
	b.ReportMetric(float64(b.N)/elapsed, "events/s")
	b.ReportMetric(float64(spans)/elapsed, "spans/s")
}

// BenchmarkLiveEventsMemory reports the heap the receiver holds for 100k live Events: the
// tracker's state, which is all it keeps between versions. For comparison it also reports what
// the same Events cost as full objects (what an unstripped informer store would hold) and as
// stripped objects (what the watch-list buffer holds while the initial stream arrives). The
// Events are decoded from a real one recorded by the testbed (a SuccessfulCreate with its
// managedFields), each with its own UID, name and resourceVersion.
func BenchmarkLiveEventsMemory(b *testing.B) {
	const n = 100_000
	template := realEventJSON(b)
	decode := func() []*eventsv1.Event {
		evs := make([]*eventsv1.Event, n)
		for i := range evs {
			ev := new(eventsv1.Event)
			if err := json.Unmarshal(template, ev); err != nil {
				b.Fatal(err)
			}
			ev.UID = types.UID(fmt.Sprintf("%08x-7f06-47c9-b26f-2a710af8cb81", i))
			ev.Name = fmt.Sprintf("demo-65b6865b5c.%016x", i)
			ev.ResourceVersion = strconv.Itoa(1000 + i)
			evs[i] = ev
		}
		return evs
	}
	tm := newTelemetry(b)
	for b.Loop() {
		var full []*eventsv1.Event
		fullBytes := heapAfter(func() any { full = decode(); return full })
		strippedBytes := heapAfter(func() any {
			s := make([]*eventsv1.Event, n)
			for i, ev := range full {
				s[i], _ = strip(ev)
				// A stripped copy outlives the decoded object: count its own strings.
				s[i].Note = strings.Clone(s[i].Note)
			}
			return s
		})
		trackerBytes := heapAfter(func() any {
			tr := newTracker(tm.set.Logger, tm.tb, time.Now, 0, nil)
			for _, ev := range full {
				s, _ := strip(ev)
				// A decoded Event owns its strings; the tracker keeps the UID and the
				// resourceVersion alive, so count them.
				s.UID = types.UID(strings.Clone(string(s.UID)))
				s.ResourceVersion = strings.Clone(s.ResourceVersion)
				tr.observe(s, false)
			}
			return tr
		})
		b.ReportMetric(float64(trackerBytes)/n, "tracker-B/event")
		b.ReportMetric(float64(trackerBytes)/(1<<20), "tracker-MiB/100k")
		b.ReportMetric(float64(strippedBytes)/(1<<20), "stripped-MiB/100k")
		b.ReportMetric(float64(fullBytes)/(1<<20), "full-MiB/100k")
		runtime.KeepAlive(full)
	}
}

func realEventJSON(b *testing.B) []byte {
	b.Helper()
	data, err := os.ReadFile(filepath.Join(fixturesDir, "deployment", "events.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range bytes.Split(data, []byte("\n")) {
		var l struct {
			Object json.RawMessage `json:"object"`
		}
		if json.Unmarshal(line, &l) == nil && bytes.Contains(l.Object, []byte(`"SuccessfulCreate"`)) {
			return l.Object
		}
	}
	b.Fatal("no SuccessfulCreate Event in the deployment fixture")
	return nil
}

// heapAfter returns how much live heap the value built by build retains.
func heapAfter(build func() any) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	v := build()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(v)
	return after.HeapAlloc - before.HeapAlloc
}

// BenchmarkPendingSeriesMemory reports the heap an open series costs while it waits for its
// span: its latest stripped Event (a real recorded one, decoded afresh so that it owns its
// strings, as the watch's decoded objects do), the pending entry and its place in the LRU
// order, beyond the Event's tracker state. series_max_pending times this bounds the memory.
func BenchmarkPendingSeriesMemory(b *testing.B) {
	const n = 10_000
	template := realEventJSON(b)
	events := func(series bool) []*eventsv1.Event {
		evs := make([]*eventsv1.Event, n)
		for i := range evs {
			ev := new(eventsv1.Event)
			if err := json.Unmarshal(template, ev); err != nil {
				b.Fatal(err)
			}
			ev.UID = types.UID(fmt.Sprintf("%08x-7f06-47c9-b26f-2a710af8cb81", i))
			ev.Name = fmt.Sprintf("demo-65b6865b5c.%016x", i)
			ev.ResourceVersion = strconv.Itoa(1000 + i)
			if series {
				ev.Series = &eventsv1.EventSeries{Count: 2, LastObservedTime: ev.EventTime}
			}
			s, _ := strip(ev)
			raw, err := json.Marshal(s)
			if err != nil {
				b.Fatal(err)
			}
			evs[i] = new(eventsv1.Event)
			if err := json.Unmarshal(raw, evs[i]); err != nil {
				b.Fatal(err)
			}
		}
		return evs
	}
	tm := newTelemetry(b)
	// Each measurement decodes its Events inside, so that it counts only what the tracker
	// retains of them: the state of a single occurrence, the state and the Event of a series.
	track := func(series bool) uint64 {
		return heapAfter(func() any {
			tr := newTracker(tm.set.Logger, tm.tb, time.Now, 0, nil)
			for _, ev := range events(series) {
				tr.observe(ev, false)
			}
			return tr
		})
	}
	for b.Loop() {
		base, pending := track(false), track(true)
		b.ReportMetric((float64(pending)-float64(base))/n, "pending-B/series")
		b.ReportMetric(float64(pending)/n, "tracker-with-series-B/event")
	}
}
