//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"
)

// TestAuditLogThroughTheConnector ships the apiserver's audit log, line by line as a log
// shipper would, as OTLP logs into a second collector whose logs pipeline ends in the k8s_audit
// connector and whose traces pipeline writes a file: the managed-cluster path on the real
// control plane's own audit events. Every logged write must be exactly one span, with the span
// ID the webhook path gave Jaeger.
func TestAuditLogThroughTheConnector(t *testing.T) {
	env := Testbed(t)
	requireAuditReceiver(t, env)
	requireComponent(t, env, "connectors", "k8s_audit")
	start, end, logged := env.RunsWrites(t)
	auditLog := env.AuditLog()

	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(env.OutDir, "connector-spans.jsonl")
	_ = os.Remove(out)
	cfg := Config{}
	cfg.Set("receivers.otlp.protocols.http.endpoint", fmt.Sprintf("127.0.0.1:%d", port))
	cfg.Set("connectors.k8s_audit.cluster", ClusterName)
	cfg.Set("exporters.file.path", out)
	cfg.Set("exporters.file.flush_interval", "100ms")
	cfg.Set("service.pipelines.logs/audit.receivers", []any{"otlp"})
	cfg.Set("service.pipelines.logs/audit.exporters", []any{"k8s_audit"})
	cfg.SetPipeline("receivers", "k8s_audit")
	cfg.SetPipeline("exporters", "file")
	cfg.Set("service.telemetry.metrics.level", "none")
	c := env.StartExtraCollector(t, "connector", cfg)

	// The shipper: every line of the audit log, 500 to a request, each batch sent until
	// accepted (the collector may still be starting).
	client := &http.Client{Timeout: 10 * time.Second}
	ship := func(lines [][]byte) {
		ld := plog.NewLogs()
		rl := ld.ResourceLogs().AppendEmpty()
		rl.Resource().Attributes().PutStr("service.name", "kube-apiserver-audit-shipper")
		lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
		for _, l := range lines {
			lrs.AppendEmpty().Body().SetStr(string(l))
		}
		data, err := (&plog.JSONMarshaler{}).MarshalLogs(ld)
		if err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); ; {
			resp, err := client.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/logs", port), "application/json", bytes.NewReader(data))
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("the connector's collector did not accept a batch: %v\n%s", err, c.LogTail(20))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	for batch := range slices.Chunk(auditLogLines(t, auditLog), 500) {
		ship(batch)
	}

	checkSpansOfEveryLoggedWrite(t, env, "connector", out, logged, start, end, c)
}
