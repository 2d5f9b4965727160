//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/kubetrail/kubetrail/internal/auditconv"
	"github.com/kubetrail/kubetrail/internal/model"
)

// Diffs across replicas (issue 22, item 2), on the real control plane: the apiserver's own audit
// log, converted by one converter in order, is what a single collector diffs; every write's
// diff on two collectors sharing their diff base through Redis must agree with it.

// diffSummary is what a span says of its diff: the diff event's attributes, or why it has none.
func diffSummary(attrs map[string]any, events []SpanEvent) string {
	var parts []string
	if v, ok := attrs["k8s.object.diff.skipped"]; ok {
		parts = append(parts, fmt.Sprint("skipped=", v))
	}
	for _, e := range events {
		if e.Name != model.EventObjectDiff {
			continue
		}
		for k, v := range e.Attributes {
			parts = append(parts, fmt.Sprint(k, "=", v))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// diffBase is the resourceVersion a diff says it was computed from, "" when it names none.
func diffBase(summary string) string {
	for _, p := range strings.Fields(summary) {
		if v, ok := strings.CutPrefix(p, "k8s.object.diff.base_resource_version="); ok {
			return v
		}
	}
	return ""
}

// auditSpansIn reads the file exporter's output (one OTLP JSON document per line) and returns its
// audit spans; a missing file has none.
func auditSpansIn(t *testing.T, path string) Spans {
	t.Helper()
	return spansInFile(path).OfType(model.SpanTypeAudit)
}

// spansInFile reads a file exporter's output (one OTLP JSON document per line); a missing file
// has no spans, and a line still being written is skipped.
func spansInFile(path string) Spans {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 256<<20)
	var um ptrace.JSONUnmarshaler
	var out Spans
	for sc.Scan() {
		td, err := um.UnmarshalTraces(sc.Bytes())
		if err != nil {
			continue // a line still being written
		}
		out = append(out, SpansFromTraces(td)...)
	}
	return out
}

// oneCollectorDiffs converts the apiserver's audit log with one converter, the receiver's
// defaults, in the order the apiserver wrote it: the diffs a single collector gives. created are
// the UIDs of the objects created at or after since, whose every write is in the log's range.
func oneCollectorDiffs(t *testing.T, path string, since time.Time) (diffs map[string]string, created map[string]bool) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	conv := auditconv.New(auditconv.Options{Settings: auditconv.DefaultSettings()})
	diffs, created = map[string]string{}, map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		line := slices.Clone(sc.Bytes())
		ev, err := conv.DecodeLine(line)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		var st auditconv.Stats
		for _, s := range SpansFromTraces(conv.Convert(ClusterName, []auditconv.Event{ev}, &st)) {
			diffs[s.Attr(model.AttrAuditID)] = diffSummary(s.Attributes, s.Events)
			if s.Attr(model.AttrAuditVerb) == "create" && !s.Start.Before(since) && s.Attr(model.AttrObjectUID) != "" {
				created[s.Attr(model.AttrObjectUID)] = true
			}
		}
	}
	return diffs, created
}

// checkDiffsAsOneCollector compares the diffs of the writes of objects created in the run,
// exported by the replicas (one file each), with one collector's. A replica may say less, never
// otherwise: a write it could not diff has none and says why (k8s.object.diff.skipped), a diff
// against an older body names that body's version (a batch still on its way to the other
// replica). Both are counted, not failed. across is the number of writes diffed as one collector would against
// the body their predecessor, received by the other replica, left in Redis.
func checkDiffsAsOneCollector(t *testing.T, what, auditLog string, since time.Time, outs ...string) (across int) {
	t.Helper()
	want, created := oneCollectorDiffs(t, auditLog, since)
	type write struct {
		replica int
		span    *Span
	}
	byObject := map[string][]write{}
	for i, out := range outs {
		for _, s := range auditSpansIn(t, out) {
			if uid := s.Attr(model.AttrObjectUID); created[uid] {
				byObject[uid] = append(byObject[uid], write{i, s})
			}
		}
	}
	var wrong []string
	same, skipped, olderBase := 0, 0, 0
	for _, writes := range byObject {
		slices.SortFunc(writes, func(a, b write) int { return a.span.Start.Compare(b.span.Start) })
		for i, w := range writes {
			id := w.span.Attr(model.AttrAuditID)
			got, exp := diffSummary(w.span.Attributes, w.span.Events), want[id]
			switch {
			case got == exp:
				same++
				if i > 0 && writes[i-1].replica != w.replica && strings.Contains(got, "k8s.object.diff.count") {
					across++
				}
			case strings.HasPrefix(got, "skipped="):
				// No diff, and it says why (the replica held no body of the object, or not the
				// write's base). A write without a diff that does not say why is wrong: a reader
				// could not tell "nothing changed" from "not known here".
				skipped++
			case got != "" && diffBase(got) != "" && diffBase(got) != diffBase(exp):
				olderBase++
			default:
				wrong = append(wrong, fmt.Sprintf("%s %s: replica %d says %q, one collector %q", id, w.span.Name, w.replica, got, exp))
			}
		}
	}
	t.Logf("%s: %d writes diffed as one collector (%d of them after a write the other replica received), %d without diff, %d against an older named base",
		what, same, across, skipped, olderBase)
	Check(t, what+": no write's diff differs from one collector's", len(wrong) == 0,
		"%d writes: %s", len(wrong), truncate(strings.Join(wrong, "; "), 3000))
	return across
}

// TestAuditDiffsAcrossTwoReplicas writes one ServiceAccount (audited with its bodies, unlike a
// ConfigMap) 12 times, 1.5 s apart (each write in a batch of its own), behind a router that hands the batches holding it to two collectors in
// turn: every write reaches the replica that did not see the one before, and with the diff base
// shared through Redis each is diffed as one collector diffs it.
func TestAuditDiffsAcrossTwoReplicas(t *testing.T) {
	env := Testbed(t)
	requireAuditReceiver(t, env)
	const probe, writes = "kubetrail-diffbase-probe", 12
	a, b, outA, outB := startTwoReplicas(t, env, "diffbase")
	replicas := []string{a.AuditURL, b.AuditURL}
	var mu sync.Mutex
	probes := 0
	env.Router.SetRoute(func(n int, body []byte) []string {
		if bytes.Contains(body, []byte(probe)) {
			mu.Lock()
			defer mu.Unlock()
			probes++
			return []string{replicas[probes%2]}
		}
		return []string{replicas[n%2]}
	})
	t.Cleanup(env.RestoreRoute)

	since := time.Now()
	kubectl := func(args ...string) {
		t.Helper()
		if out, err := env.RunKubectl(args...); err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
	}
	kubectl("create", "serviceaccount", probe, "-n", "default")
	for i := 1; i <= writes; i++ {
		time.Sleep(1500 * time.Millisecond) // past the testbed's --audit-webhook-batch-max-wait
		kubectl("label", "serviceaccount", probe, "-n", "default", "--overwrite", fmt.Sprintf("step=%d", i))
	}
	kubectl("delete", "serviceaccount", probe, "-n", "default")
	auditLog := env.AuditLog()
	logged := loggedWrites(t, auditLog, since, time.Now())
	checkEachWriteOnce(t, "diffs across two replicas", logged, waitAuditSpans(t, logged, outA, outB))
	across := checkDiffsAsOneCollector(t, "diffs across two replicas", auditLog, since, outA, outB)
	Check(t, "diffs across two replicas: each write diffed against the body the other replica left", across >= writes-2,
		"%d of the %d patches, each in a batch of its own, dealt to the replicas in turn", across, writes)
}
