package k8sauditreceiver

import (
	"context"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/config/confighttp"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/receiver"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/receiver/k8sauditreceiver/internal/metadata"
)

const (
	defaultEndpoint      = "localhost:9880"
	defaultDiffCacheSize = 100_000
	// A quarter second keeps file mode's added latency below the apiserver's own webhook
	// batching (--audit-webhook-batch-max-wait) while costing one stat per file per tick.
	defaultPollInterval = 250 * time.Millisecond
	// defaultMaxRequestBodySize is confighttp's limit when max_request_body_size is not set.
	defaultMaxRequestBodySize = 20 << 20
	// defaultMaxInFlightBytes lets three bodies of the largest default size be read and
	// decoded at once. The apiserver posts one batch at a time per webhook backend, of
	// --audit-webhook-batch-max-size events (400 by default, well under 1 MiB at Metadata level,
	// a few MiB at RequestResponse), so a few apiservers never meet it; a flood does, and is
	// answered 429 instead of growing the heap.
	defaultMaxInFlightBytes = 64 << 20
)

// NewFactory returns the factory of the k8s_audit receiver.
func NewFactory() receiver.Factory {
	return receiver.NewFactory(
		metadata.Type,
		createDefaultConfig,
		receiver.WithTraces(createTraces, metadata.TracesStability))
}

func createDefaultConfig() component.Config {
	server := confighttp.NewDefaultServerConfig()
	server.NetAddr.Endpoint = defaultEndpoint
	return &Config{
		ServerConfig:     server,
		MaxInFlightBytes: defaultMaxInFlightBytes,
		PollInterval:     defaultPollInterval,
		StartAt:          startAtEnd,
		// Leases are renewed every few seconds by every node and controller and Events are
		// the narration of the k8s_event_spans receiver: as audit spans both are pure noise.
		ExcludeResources: []GroupResource{
			{Group: "coordination.k8s.io", Resource: "leases"},
			{Group: "", Resource: "events"},
			{Group: "events.k8s.io", Resource: "events"},
		},
		DiffCacheSize:   defaultDiffCacheSize,
		RedactResources: []GroupResource{{Group: "", Resource: "secrets"}},
		Window:          model.DefaultWindow,
	}
}

func createTraces(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Traces) (receiver.Traces, error) {
	return newAuditReceiver(set, cfg.(*Config), next)
}
