package k8sauditconnector

import (
	"context"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/connector/connectortest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/kubetrail/kubetrail/connector/k8sauditconnector/internal/metadata"
	"github.com/kubetrail/kubetrail/internal/auditconv"
	"github.com/kubetrail/kubetrail/internal/auditconv/auditconvtest"
)

// BenchmarkConsumeLogs converts the recorded deployment capture, one record a webhook body, in
// a connector with the default config (but dedup, which would drop every pass after the first)
// and a real metrics SDK behind its instruments, reporting time and allocations per event.
func BenchmarkConsumeLogs(b *testing.B) {
	bodies := auditconvtest.FixtureBodies(b, "deployment")
	cfg := createDefaultConfig().(*Config)
	cfg.Cluster, cfg.DedupWindow = auditconvtest.Cluster, 0
	tel := componenttest.NewTelemetry()
	defer func() { _ = tel.Shutdown(context.Background()) }()
	set := connectortest.NewNopSettings(metadata.Type)
	set.TelemetrySettings = tel.NewTelemetrySettings()
	c, err := newAuditConnector(set, cfg, consumertest.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = c.Shutdown(context.Background()) }()
	lds := make([]plog.Logs, len(bodies))
	events := 0
	for i, body := range bodies {
		ld := plog.NewLogs()
		ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords().AppendEmpty().Body().SetStr(string(body))
		lds[i] = ld
		raws, err := auditconv.ScanEventList(body, 0, nil)
		if err != nil {
			b.Fatal(err)
		}
		events += len(raws)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		for _, ld := range lds {
			if err := c.ConsumeLogs(ctx, ld); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*events), "ns/event")
}
