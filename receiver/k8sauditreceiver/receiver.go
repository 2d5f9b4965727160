package k8sauditreceiver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/receiverhelper"
	"go.uber.org/zap"

	"github.com/kubetrail/kubetrail/receiver/k8sauditreceiver/internal/metadata"
)

// auditReceiver runs the webhook server and the file tailers; both feed one converter, so a
// diff can span a webhook event and a file event of the same object.
type auditReceiver struct {
	cfg       *Config
	set       receiver.Settings
	next      consumer.Traces
	telemetry *metadata.TelemetryBuilder
	obsHTTP   *receiverhelper.ObsReport
	obsFile   *receiverhelper.ObsReport
	conv      *converter

	mu      sync.Mutex // guards the fields below across Start and Shutdown
	server  *http.Server
	addr    net.Addr
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	storage storage.Client
}

func newAuditReceiver(set receiver.Settings, cfg *Config, next consumer.Traces) (*auditReceiver, error) {
	tb, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, fmt.Errorf("creating telemetry: %w", err)
	}
	obsHTTP, err := receiverhelper.NewObsReport(receiverhelper.ObsReportSettings{
		ReceiverID: set.ID, Transport: "http", ReceiverCreateSettings: set,
	})
	if err != nil {
		return nil, err
	}
	obsFile, err := receiverhelper.NewObsReport(receiverhelper.ObsReportSettings{
		ReceiverID: set.ID, Transport: "file", LongLivedCtx: true, ReceiverCreateSettings: set,
	})
	if err != nil {
		return nil, err
	}
	r := &auditReceiver{cfg: cfg, set: set, next: next, telemetry: tb, obsHTTP: obsHTTP, obsFile: obsFile}
	r.conv = newConverter(cfg, set.BuildInfo.Version, func(delta int64) {
		tb.DiffCacheObjects.Add(context.Background(), delta)
	})
	return r, nil
}

func (r *auditReceiver) Start(ctx context.Context, host component.Host) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	bg, cancel := context.WithCancel(context.Background())
	r.cancel = cancel

	if len(r.cfg.Files) > 0 {
		client, err := r.storageClient(ctx, host)
		if err != nil {
			cancel()
			return err
		}
		r.storage = client
		switch {
		case client == nil && r.cfg.StartAt == startAtEnd:
			r.set.Logger.Info("No storage configured: audit log files are read from their end, events written while the collector was down are not read",
				zap.Strings("files", r.cfg.Files))
		case client == nil:
			r.set.Logger.Info("No storage configured: audit log files are read from their beginning at every start, so a restart sends their events again",
				zap.Strings("files", r.cfg.Files))
		}
		files := newFileHealth(host)
		for _, path := range r.cfg.Files {
			t := newTailer(path, r, client)
			t.health = func(err error) { files.report(path, err) }
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				t.run(bg)
			}()
		}
	}

	if r.cfg.webhookEnabled() {
		if err := r.startServer(ctx, host); err != nil {
			cancel()
			r.wg.Wait()
			return err
		}
	}
	return nil
}

func (r *auditReceiver) storageClient(ctx context.Context, host component.Host) (storage.Client, error) {
	if r.cfg.Storage == nil {
		return nil, nil
	}
	ext, ok := host.GetExtensions()[*r.cfg.Storage]
	if !ok {
		return nil, fmt.Errorf("storage: extension %q not found", r.cfg.Storage)
	}
	se, ok := ext.(storage.Extension)
	if !ok {
		return nil, fmt.Errorf("storage: extension %q is not a storage extension", r.cfg.Storage)
	}
	client, err := se.GetClient(ctx, component.KindReceiver, r.set.ID, "")
	if err != nil {
		return nil, fmt.Errorf("storage: getting a client from %q: %w", r.cfg.Storage, err)
	}
	return client, nil
}

func (r *auditReceiver) startServer(ctx context.Context, host component.Host) error {
	// ToServer fills defaults into the config it is called on; keep the user's config as read.
	sc := r.cfg.ServerConfig
	ln, err := sc.ToListener(ctx)
	if err != nil {
		return fmt.Errorf("endpoint: listening on %s: %w", sc.NetAddr.Endpoint, err)
	}
	w := &webhook{r: r}
	handler := w.routes()
	if len(r.cfg.AllowedClientNames) > 0 {
		handler = w.requireClientName(r.cfg.AllowedClientNames, handler)
	}
	srv, err := sc.ToServer(ctx, host.GetExtensions(), r.set.TelemetrySettings, handler,
		confighttpErrorHandler(w))
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("creating the webhook server: %w", err)
	}
	w.maxBody = sc.MaxRequestBodySize
	r.server = srv
	r.addr = ln.Addr()
	if r.cfg.Cluster == "" {
		r.set.Logger.Info("Audit webhook listening; no cluster is configured, so only POST /audit/{cluster} is served",
			zap.Stringer("address", ln.Addr()))
	} else {
		r.set.Logger.Info("Audit webhook listening", zap.Stringer("address", ln.Addr()), zap.String("default_cluster", r.cfg.Cluster))
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			componentstatus.ReportStatus(host, componentstatus.NewFatalErrorEvent(err))
		}
	}()
	return nil
}

func (r *auditReceiver) Shutdown(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs error
	if r.server != nil {
		errs = errors.Join(errs, r.server.Shutdown(ctx))
		r.server = nil
	}
	if r.cancel != nil {
		r.cancel()
		r.cancel = nil
	}
	r.wg.Wait()
	if r.storage != nil {
		errs = errors.Join(errs, r.storage.Close(ctx))
		r.storage = nil
	}
	return errs
}

// listenAddr is the webhook's bound address, for tests that listen on port 0.
func (r *auditReceiver) listenAddr() net.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.addr
}

// fileHealth turns the problems of the files being tailed into the component's status: a
// recoverable error while any file has one, OK again once none has.
type fileHealth struct {
	mu      sync.Mutex
	host    component.Host
	failing map[string]bool
}

func newFileHealth(host component.Host) *fileHealth {
	return &fileHealth{host: host, failing: map[string]bool{}}
}

func (h *fileHealth) report(path string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.failing[path] = true
		componentstatus.ReportStatus(h.host, componentstatus.NewRecoverableErrorEvent(err))
		return
	}
	if !h.failing[path] {
		return
	}
	delete(h.failing, path)
	if len(h.failing) == 0 {
		componentstatus.ReportStatus(h.host, componentstatus.NewEvent(componentstatus.StatusOK))
	}
}
