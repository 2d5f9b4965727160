package k8seventsreceiver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/kubetrail/kubetrail/receiver/k8seventsreceiver/internal/metadata"
)

// apiSource is the Events API the receiver watches: events.k8s.io/v1, or core/v1 on an
// apiserver that does not serve it.
type apiSource struct {
	groupResource string // for messages: "events.events.k8s.io"
	rbacGroup     string // the API group to name in an RBAC hint: "events.k8s.io" or "" (core)
	expected      runtime.Object
	// listWatch builds the list-watch of a namespace; every list or watch call's error goes
	// to failed first (client-go's reflector retries some, a refused connection among them,
	// without returning them).
	listWatch func(namespace string, failed func(error)) cache.ListerWatcher
}

func eventsV1Source(client kubernetes.Interface, cfg *Config) apiSource {
	return apiSource{
		groupResource: "events.events.k8s.io",
		rbacGroup:     "events.k8s.io",
		expected:      &eventsv1.Event{},
		listWatch: func(ns string, failed func(error)) cache.ListerWatcher {
			return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
				ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					selectors(cfg, &o)
					l, err := client.EventsV1().Events(ns).List(ctx, o)
					if err != nil {
						failed(err)
					}
					return l, err
				},
				WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
					selectors(cfg, &o)
					w, err := client.EventsV1().Events(ns).Watch(ctx, o)
					if err != nil {
						failed(err)
					}
					return w, err
				},
			}, client)
		},
	}
}

func coreV1Source(client kubernetes.Interface, cfg *Config) apiSource {
	return apiSource{
		groupResource: "events (core/v1)",
		rbacGroup:     "",
		expected:      &corev1.Event{},
		listWatch: func(ns string, failed func(error)) cache.ListerWatcher {
			return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
				ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					selectors(cfg, &o)
					l, err := client.CoreV1().Events(ns).List(ctx, o)
					if err != nil {
						failed(err)
					}
					return l, err
				},
				WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
					selectors(cfg, &o)
					w, err := client.CoreV1().Events(ns).Watch(ctx, o)
					if err != nil {
						failed(err)
					}
					return w, err
				},
			}, client)
		},
	}
}

func selectors(cfg *Config, o *metav1.ListOptions) {
	o.LabelSelector = cfg.LabelSelector
	o.FieldSelector = cfg.FieldSelector
}

// chooseSource asks discovery whether events.k8s.io/v1 is served. Any answer other than "not
// found" (the apiserver unreachable, say) is an error, so that an outage at start does not
// silently pick the older API.
func chooseSource(client kubernetes.Interface, cfg *Config) (apiSource, error) {
	_, err := client.Discovery().ServerResourcesForGroupVersion(eventsv1.SchemeGroupVersion.String())
	switch {
	case err == nil:
		return eventsV1Source(client, cfg), nil
	case apierrors.IsNotFound(err):
		return coreV1Source(client, cfg), nil
	}
	return apiSource{}, fmt.Errorf("discovering %s: %w", eventsv1.SchemeGroupVersion, err)
}

// scopeStore is the reflector's store for one namespace (or all): it keeps nothing itself and
// hands every Event version to the tracker, whose verdicts go to the pipeline in order.
type scopeStore struct {
	ctx       context.Context
	namespace string
	tracker   *tracker
	pipeline  *pipeline
	// onProgress is called with every call the reflector makes (a list, an Event, a bookmark):
	// the apiserver answers again.
	onProgress func()

	synced   bool
	progress atomic.Int64 // bumped by every call, bookmarks included: the stall guard's pulse
}

var (
	_ cache.TransformingStore      = (*scopeStore)(nil)
	_ cache.ReflectorBookmarkStore = (*scopeStore)(nil)
)

func (s *scopeStore) Add(obj any) error    { return s.observe(obj) }
func (s *scopeStore) Update(obj any) error { return s.observe(obj) }

// pulse records progress for the stall guard and the health status.
func (s *scopeStore) pulse() {
	s.progress.Add(1)
	if s.onProgress != nil {
		s.onProgress()
	}
}

func (s *scopeStore) observe(obj any) error {
	s.pulse()
	ev, ok := strip(obj)
	if !ok {
		return fmt.Errorf("unexpected object %T in the Events watch", obj)
	}
	if item, ok := s.tracker.observe(ev, false); ok {
		return s.pipeline.enqueue(s.ctx, item)
	}
	return nil
}

func (s *scopeStore) Delete(obj any) error {
	s.pulse()
	if ev, ok := strip(obj); ok {
		if item, ok := s.tracker.forget(ev); ok {
			return s.pipeline.enqueue(s.ctx, item)
		}
	}
	return nil
}

// Replace is a full list: the first one after start, or a relist after an expired (410) or
// broken watch. Versions already seen are recognised by the tracker, so a relist emits only
// occurrences that happened while the watch was down.
func (s *scopeStore) Replace(list []any, _ string) error {
	s.pulse()
	evs := make([]*eventsv1.Event, 0, len(list))
	for _, obj := range list {
		if ev, ok := strip(obj); ok {
			evs = append(evs, ev)
		}
	}
	items := s.tracker.replace(s.namespace, evs, !s.synced)
	s.synced = true
	for _, item := range items {
		if err := s.pipeline.enqueue(s.ctx, item); err != nil {
			return err
		}
	}
	return nil
}

func (s *scopeStore) Resync() error { return nil }

func (s *scopeStore) Bookmark(string) error {
	s.pulse()
	return nil
}

func (s *scopeStore) Transformer() cache.TransformFunc { return transform }

// watchRunner runs the list-watches of one receiver start (or one leadership term).
type watchRunner struct {
	logger   *zap.Logger
	tel      *metadata.TelemetryBuilder
	cfg      *Config
	clock    clock.WithTicker
	host     component.Host
	tracker  *tracker
	pipeline *pipeline

	degraded atomic.Bool
}

// run picks the Events API and list-watches every configured namespace until ctx ends, and
// emits the series spans of series that went quiet meanwhile.
func (w *watchRunner) run(ctx context.Context, client kubernetes.Interface) {
	var sweeper sync.WaitGroup
	defer sweeper.Wait()
	sweeper.Go(func() { w.sweepSeries(ctx) })
	var src apiSource
	retries := w.cfg.Backoff.exponential()
	for {
		var err error
		if src, err = chooseSource(client, w.cfg); err == nil {
			break
		}
		w.failed(ctx, err, "", "events.k8s.io")
		select {
		case <-w.clock.After(retries.Step()):
		case <-ctx.Done():
			return
		}
	}
	w.logger.Info("Watching Kubernetes Events", zap.String("api", src.groupResource), zap.Strings("namespaces", w.cfg.Namespaces))
	scopes := w.cfg.Namespaces
	if len(scopes) == 0 {
		scopes = []string{metav1.NamespaceAll}
	}
	var wg sync.WaitGroup
	for _, ns := range scopes {
		wg.Go(func() { w.watchScope(ctx, src, ns) })
	}
	wg.Wait()
}

// watchScope list-watches one namespace (or all) with one reflector, restarting it with capped
// exponential backoff on errors and at once when the watch closes or stalls.
func (w *watchRunner) watchScope(ctx context.Context, src apiSource, ns string) {
	store := &scopeStore{ctx: ctx, namespace: ns, tracker: w.tracker, pipeline: w.pipeline, onProgress: w.answering}
	// A list or watch call that fails is reported at once, whether or not the reflector
	// returns the error (it retries a refused connection itself, silently); reported keeps
	// the error that ends ListAndWatch from being reported twice.
	var reported atomic.Bool
	onCallError := func(err error) {
		if ctx.Err() != nil || errors.Is(err, context.Canceled) {
			return
		}
		reported.Store(true)
		w.failed(ctx, err, ns, src.rbacGroup)
	}
	// The reflector's own retries within one ListAndWatch follow the same policy, with the
	// jitter client-go gives its reflectors.
	reflectorBackoff := w.cfg.Backoff.exponential()
	reflectorBackoff.Jitter = 0.1
	refl := cache.NewReflectorWithOptions(src.listWatch(ns, onCallError), src.expected, store, cache.ReflectorOptions{
		Name:    "k8s_event_spans/" + scopeName(ns),
		Clock:   w.clock,
		Backoff: &reflectorBackoff,
	})
	retries := w.cfg.Backoff.exponential()
	for {
		runCtx, cancel := context.WithCancel(ctx)
		reported.Store(false)
		var stalled atomic.Bool
		var guard sync.WaitGroup
		if w.cfg.StalledWatchTimeout > 0 {
			guard.Go(func() {
				if w.stallGuard(runCtx, &store.progress) {
					stalled.Store(true)
					cancel()
				}
			})
		}
		start := w.clock.Now()
		err := refl.ListAndWatchWithContext(runCtx)
		cancel()
		guard.Wait()
		if ctx.Err() != nil {
			return
		}
		switch {
		case stalled.Load():
			w.tel.K8sEventSpansWatchRestarts.Add(ctx, 1, withReason(restartStalled))
			w.logger.Warn("Events watch delivered nothing, not even a bookmark; relisting",
				zap.String("namespace", scopeName(ns)), zap.Duration("stalled_watch_timeout", w.cfg.StalledWatchTimeout))
			// Nothing says the apiserver still answers: not healthy until it does.
			w.degraded.Store(true)
			w.report(componentstatus.NewRecoverableErrorEvent(fmt.Errorf("the Events watch in %s delivered nothing, not even a bookmark, for %s",
				scopeName(ns), w.cfg.StalledWatchTimeout)))
			continue
		case err == nil:
			// The watch ended without an error to report: expired (410 Gone) or closed by the
			// server. Relisting at once is what the reflector would do; the tracker dedups.
			w.tel.K8sEventSpansWatchRestarts.Add(ctx, 1, withReason(restartWatchClosed))
			w.logger.Debug("Events watch closed; relisting", zap.String("namespace", scopeName(ns)))
			retries = w.cfg.Backoff.exponential()
			continue
		}
		w.tel.K8sEventSpansWatchRestarts.Add(ctx, 1, withReason(restartError))
		if w.clock.Since(start) > w.cfg.Backoff.MaxInterval {
			retries = w.cfg.Backoff.exponential()
		}
		if !reported.Load() {
			w.failed(ctx, err, ns, src.rbacGroup)
		}
		select {
		case <-w.clock.After(retries.Step()):
		case <-ctx.Done():
			return
		}
	}
}

// sweepSeries closes the series that went quiet, when the earliest of them is due. It waits
// on a timer only while a series is open, so that an idle receiver holds no timer.
func (w *watchRunner) sweepSeries(ctx context.Context) {
	for {
		var due <-chan time.Time
		var timer clock.Timer
		if at, ok := w.tracker.nextDue(); ok {
			if wait := at.Sub(w.clock.Now()); wait > 0 {
				timer = w.clock.NewTimer(wait)
				due = timer.C()
			} else {
				now := make(chan time.Time, 1)
				now <- at
				due = now
			}
		}
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return
		case <-w.tracker.wake:
			// A series opened while none was: its due time is the earliest.
			if timer != nil {
				timer.Stop()
			}
			continue
		case <-due:
		}
		for {
			item, ok := w.tracker.due(w.clock.Now(), maxBatchItems)
			if !ok {
				break
			}
			if w.pipeline.enqueue(ctx, item) != nil {
				return
			}
		}
	}
}

// stallGuard returns true when progress did not move for StalledWatchTimeout, false when ctx ends.
func (w *watchRunner) stallGuard(ctx context.Context, progress *atomic.Int64) bool {
	timeout := w.cfg.StalledWatchTimeout
	ticker := w.clock.NewTicker(timeout / 4)
	defer ticker.Stop()
	last, lastChange := progress.Load(), w.clock.Now()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-ticker.C():
		}
		if p := progress.Load(); p != last {
			last, lastChange = p, w.clock.Now()
			continue
		}
		if w.clock.Since(lastChange) >= timeout {
			return true
		}
	}
}

// failed reports a list-watch failure as a recoverable status, naming what to grant when RBAC
// refused. Not a permanent one, even for RBAC: the receiver keeps retrying and a granted role
// makes it healthy again, while the collector's status machine never leaves a permanent error.
func (w *watchRunner) failed(ctx context.Context, err error, ns, group string) {
	w.degraded.Store(true)
	if apierrors.IsForbidden(err) {
		w.tel.K8sEventSpansErrors.Add(ctx, 1, withReason(errorForbidden))
		perr := fmt.Errorf("RBAC forbids reading Events in %s: grant verbs list and watch on resource events in API group %q: %w",
			scopeName(ns), group, err)
		w.logger.Error("Cannot list-watch Kubernetes Events", zap.Error(perr))
		w.report(componentstatus.NewRecoverableErrorEvent(perr))
		return
	}
	w.tel.K8sEventSpansErrors.Add(ctx, 1, withReason(errorListWatch))
	w.logger.Warn("Kubernetes Events list-watch failed; retrying with backoff", zap.String("namespace", scopeName(ns)), zap.Error(err))
	w.report(componentstatus.NewRecoverableErrorEvent(fmt.Errorf("list-watch of Events in %s: %w", scopeName(ns), err)))
}

// answering turns the status OK again after a failure, at the first call of the reflector's
// that shows the apiserver answers (a list, an Event, a bookmark).
func (w *watchRunner) answering() {
	if w.degraded.Load() && w.degraded.Swap(false) {
		w.report(componentstatus.NewEvent(componentstatus.StatusOK))
	}
}

func (w *watchRunner) report(ev *componentstatus.Event) {
	if w.host != nil {
		componentstatus.ReportStatus(w.host, ev)
	}
}

func scopeName(ns string) string {
	if ns == "" {
		return "all namespaces"
	}
	return "namespace " + ns
}
