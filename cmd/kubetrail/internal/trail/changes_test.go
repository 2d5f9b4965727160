package trail

import (
	"context"
	"testing"
	"time"

	"github.com/kubetrail/kubetrail/internal/model"
)

// TestChangesReadsAtMostMaxTracesAndCountsTheRest: a search finding more traces than one feed
// may hold reads MaxTraces of them and says how many it left unread.
func TestChangesReadsAtMostMaxTracesAndCountsTheRest(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	f := &File{Path: "many"}
	for i := 0; i < MaxTraces+25; i++ {
		f.AddSpans([]*Span{{
			TraceID: [16]byte{1, byte(i >> 8), byte(i)}, SpanID: [8]byte{2, byte(i >> 8), byte(i)},
			Type: model.SpanTypeAudit, Object: model.Object{Kind: "ConfigMap", Namespace: "shop", Name: "c", UID: "u"},
			Start: t0.Add(time.Duration(i) * time.Millisecond), End: t0.Add(time.Duration(i)*time.Millisecond + time.Microsecond),
			Attrs: map[string]any{model.AttrAuditVerb: "patch", model.AttrHTTPStatusCode: int64(200)},
		}})
	}
	res, err := Changes(context.Background(), f, ChangeQuery{Kind: "ConfigMap"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Traces != MaxTraces || res.Unread != 25 || res.Matched != MaxTraces {
		t.Fatalf("read %d traces, %d unread, %d writes; want %d, 25, %d", res.Traces, res.Unread, res.Matched, MaxTraces, MaxTraces)
	}
}
