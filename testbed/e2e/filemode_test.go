//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kubetrail/kubetrail/internal/model"
)

// TestAuditLogFileModeMatchesTheWebhook runs a second collector whose k8s_audit receiver tails the
// apiserver's audit log file (from the beginning) and exports to a file instead of Jaeger, so
// Jaeger holds each span once. The file mode must yield one audit span per logged write, with
// the same span IDs the webhook path gave Jaeger: span IDs derive from audit IDs, whichever way
// the event arrived.
func TestAuditLogFileModeMatchesTheWebhook(t *testing.T) {
	env := Testbed(t)
	requireAuditReceiver(t, env)
	if !Check(t, "the collector has the file exporter", env.Components.Has("exporters", "file"), "exporters %v", env.Components["exporters"]) {
		t.FailNow()
	}
	start, end := env.RunsSpan()
	if start.IsZero() {
		t.Fatal("no scenario ran")
	}
	auditLog := filepath.Join(env.StateDir, "audit.log")
	logged := loggedWrites(t, auditLog, start, end)

	out := filepath.Join(env.OutDir, "filemode-spans.jsonl")
	_ = os.Remove(out)
	cfg := Config{}
	cfg.Set("receivers.k8s_audit.cluster", ClusterName)
	cfg.Set("receivers.k8s_audit.files", []any{auditLog})
	cfg.Set("receivers.k8s_audit.start_at", "beginning")
	cfg.Set("exporters.file.path", out)
	cfg.Set("exporters.file.flush_interval", "100ms")
	cfg.SetPipeline("receivers", "k8s_audit")
	cfg.SetPipeline("exporters", "file")
	cfg.Set("service.telemetry.metrics.level", "none")
	c := env.StartExtraCollector(t, "filemode", cfg)

	// The file holds thousands of start-up events: poll until every logged write is there.
	checkSpansOfEveryLoggedWrite(t, env, "file mode", out, logged, start, end, c)
}

// checkSpansOfEveryLoggedWrite waits up to a minute for the file exporter's output out to hold
// a span of every logged write, then checks that each is there once, with the span ID the
// webhook path gave Jaeger: how another door (file mode, the connector) proves itself against
// the apiserver's own audit log. c is the collector that writes out.
func checkSpansOfEveryLoggedWrite(t *testing.T, env *Env, door, out string, logged map[string]string, start, end time.Time, c *Collector) {
	t.Helper()
	got := waitAuditSpans(t, logged, out)
	if !c.Running() {
		t.Fatalf("the %s collector exited:\n%s", door, c.LogTail(20))
	}
	checkEachWriteOnce(t, door, logged, got)
	webhook := env.SpansIn(t, Window{Start: start.Add(-time.Second), End: end.Add(2 * time.Second)}).OfType(model.SpanTypeAudit)
	viaWebhook := map[string]string{}
	for _, s := range webhook {
		viaWebhook[s.Attr(model.AttrAuditID)] = s.SpanID
	}
	var differ []string
	for id, what := range logged {
		if ids := got[id]; len(ids) == 1 && viaWebhook[id] != "" && viaWebhook[id] != ids[0] {
			differ = append(differ, what)
		}
	}
	Check(t, door+" and webhook give the same span IDs", len(differ) == 0, "%d differ, e.g. %v", len(differ), differ[:min(5, len(differ))])
}

// waitAuditSpans polls the file exporters' outputs for up to a minute, until every logged write
// has a span, and returns the span IDs of each audit ID over all of them, read once more a
// second later so that a duplicate still in flight is seen too.
func waitAuditSpans(t *testing.T, logged map[string]string, files ...string) map[string][]string {
	t.Helper()
	read := func() map[string][]string {
		got := map[string][]string{}
		for _, f := range files {
			for id, spans := range auditSpanIDsIn(t, f) {
				got[id] = append(got[id], spans...)
			}
		}
		return got
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		got := read()
		missing := 0
		for id := range logged {
			if len(got[id]) == 0 {
				missing++
			}
		}
		if missing == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	time.Sleep(time.Second)
	return read()
}

// checkEachWriteOnce checks that every logged write has exactly one span in got.
func checkEachWriteOnce(t *testing.T, what string, logged map[string]string, got map[string][]string) {
	t.Helper()
	var missing, doubled []string
	for id, desc := range logged {
		switch n := len(got[id]); {
		case n == 0:
			missing = append(missing, desc)
		case n > 1:
			doubled = append(doubled, desc+" ×"+strconv.Itoa(n))
		}
	}
	Check(t, what+": the writes are in the audit log", len(logged) > 0, "")
	Check(t, what+": every logged write is a span", len(missing) == 0,
		"%d of %d writes without a span: %s", len(missing), len(logged), truncate(strings.Join(missing, "; "), 2000))
	Check(t, what+": no write twice", len(doubled) == 0,
		"%d writes with several spans: %s", len(doubled), truncate(strings.Join(doubled, "; "), 2000))
}

// auditSpanIDsIn reads the file exporter's output (one OTLP JSON document per line) and returns
// the span IDs of each audit ID.
func auditSpanIDsIn(t *testing.T, path string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, s := range auditSpansIn(t, path) {
		id := s.Attr(model.AttrAuditID)
		out[id] = append(out[id], s.SpanID)
	}
	return out
}
