//go:build e2e

package e2e

import (
	"testing"
	"time"

	"github.com/kubetrail/kubetrail/internal/model"
)

// TestHarnessReplicasRestartAndRerun exercises the harness API the component tests build on: an
// extra collector, the audit stream split over two collectors, a graceful restart, and a rerun of a
// scenario, whose spans must all reach Jaeger through one collector or the other.
//
// It runs after the other tests (AfterOthers): two processors without a shared ID map each emit
// the object spans they see, which would be duplicates in another test's window.
func TestHarnessReplicasRestartAndRerun(t *testing.T) {
	AfterOthers(t)
	env := Testbed(t)
	requireAuditReceiver(t, env)
	cfg := env.CollectorConfig()
	// The main collector already watches Events; a second watcher would export each one twice.
	cfg.Delete("receivers.k8s_event_spans")
	var receivers []string
	for _, r := range cfg.Pipeline("receivers") {
		if r != "k8s_event_spans" {
			receivers = append(receivers, r)
		}
	}
	cfg.SetPipeline("receivers", receivers...)
	extra := env.StartExtraCollector(t, "harness-replica", cfg)
	env.Router.SplitItems(env.Collector.AuditURL, extra.AuditURL)
	t.Cleanup(env.RestoreRoute)

	if err := extra.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	Check(t, "a restarted collector runs", extra.Running(), "log:\n%s", extra.LogTail(20))
	before, mainBefore := env.Router.Delivered(extra.AuditURL), env.Router.Delivered(env.Collector.AuditURL)
	run, err := env.RunScenario("recreate")
	if err != nil {
		t.Fatal(err)
	}
	spans := env.WaitSpans(t, run.Window(), 30*time.Second, func(ss Spans) error {
		pod := ss.OfType(model.SpanTypeAudit).ForObject("Pod", "default", "phoenix").Between(run.Start, run.End)
		if n := len(pod.Values(model.AttrObjectUID)); n != 2 {
			return errorf("rerun: %d Pod phoenix UIDs, want 2", n)
		}
		// Wait for what is checked below, not only for its first sign: a binding split to the
		// other replica can trail the create by the processor's owner_wait (a bare Pod is a root,
		// and a root's first spans in a window are held until its owner is known to be none).
		if n := len(pod.Named(schedBinding)); n < 2 {
			return errorf("rerun: %d bindings of Pod phoenix, want 2", n)
		}
		return nil
	})
	Check(t, "the extra collector received audit batches", env.Router.Delivered(extra.AuditURL) > before,
		"delivered to the replica: %d before the rerun, %d after", before, env.Router.Delivered(extra.AuditURL))
	Check(t, "the main collector received its share", env.Router.Delivered(env.Collector.AuditURL) > mainBefore,
		"delivered to main: %d before the rerun, %d after", mainBefore, env.Router.Delivered(env.Collector.AuditURL))
	Check(t, "a rerun's spans reach Jaeger", len(spans.Between(run.Start, run.End.Add(2*time.Second))) > 0, "no span in the rerun's window")
	tree := spans.Between(run.Start, run.End.Add(2*time.Second)).Tree()
	bindings := tree.Find(func(s *Span) bool { return s.Name == schedBinding && s.Attr(model.AttrObjectName) == "phoenix" })
	Check(t, "the tree finds the rerun's two bindings", len(bindings) == 2, "tree:\n%s", tree)
}
