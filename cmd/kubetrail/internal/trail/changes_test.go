package trail

import (
	"context"
	"strings"
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

// TestChangeLineIsCutToTheTerminalAndEscaped: on a terminal a line is cut to its width; span
// data holding terminal controls is escaped; writes on several days carry the date.
func TestChangeLineIsCutToTheTerminalAndEscaped(t *testing.T) {
	w := Write{Time: time.Date(2026, 11, 21, 10, 45, 54, 716e6, time.UTC), Cluster: "prod", Kind: "Deployment", Namespace: "shop", Name: "web",
		User: "system:serviceaccount:kube-system:deployment-controller", Verb: "patch", Subresource: "scale", Code: 200,
		Changes: []Change{{Path: "spec.replicas", Old: "2", New: "4"}}, ChangedPaths: 1}
	full := ChangeLine(w, false, 0)
	if full != "10:45:54.716  prod  Deployment shop/web  deployment-controller  patch scale  200  spec.replicas 2→4" {
		t.Fatalf("line %q", full)
	}
	if got := ChangeLine(w, false, 40); []rune(got)[39] != '…' || len([]rune(got)) != 40 {
		t.Errorf("cut to 40: %q", got)
	}
	if got := ChangeLine(w, true, 0); got[:12] != "11-21 10:45:" {
		t.Errorf("with the date: %q", got)
	}
	w.User = "mallory\x1b]0;pwned\a"
	var b strings.Builder
	WriteChanges(&b, &ChangeResult{Writes: []Write{w}, Matched: 1}, time.Time{}, time.Time{}, 0)
	if strings.ContainsAny(b.String(), "\x1b\a") || !strings.Contains(b.String(), `mallory\x1b]0;pwned\a`) {
		t.Errorf("not escaped: %q", b.String())
	}
	if ws := []Write{w, {Time: w.Time.Add(24 * time.Hour)}}; !spansDays(ws) || spansDays(ws[:1]) {
		t.Error("spansDays")
	}
}
