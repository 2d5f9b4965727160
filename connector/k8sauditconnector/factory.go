package k8sauditconnector

import (
	"context"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/connector"
	"go.opentelemetry.io/collector/consumer"

	"github.com/kubetrail/kubetrail/connector/k8sauditconnector/internal/metadata"
	"github.com/kubetrail/kubetrail/internal/auditconv"
)

const (
	// Ten minutes covers what the sources redeliver: Pub/Sub's maximum ack deadline, a Kafka
	// consumer group's rebalance, a CloudWatch poll that overlaps the last one.
	defaultDedupWindow = 10 * time.Minute
	// 16 MiB remembers about 120,000 audit IDs (36-byte UUIDs, about 140 bytes each with the
	// entry), two minutes of a busy cluster's writes at 1,000 a second, ten at 200.
	defaultDedupMaxBytes = 16 << 20
	// 128 MiB of decoded events (about 2 KiB each: some 65,000 events) across the calls in
	// flight: sixteen CloudWatch pages of 4,000 events, or an OTLP batch of 8,192 records of
	// EventLists eight events long, while a request of tiny events cannot reach gigabytes.
	defaultMaxInFlightBytes = 128 << 20
	// 2 MiB of decoded events in one merged hand-off: about a thousand events, whose spans
	// (diffs, not bodies) stay well under the 4 MiB a gRPC server takes by default.
	defaultMergeMaxBytes = 2 << 20
	// A quarter of a second covers what a message's neighbours in flight differ by in decoding
	// (a batch of a thousand events decodes in about 10 ms here) and the scheduling of their
	// goroutines; it is what a message the receiver never hands on (one it could not decode)
	// costs its partition.
	defaultOffsetOrderMaxWait = 250 * time.Millisecond
)

// NewFactory returns the factory of the k8s_audit connector.
func NewFactory() connector.Factory {
	return connector.NewFactory(
		metadata.Type,
		createDefaultConfig,
		connector.WithLogsToTraces(createLogsToTraces, metadata.LogsToTracesStability))
}

func createDefaultConfig() component.Config {
	return &Config{
		Format:           formatAuto,
		DedupWindow:      defaultDedupWindow,
		DedupMaxBytes:    defaultDedupMaxBytes,
		MaxInFlightBytes: defaultMaxInFlightBytes,
		Merge:            MergeConfig{Enabled: true, MaxBytes: defaultMergeMaxBytes},
		OffsetOrder:      OffsetOrderConfig{MaxWait: defaultOffsetOrderMaxWait},
		Conversion:       auditconv.DefaultSettings(),
	}
}

func createLogsToTraces(_ context.Context, set connector.Settings, cfg component.Config, next consumer.Traces) (connector.Logs, error) {
	return newAuditConnector(set, cfg.(*Config), next)
}
