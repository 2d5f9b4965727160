//go:build e2e

package e2e

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kubetrail/kubetrail/internal/model"
)

// The doors other than the webhook (the receiver's file mode, the connector fed over OTLP, filelog
// or Kafka) prove themselves the same way: an extra collector writes its audit spans to a file,
// and every write the apiserver logged while the scenarios ran must be there once, with the span
// ID the webhook path gave Jaeger.

// requireComponent fails the test now unless the collector was built with component typ of kind
// ("receivers", "connectors", …).
func requireComponent(t *testing.T, env *Env, kind, typ string) {
	t.Helper()
	if !Check(t, "the collector has the "+typ+" "+strings.TrimSuffix(kind, "s"), env.Components.Has(kind, typ),
		"bin/otelcol-kubetrail components lists %s %v", kind, env.Components[kind]) {
		t.FailNow()
	}
}

// auditLogLines returns the lines of the apiserver's audit log (one audit event as JSON each).
func auditLogLines(t *testing.T, path string) [][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	var lines [][]byte
	for sc.Scan() {
		lines = append(lines, append([]byte(nil), sc.Bytes()...))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
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
	checkWebhookSpanIDs(t, env, door, logged, got, start, end)
}

// checkWebhookSpanIDs checks that the span of each logged write in got (audit ID → span IDs) has
// the span ID the webhook path gave Jaeger for the same audit ID.
func checkWebhookSpanIDs(t *testing.T, env *Env, door string, logged map[string]string, got map[string][]string, start, end time.Time) {
	t.Helper()
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
