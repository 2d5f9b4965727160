package viewer

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/kubetrail/kubetrail/cmd/kubetrail/internal/trail"
)

// BenchmarkObjectPage5000Spans is the time to the first full view of an object whose tree holds
// 5,000 spans: the recorded deployment scenario, its activity spans copied (new span IDs, later
// times in the same window) until the Deployment's trace holds 5,000, served from a file source.
// It reports the page's bytes; docs/performance.md has the figure.
func BenchmarkObjectPage5000Spans(b *testing.B) {
	spans := recordedDeployment(b)
	var acts []*trail.Span
	for _, s := range spans {
		if !s.IsObject() {
			acts = append(acts, s)
		}
	}
	all := append([]*trail.Span(nil), spans...)
	for i := 0; len(all) < 5000; i++ {
		c := *acts[i%len(acts)]
		c.SpanID = [8]byte{0xbe, byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i), 1, 2, 3}
		shift := time.Duration(i/len(acts)+1) * 10 * time.Millisecond
		c.Start, c.End = c.Start.Add(shift), c.End.Add(shift)
		all = append(all, &c)
	}
	f := &trail.File{Path: "bench"}
	f.AddSpans(all)
	h := (&Server{Source: f, Cluster: "testbed", Window: 30 * time.Minute}).Handler()
	req := httptest.NewRequest(http.MethodGet, "/object?kind=Deployment&namespace=default&name=demo", nil)
	b.ReportAllocs()
	var size int
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("%d: %s", w.Code, w.Body.String())
		}
		size = w.Body.Len()
	}
	b.ReportMetric(float64(size), "page-bytes")
	b.ReportMetric(float64(len(all)), "spans")
}
