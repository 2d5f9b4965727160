package k8sauditreceiver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/receiverhelper"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/kubetrail/kubetrail/internal/auditconv"
	"github.com/kubetrail/kubetrail/internal/bytebudget"
	"github.com/kubetrail/kubetrail/receiver/k8sauditreceiver/internal/metadata"
)

// auditReceiver runs the webhook server and the file tailers; both feed one converter, so a
// diff can span a webhook event and a file event of the same object.
type auditReceiver struct {
	cfg  *Config
	set  receiver.Settings
	next consumer.Traces // the traces output: spans; nil without a traces pipeline
	// edge is the edge output, the receiver in a logs pipeline: each audit event as received,
	// one log record, for an edge collector that forwards to Kafka; nil without a logs pipeline.
	edge      consumer.Logs
	telemetry *metadata.TelemetryBuilder
	obsHTTP   *receiverhelper.ObsReport
	obsFile   *receiverhelper.ObsReport
	tel       auditconv.Telemetry
	conv      *auditconv.Converter
	// shutdownBudget bounds Shutdown when its context has no deadline.
	shutdownBudget time.Duration

	mu       sync.Mutex // guards the fields below across Start and Shutdown
	server   *http.Server
	inflight *inFlight
	addr     net.Addr
	conns    *connLimit
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	storage  storage.Client
}

func newAuditReceiver(set receiver.Settings, cfg *Config) (*auditReceiver, error) {
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
	r := &auditReceiver{
		cfg: cfg, set: set, telemetry: tb, obsHTTP: obsHTTP, obsFile: obsFile,
		shutdownBudget: defaultShutdownBudget,
	}
	r.tel = auditconv.Telemetry{
		FilteredEvents:      tb.K8sAuditFilteredEvents,
		DroppedEvents:       tb.K8sAuditDroppedEvents,
		TraceContextInvalid: tb.K8sAuditTraceContextInvalid,
		CacheObjects:        tb.K8sAuditDiffCacheObjects,
		CacheBytes:          tb.K8sAuditDiffCacheBytes,
		CacheEvictions:      tb.K8sAuditDiffCacheEvictions,
		DiffsSkipped:        tb.K8sAuditDiffsSkipped,
		DiffBaseRecords:     tb.K8sAuditDiffBaseRecords,
		ReceiveLag:          tb.K8sAuditReceiveLag,
	}
	r.conv = auditconv.New(auditconv.Options{
		Settings:     cfg.Conversion,
		ScopeName:    metadata.ScopeName,
		ScopeVersion: set.BuildInfo.Version,
		Logger:       sampledLogger(set.Logger),
		Telemetry:    r.tel,
	})
	return r, nil
}

func (r *auditReceiver) Start(ctx context.Context, host component.Host) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.conv.Start(ctx); err != nil {
		return err
	}
	bg, cancel := context.WithCancel(context.Background())
	r.cancel = cancel

	if len(r.cfg.Files) > 0 && r.next == nil {
		cancel()
		return errors.New("files: the audit log files feed the traces output only; the edge output (a logs pipeline) takes the webhook's events only: put this receiver in a traces pipeline, or remove files")
	}
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
			t := newTailer(path, r.tailerDeps(), client)
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

// tailerDeps is what the file tailers take from the receiver: the file pipeline, its logger and
// telemetry, and the file settings.
func (r *auditReceiver) tailerDeps() tailerDeps {
	return tailerDeps{
		consume: func(ctx context.Context, events []auditconv.Event) error {
			_, err := r.consume(ctx, r.obsFile, inputFile, r.cfg.Cluster, events)
			return err
		},
		conv:         r.conv,
		logger:       r.set.Logger,
		telemetry:    r.telemetry,
		pollInterval: r.cfg.PollInterval,
		startAtEnd:   r.cfg.StartAt == startAtEnd,
	}
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
	ln, err := r.listen(ctx, &sc)
	if err != nil {
		return fmt.Errorf("endpoint: listening on %s: %w", sc.NetAddr.Endpoint, err)
	}
	w := &webhook{r: r, inFlight: bytebudget.New(r.cfg.MaxInFlightBytes)}
	handler := w.routes()
	if len(r.cfg.AllowedClientNames) > 0 {
		handler = w.requireClientName(r.cfg.AllowedClientNames, handler)
	}
	inflight := newInFlight()
	srv, err := sc.ToServer(ctx, host.GetExtensions(), r.set.TelemetrySettings, inflight.track(handler),
		confighttpErrorHandler(w))
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("creating the webhook server: %w", err)
	}
	w.maxBody = sc.MaxRequestBodySize
	srv.MaxHeaderBytes = r.cfg.MaxHeaderBytes
	srv.Handler = w.respectsBodyRate(w.chargesDecoders(srv.Handler, sc.MaxRequestBodySize, sc.CompressionAlgorithms), r.cfg.MinBodyRate)
	r.server = srv
	r.inflight = inflight
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
		errs = errors.Join(errs, r.stopServer(ctx))
		r.server, r.inflight = nil, nil
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
	return errors.Join(errs, r.conv.Close())
}

// defaultShutdownBudget bounds the webhook's shutdown when the collector gives no deadline,
// which is what it does on SIGTERM: without a bound, one client holding a body open would keep
// the process alive until the kubelet kills it (terminationGracePeriodSeconds, 30 s by
// default), and the exporters would lose that time to flush. A real apiserver's batch is read
// and consumed in milliseconds, so 5 s only cuts what would never have finished.
const defaultShutdownBudget = 5 * time.Second

// stopServer stops the webhook within ctx's deadline, or within shutdownBudget when ctx has
// none. For the first three quarters of the time requests in flight may finish (new
// connections are refused, idle ones closed); then every request still in flight is cut: a
// body still arriving stops arriving, a batch still in the pipeline has its context cancelled,
// and each answers 503 so that its sender sends it again. What has not answered by the deadline
// (a pipeline that ignores cancellation, a client that does not read) has its connection closed.
func (r *auditReceiver) stopServer(ctx context.Context) error {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(r.shutdownBudget)
	}
	drainCtx, cancel := context.WithDeadline(ctx, time.Now().Add(time.Until(deadline)*3/4))
	defer cancel()
	if r.server.Shutdown(drainCtx) == nil {
		return nil
	}
	cut, answered := r.inflight.abort()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-answered:
	case <-timer.C:
	case <-ctx.Done():
	}
	left := r.inflight.len()
	err := r.server.Close()
	r.set.Logger.Warn("Audit webhook shutdown time is over: requests still in flight were cut with a 503 (the apiserver sends them again) and the connections still open closed",
		zap.Int("requests_cut", cut), zap.Int("requests_unanswered", left))
	return err
}

// inFlightRequests is how many webhook requests are being served, for tests.
func (r *auditReceiver) inFlightRequests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inflight == nil {
		return 0
	}
	return r.inflight.len()
}

// inFlight tracks the webhook requests being served, so that a shutdown past its drain time
// can cut them with an answer instead of leaving them to a closed connection.
type inFlight struct {
	mu       sync.Mutex
	reqs     map[*heldRequest]struct{}
	aborting bool
	answered chan struct{} // closed once aborting and every request has returned
}

type heldRequest struct {
	rc  *http.ResponseController
	cut atomic.Bool
}

func newInFlight() *inFlight { return &inFlight{reqs: map[*heldRequest]struct{}{}} }

func (f *inFlight) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reqs)
}

// track wraps the webhook's handler.
func (f *inFlight) track(next http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		q := &heldRequest{rc: http.NewResponseController(rw)}
		f.mu.Lock()
		if f.aborting {
			f.mu.Unlock()
			answerShuttingDown(rw)
			return
		}
		f.reqs[q] = struct{}{}
		f.mu.Unlock()
		defer f.done(q)
		next.ServeHTTP(&cutWriter{ResponseWriter: rw, q: q}, req)
		if q.cut.Load() {
			// Push the answer out before the request counts as done: the connection may
			// be closed right after.
			_ = q.rc.Flush()
		}
	})
}

func (f *inFlight) done(q *heldRequest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.reqs, q)
	if f.aborting && len(f.reqs) == 0 {
		close(f.answered)
	}
}

// abort cuts every request in flight and refuses new ones. It returns how many were cut and a
// channel closed once all of them have returned.
func (f *inFlight) abort() (int, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.aborting = true
	f.answered = make(chan struct{})
	for q := range f.reqs {
		q.cut.Store(true)
		// A read deadline in the past ends a body read in progress, and (once the body
		// is read) the connection's background read, which cancels the request's context.
		_ = q.rc.SetReadDeadline(time.Unix(1, 0))
	}
	if len(f.reqs) == 0 {
		close(f.answered)
	}
	return len(f.reqs), f.answered
}

// cutWriter turns the error answer of a request cut at shutdown (the handler sees a failed
// body read or a cancelled pipeline) into a 503. A success is left alone: the spans were taken.
type cutWriter struct {
	http.ResponseWriter
	q        *heldRequest
	replaced bool
}

func (w *cutWriter) WriteHeader(code int) {
	if w.q.cut.Load() && code >= 300 {
		w.replaced = true
		answerShuttingDown(w.ResponseWriter)
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *cutWriter) Write(p []byte) (int, error) {
	if w.replaced {
		return len(p), nil // the handler's own error body, replaced
	}
	return w.ResponseWriter.Write(p)
}

func (w *cutWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// answerShuttingDown answers 503 with a metav1.Status, like the webhook's other refusals.
func answerShuttingDown(rw http.ResponseWriter) {
	h := rw.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Retry-After", strconv.Itoa(retryAfterSeconds))
	h.Set("Connection", "close")
	rw.WriteHeader(http.StatusServiceUnavailable)
	_, _ = fmt.Fprintf(rw, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"the collector is shutting down, retry","reason":"ServiceUnavailable","code":503,"details":{"retryAfterSeconds":%d}}`+"\n", retryAfterSeconds)
}

// openConnections is how many connections the webhook holds open, for tests.
func (r *auditReceiver) openConnections() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conns == nil {
		return 0
	}
	return r.conns.openConnections()
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

// sampledLogger logs the first few lines of each message per minute and drops the rest: one
// bad client can send thousands of bad events a second, and each is counted in a metric anyway.
func sampledLogger(l *zap.Logger) *zap.Logger {
	return l.WithOptions(zap.WrapCore(func(core zapcore.Core) zapcore.Core {
		return zapcore.NewSamplerWithOptions(core, time.Minute, 5, 0)
	}))
}
