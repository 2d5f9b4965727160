package k8seventsreceiver

import (
	"github.com/kubetrail/kubetrail/internal/model"

	"context"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/receiver"

	"github.com/kubetrail/kubetrail/internal/k8sconfig"
	"github.com/kubetrail/kubetrail/receiver/k8seventsreceiver/internal/metadata"
)

// NewFactory returns the factory of the k8s_event_spans receiver.
func NewFactory() receiver.Factory {
	return receiver.NewFactory(
		metadata.Type,
		createDefaultConfig,
		receiver.WithTraces(createTraces, metadata.TracesStability),
	)
}

func createDefaultConfig() component.Config {
	return &Config{
		APIConfig:           k8sconfig.DefaultAPIConfig(),
		MaxEventAge:         5 * time.Minute,
		Window:              model.DefaultWindow,
		CheckpointTTL:       3 * time.Hour,
		SeriesQuiet:         defaultSeriesQuiet,
		SeriesMaxPending:    defaultSeriesMaxPending,
		StalledWatchTimeout: 5 * time.Minute,
		Backoff:             BackoffConfig{InitialInterval: time.Second, MaxInterval: 30 * time.Second},
		LeaderElection:      configoptional.Default(defaultLeaderElectionConfig()),
	}
}

func createTraces(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Traces) (receiver.Traces, error) {
	return newReceiver(cfg.(*Config), set, next)
}
