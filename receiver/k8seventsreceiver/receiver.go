package k8seventsreceiver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/receiverhelper"
	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/kubetrail/kubetrail/internal/k8sconfig"
	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/receiver/k8seventsreceiver/internal/metadata"
)

// discoveryRefresh bounds how often an Event about an unknown kind (a CRD) may trigger a
// discovery call.
const discoveryRefresh = time.Minute

// eventsReceiver is the k8s_event_spans receiver.
type eventsReceiver struct {
	cfg   *Config
	set   receiver.Settings
	next  consumer.Traces
	tel   *metadata.TelemetryBuilder
	obs   *receiverhelper.ObsReport
	clock clock.WithTicker
	// newClient builds the Kubernetes client at start; tests substitute a fake clientset.
	newClient func(*Config) (kubernetes.Interface, error)

	cancel  context.CancelFunc
	wg      sync.WaitGroup
	storage storage.Client
	// tracker and pipeline of the current start: Shutdown closes the open series through them.
	tracker  *tracker
	pipeline *pipeline
	// discovery maps the kinds of CRD objects; Shutdown waits for its refresh in flight.
	discovery *k8sconfig.DiscoveryMapper
}

func newReceiver(cfg *Config, set receiver.Settings, next consumer.Traces) (*eventsReceiver, error) {
	tel, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, fmt.Errorf("creating telemetry: %w", err)
	}
	obs, err := receiverhelper.NewObsReport(receiverhelper.ObsReportSettings{
		ReceiverID:             set.ID,
		Transport:              "kubernetes",
		LongLivedCtx:           true,
		ReceiverCreateSettings: set,
	})
	if err != nil {
		return nil, fmt.Errorf("creating receiver observability: %w", err)
	}
	return &eventsReceiver{
		cfg:   cfg,
		set:   set,
		next:  next,
		tel:   tel,
		obs:   obs,
		clock: clock.RealClock{},
		newClient: func(cfg *Config) (kubernetes.Interface, error) {
			clients, err := cfg.APIConfig.NewClients()
			if err != nil {
				return nil, err
			}
			return clients.Kube, nil
		},
	}, nil
}

// Start builds the client, reads the checkpoint and starts the list-watch in the background:
// an unreachable apiserver is retried, not a start failure.
func (r *eventsReceiver) Start(ctx context.Context, host component.Host) error {
	client, err := r.newClient(r.cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client for cluster %q: %w", r.cfg.Cluster, err)
	}
	var ckpt *checkpoint
	var restored map[string]checkpointEntry
	if r.cfg.Storage != nil {
		if r.storage, err = r.storageClient(ctx, host); err != nil {
			return err
		}
		ckpt = newCheckpoint(r.storage, r.cfg.CheckpointTTL, r.clock.Now)
		if restored, err = ckpt.load(ctx); err != nil {
			// A corrupt checkpoint must not keep the receiver down: start as if fresh, which
			// max_event_age bounds.
			r.tel.K8sEventSpansErrors.Add(ctx, 1, withReason(errorCheckpointRead))
			r.set.Logger.Error("Ignoring unreadable restart checkpoint", zap.Error(err))
			restored = nil
			ckpt = newCheckpoint(r.storage, r.cfg.CheckpointTTL, r.clock.Now)
		}
	}
	r.set.Logger.Info("Starting k8s_event_spans receiver", zap.String("cluster", r.cfg.Cluster),
		zap.Bool("checkpoint", restored != nil), zap.Int("checkpointed_events", len(restored)))

	r.discovery = k8sconfig.NewDiscoveryMapper(client.Discovery(), discoveryRefresh)
	r.discovery.Prefetch()
	mapper := model.Chain(model.BuiltinMapper(), r.discovery)
	tr := newTracker(r.set.Logger, r.tel, r.clock.Now, r.cfg.MaxEventAge, restored)
	tr.window, tr.quiet, tr.maxPending = r.cfg.Window, r.cfg.SeriesQuiet, r.cfg.SeriesMaxPending
	if r.cfg.SeriesQuiet > r.cfg.Window {
		r.set.Logger.Warn("series_quiet exceeds window: a series span may reach k8s_object_link after its window's records expired (window + grace)",
			zap.Duration("series_quiet", r.cfg.SeriesQuiet), zap.Duration("window", r.cfg.Window))
	}
	p := &pipeline{
		logger:  r.set.Logger,
		tel:     r.tel,
		obs:     r.obs,
		next:    r.next,
		conv:    &converter{cluster: r.cfg.Cluster, mapper: mapper, window: r.cfg.Window},
		ckpt:    ckpt,
		clock:   r.clock,
		backoff: r.cfg.Backoff,
		version: r.set.BuildInfo.Version,
		queue:   make(chan workItem, queueItems),
	}
	r.tracker, r.pipeline = tr, p
	runner := &watchRunner{logger: r.set.Logger, tel: r.tel, cfg: r.cfg, clock: r.clock, host: host, tracker: tr, pipeline: p}

	runCtx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.wg.Go(func() { p.run(runCtx) })
	r.wg.Go(func() {
		if le := r.cfg.LeaderElection.Get(); le != nil {
			runWithLeaderElection(runCtx, r.set.Logger, client, le, func(ctx context.Context) { runner.run(ctx, client) })
			return
		}
		runner.run(runCtx, client)
	})
	return nil
}

func (r *eventsReceiver) storageClient(ctx context.Context, host component.Host) (storage.Client, error) {
	ext, ok := host.GetExtensions()[*r.cfg.Storage]
	if !ok {
		return nil, fmt.Errorf("storage: extension %q is not configured", r.cfg.Storage)
	}
	se, ok := ext.(storage.Extension)
	if !ok {
		return nil, fmt.Errorf("storage: extension %q is not a storage extension", r.cfg.Storage)
	}
	c, err := se.GetClient(ctx, component.KindReceiver, r.set.ID, "")
	if err != nil {
		return nil, fmt.Errorf("storage: client from extension %q: %w", r.cfg.Storage, err)
	}
	return c, nil
}

// Shutdown stops the watches and the pipeline and waits for them. Spans still queued are not
// emitted and not checkpointed, so the next start emits them. Open series are left to the
// checkpoint with storage (the next start resumes them, and their spans get the IDs an
// uninterrupted replica derives); without storage nothing would remember them, so their
// spans are emitted now, once.
func (r *eventsReceiver) Shutdown(ctx context.Context) error {
	if r.cancel != nil {
		r.cancel()
		r.cancel = nil
	}
	r.wg.Wait()
	if r.tracker != nil && r.cfg.Storage == nil {
		r.pipeline.deliverFinal(ctx, r.tracker.closeAll(seriesShutdown))
	}
	r.tracker, r.pipeline = nil, nil
	if r.discovery != nil {
		r.discovery.Close()
		r.discovery = nil
	}
	if r.storage == nil {
		return nil
	}
	err := r.storage.Close(ctx)
	r.storage = nil
	if err != nil {
		return fmt.Errorf("closing checkpoint storage: %w", err)
	}
	return nil
}
