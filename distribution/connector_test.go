//go:build dist

package distribution_test

import (
	"bytes"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"

	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/kubetrail/kubetrail/testbed/envelope"
)

// The recorded deployment capture as OTLP logs (native Events, then the same batches as AKS
// Event Hub messages, a redelivery) through the real binary's otlp receiver, k8s_audit
// connector and k8s_object_link processor: every audited write is exactly one audit span,
// under its object's span, as through the webhook.
func TestAuditLogsThroughTheConnector(t *testing.T) {
	requireBinary(t)
	bodies := recordedBodies(t, "deployment")
	out := filepath.Join(t.TempDir(), "traces.jsonl")
	otlpPort, healthPort := freePort(t), freePort(t)
	startCollectorFile(t, filepath.Join(root, "distribution", "examples", "audit-from-logs.yaml"), healthPort,
		fmt.Sprintf("KUBETRAIL_OTLP_HTTP_ENDPOINT=127.0.0.1:%d", otlpPort),
		fmt.Sprintf("KUBETRAIL_HEALTH_ENDPOINT=127.0.0.1:%d", healthPort),
		"KUBETRAIL_CLUSTER=disttest",
		"KUBETRAIL_OUT="+out)

	post := func(records ...[]byte) {
		t.Helper()
		ld := plog.NewLogs()
		lrs := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords()
		for _, r := range records {
			lrs.AppendEmpty().Body().SetStr(string(r))
		}
		data, err := (&plog.JSONMarshaler{}).MarshalLogs(ld)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/logs", otlpPort), "application/json", bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("OTLP logs answered %d", resp.StatusCode)
		}
	}
	half := len(bodies) / 2
	for _, b := range bodies[:half] {
		items, err := envelope.Items(b)
		if err != nil {
			t.Fatal(err)
		}
		var records [][]byte
		for _, it := range items {
			records = append(records, it)
		}
		post(records...)
	}
	for _, b := range bodies[half:] {
		items, err := envelope.Items(b)
		if err != nil {
			t.Fatal(err)
		}
		msg, err := envelope.AKS("disttest", items)
		if err != nil {
			t.Fatal(err)
		}
		post(msg)
	}
	post(bodies[0]) // redelivered: no second span
	post([]byte("not an audit event"))

	checkOneSpanPerWrite(t, out, expectedAuditIDs(t, bodies), "disttest")
}
