package k8sauditconnector // import "github.com/kubetrail/kubetrail/connector/k8sauditconnector"

import (
	"context"

	"go.opentelemetry.io/otel/metric"

	"github.com/kubetrail/kubetrail/connector/k8sauditconnector/internal/metadata"
	"github.com/kubetrail/kubetrail/internal/auditconv"
)

// instruments are the connector's metrics as it records them: metadata's, each measurement
// labelled input=connector (inputAttribute). They share their names with the k8s_audit
// receiver's (otelcol_k8s_audit_*, so that a dashboard reads both alike), and the collector's
// Prometheus endpoint does not tell components apart: in one collector with both, the same
// series would be collected twice and every scrape fail with a 500. With the label the
// connector's series are its own; the receiver's carry input only where it has several doors
// (receive_lag).
type instruments struct {
	dedupBytes, inFlightBytes                    metric.Int64UpDownCounter
	duplicateEvents, inFlightRefused, logRecords metric.Int64Counter
	mergedCalls, offsetOrderSkips                metric.Int64Counter
	conv                                         auditconv.Telemetry
}

func newInstruments(tb *metadata.TelemetryBuilder) instruments {
	return instruments{
		dedupBytes:       upDown{tb.K8sAuditDedupBytes},
		inFlightBytes:    upDown{tb.K8sAuditInFlightBytes},
		duplicateEvents:  counter{tb.K8sAuditDuplicateEvents},
		inFlightRefused:  counter{tb.K8sAuditInFlightRefused},
		logRecords:       counter{tb.K8sAuditLogRecords},
		mergedCalls:      counter{tb.K8sAuditMergedCalls},
		offsetOrderSkips: counter{tb.K8sAuditOffsetOrderSkips},
		conv: auditconv.Telemetry{
			FilteredEvents:      counter{tb.K8sAuditFilteredEvents},
			DroppedEvents:       counter{tb.K8sAuditDroppedEvents},
			TraceContextInvalid: counter{tb.K8sAuditTraceContextInvalid},
			CacheObjects:        upDown{tb.K8sAuditDiffCacheObjects},
			CacheBytes:          upDown{tb.K8sAuditDiffCacheBytes},
			CacheEvictions:      counter{tb.K8sAuditDiffCacheEvictions},
			DiffsSkipped:        counter{tb.K8sAuditDiffsSkipped},
			DiffBaseRecords:     counter{tb.K8sAuditDiffBaseRecords},
			// Recorded with the input attribute already (Converter.RecordLag).
			ReceiveLag: tb.K8sAuditReceiveLag,
		},
	}
}

// counter adds input=connector to an Int64Counter's measurements (merged after the caller's).
type counter struct{ metric.Int64Counter }

func (c counter) Add(ctx context.Context, v int64, opts ...metric.AddOption) {
	c.Int64Counter.Add(ctx, v, withInput(opts)...)
}

// upDown adds input=connector to an Int64UpDownCounter's measurements.
type upDown struct{ metric.Int64UpDownCounter }

func (c upDown) Add(ctx context.Context, v int64, opts ...metric.AddOption) {
	c.Int64UpDownCounter.Add(ctx, v, withInput(opts)...)
}

var inputOnly = []metric.AddOption{inputAttribute}

func withInput(opts []metric.AddOption) []metric.AddOption {
	if len(opts) == 0 {
		return inputOnly
	}
	return append(opts[:len(opts):len(opts)], inputAttribute)
}
