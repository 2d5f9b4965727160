//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"testing"
)

// TestAuditLogFileModeMatchesTheWebhook runs a second collector whose k8s_audit receiver tails the
// apiserver's audit log file (from the beginning) and exports to a file instead of Jaeger, so
// Jaeger holds each span once. The file mode must yield one audit span per logged write, with
// the same span IDs the webhook path gave Jaeger: span IDs derive from audit IDs, whichever way
// the event arrived.
func TestAuditLogFileModeMatchesTheWebhook(t *testing.T) {
	env := Testbed(t)
	requireAuditReceiver(t, env)
	requireComponent(t, env, "exporters", "file")
	start, end, logged := env.RunsWrites(t)
	auditLog := env.AuditLog()

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
