package k8seventsreceiver

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/receiver/k8seventsreceiver/internal/metadata"
)

// FuzzEventVersions feeds arbitrary pairs of Event versions through the tracker and the
// converter: whatever the apiserver (or a broken client) writes must not crash the receiver,
// a replayed version must never be a span, and every span must cover distinct occurrences.
func FuzzEventVersions(f *testing.F) {
	for _, scenario := range []string{"deployment", "unschedulable", "job"} {
		file, err := os.Open(filepath.Join(fixturesDir, scenario, "events.jsonl"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(file)
		sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
		var prev []byte
		for sc.Scan() {
			var l struct {
				Object json.RawMessage `json:"object"`
			}
			if json.Unmarshal(sc.Bytes(), &l) == nil {
				f.Add(prev, []byte(l.Object))
				prev = append([]byte(nil), l.Object...)
			}
		}
		file.Close()
	}
	f.Add([]byte(`{"metadata":{"uid":"u","resourceVersion":"1"},"regarding":{"kind":"Pod","name":"p"},"series":{"count":-5}}`),
		[]byte(`{"metadata":{"uid":"u","resourceVersion":"2"},"regarding":{"kind":"Pod","name":"p"},"deprecatedCount":2147483647,"deprecatedLastTimestamp":"2026-01-01T00:00:00Z"}`))

	tm := newTelemetry(f)
	f.Fuzz(func(t *testing.T, first, second []byte) {
		tr := newTracker(tm.set.Logger, tm.tb, time.Now, time.Minute, nil)
		conv := &converter{cluster: "fuzz", mapper: model.BuiltinMapper(), window: model.DefaultWindow}
		b := model.NewTracesBuilder(metadata.ScopeName, "fuzz")
		seen := map[string]bool{}
		for _, raw := range [][]byte{first, second, second} {
			var ev eventsv1.Event
			if json.Unmarshal(raw, &ev) != nil {
				continue
			}
			s, _ := strip(&ev)
			item, _ := tr.observe(s, true)
			if len(item.spans) > 2 {
				t.Fatalf("%d spans from one version, want at most the first occurrence's and a closed series'", len(item.spans))
			}
			emit(t, b, conv, seen, item)
		}
		emit(t, b, conv, seen, tr.closeAll(seriesShutdown))
		if n := b.SpanCount(); n != len(seen) {
			t.Fatalf("%d spans for %d occurrences", n, len(seen))
		}
		if n := tr.pendingLen(); n != 0 {
			t.Fatalf("%d series still pending after closeAll", n)
		}
	})
}

// emit converts item's spans, failing on an occurrence or a series range emitted twice or a
// series span that ends before it starts.
func emit(t *testing.T, b *model.TracesBuilder, conv *converter, seen map[string]bool, item workItem) {
	t.Helper()
	for _, s := range item.spans {
		key := string(s.ev.UID) + "/" + strconv.Itoa(int(s.first)) + "-" + strconv.Itoa(int(s.count))
		if seen[key] {
			t.Fatalf("occurrences %s emitted twice", key)
		}
		if s.end.Before(s.start) || (s.series() && s.first > s.count) || (!s.series() && s.count != 1) {
			t.Fatalf("span %+v", s)
		}
		seen[key] = true
		conv.appendSpan(b, s)
	}
}
