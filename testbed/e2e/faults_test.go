//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/testbed/faultproxy"
)

// Faults injected between a collector and what it depends on (issue 40, item 4). A
// testbed/faultproxy front stands between the k8s_event_spans receiver and the apiserver (the
// collector's kubeconfig names the front, which reaches the apiserver with the admin
// credentials); each test stages one fault there while a writer creates one Event a second in a
// namespace of the test's own, and measures:
//   - noticed: from the fault to the collector's first sign of it (the log line the test names,
//     or the receiver's component status leaving StatusOK, whichever comes first);
//   - recovered: from the end of the fault until every Event created before it is a span and the
//     status is StatusOK again;
//   - that every Event became exactly one span (none lost, none twice).
// Each test appends its row to <out>/faults.md; docs/operations.md ("Faults, measured") is that
// table from a run. The receiver runs with the short timings below so that each fault costs
// seconds, not minutes; the table states them.

const (
	faultStall      = 6 * time.Second  // stalled_watch_timeout
	faultBackoffCap = 4 * time.Second  // backoff.max_interval
	faultFor        = 10 * time.Second // how long each fault lasts (past the backoff cap)
	faultRecovery   = 60 * time.Second // the longest a test waits for recovery
	probeEvery      = 1 * time.Second  // the writer's pace
	healthGate      = "+extension.healthcheck.useComponentStatus"
	receiverStatus  = "receiver:k8s_event_spans"
	statusOK        = "StatusOK"
	faultTableTitle = "| fault | noticed after | what the user sees | recovered after | lost | twice |"
)

// faultRig is a collector with k8s_event_spans behind a fault front, its writer and its output.
type faultRig struct {
	t       *testing.T
	env     *Env
	name    string
	ns      string
	out     string
	front   *faultproxy.HTTP
	c       *Collector
	health  string // host:port of the health check (component status)
	metrics string // host:port of the collector's Prometheus endpoint
	client  kubernetes.Interface

	mu      sync.Mutex
	created map[string]time.Time // probe Event name → when the apiserver took it
	stopW   func()
}

// newEventsRig starts the collector of a fault test, named fault-<name>, on namespace fault-<name>
// (its cluster name too), and its writer; tune adjusts the config before the start.
func newEventsRig(t *testing.T, env *Env, name string, tune func(Config, *faultRig)) *faultRig {
	t.Helper()
	requireEventsReceiver(t, env)
	r := &faultRig{t: t, env: env, name: name, ns: "fault-" + name, created: map[string]time.Time{}}
	rc, err := clientcmd.BuildConfigFromFlags("", env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if r.client, err = kubernetes.NewForConfig(rc); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := r.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("namespace %s: %v", r.ns, err)
	}
	t.Cleanup(func() { _ = r.client.CoreV1().Namespaces().Delete(context.Background(), r.ns, metav1.DeleteOptions{}) })
	if r.front, err = faultproxy.ListenHTTP(env.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.front.Close() })
	kubeconfig := filepath.Join(env.OutDir, r.ns+".kubeconfig")
	if err := r.front.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	healthPort, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	metricsPort, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	r.health, r.metrics = fmt.Sprintf("127.0.0.1:%d", healthPort), fmt.Sprintf("127.0.0.1:%d", metricsPort)
	r.out = filepath.Join(env.OutDir, r.ns+"-spans.jsonl")
	_ = os.Remove(r.out)

	cfg := Config{}
	cfg.Set("receivers.k8s_event_spans.auth_type", "kubeConfig")
	cfg.Set("receivers.k8s_event_spans.cluster", r.ns)
	cfg.Set("receivers.k8s_event_spans.namespaces", []any{r.ns})
	cfg.Set("receivers.k8s_event_spans.stalled_watch_timeout", faultStall.String())
	cfg.Set("receivers.k8s_event_spans.backoff.initial_interval", "500ms")
	cfg.Set("receivers.k8s_event_spans.backoff.max_interval", faultBackoffCap.String())
	cfg.Set("exporters.file.path", r.out)
	cfg.Set("exporters.file.flush_interval", "100ms")
	cfg.Set("extensions.health_check.http.endpoint", r.health)
	cfg.Set("extensions.health_check.http.status.enabled", true)
	cfg.Set("extensions.health_check.http.status.path", "/status")
	cfg.Set("service.extensions", []any{"health_check"})
	cfg.SetPipeline("receivers", "k8s_event_spans")
	cfg.SetPipeline("exporters", "file")
	cfg.Set("service.telemetry.logs.level", "info")
	cfg.Set("service.telemetry.metrics.level", "normal")
	cfg.Set("service.telemetry.metrics.readers", []any{map[string]any{"pull": map[string]any{"exporter": map[string]any{
		"prometheus": map[string]any{"host": "127.0.0.1", "port": metricsPort}}}}})
	if tune != nil {
		tune(cfg, r)
	}
	r.c = env.StartExtraCollectorWith(t, r.ns, cfg, CollectorOptions{Kubeconfig: kubeconfig, FeatureGates: []string{healthGate}})
	r.startWriter()
	t.Cleanup(r.stopWriter)
	// Ready: the first probe is a span and the receiver's status is OK.
	if _, ok := until(30*time.Second, func() bool {
		first := r.createdBefore(time.Now())
		return len(first) > 0 && len(r.exported()[first[0]]) > 0 && r.status() == statusOK
	}); !ok {
		t.Fatalf("%s: the collector did not turn the first probe into a span with status OK (status %q):\n%s", r.ns, r.status(), r.c.LogTail(20))
	}
	return r
}

// startWriter creates an Event (reason FaultProbe, named probe-NNN) every probeEvery through the
// apiserver directly (not through the front), until stopWriter.
func (r *faultRig) startWriter() {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; ; i++ {
			now := metav1.NewTime(time.Now())
			ev := &corev1.Event{
				ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("probe-%03d", i), Namespace: r.ns},
				InvolvedObject:      corev1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: r.ns, Name: "fault-probe"},
				Reason:              "FaultProbe",
				Message:             fmt.Sprintf("probe %d of %s", i, r.name),
				Type:                corev1.EventTypeNormal,
				Count:               1,
				FirstTimestamp:      now,
				LastTimestamp:       now,
				Source:              corev1.EventSource{Component: "kubetrail-e2e"},
				ReportingController: "kubetrail.io/e2e",
				ReportingInstance:   "e2e",
			}
			if _, err := r.client.CoreV1().Events(r.ns).Create(context.Background(), ev, metav1.CreateOptions{}); err != nil {
				r.t.Errorf("%s: create %s: %v", r.ns, ev.Name, err)
			} else {
				r.mu.Lock()
				r.created[ev.Name] = time.Now()
				r.mu.Unlock()
			}
			select {
			case <-quit:
				return
			case <-time.After(probeEvery):
			}
		}
	}()
	var once sync.Once
	r.stopW = func() { once.Do(func() { close(quit); <-done }) }
}

func (r *faultRig) stopWriter() { r.stopW() }

// createdBefore lists the probes the apiserver took before at, oldest first.
func (r *faultRig) createdBefore(at time.Time) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var names []string
	for name, when := range r.created {
		if when.Before(at) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// exported reads the collector's output: the span IDs of each probe Event's spans.
func (r *faultRig) exported() map[string][]string {
	out := map[string][]string{}
	for _, s := range spansInFile(r.out).OfType(model.SpanTypeEvent) {
		if name := s.Attr(model.AttrEventName); strings.HasPrefix(name, "probe-") {
			out[name] = append(out[name], s.SpanID)
		}
	}
	return out
}

// allExported reports whether every probe of names is a span.
func (r *faultRig) allExported(names []string) bool {
	got := r.exported()
	for _, name := range names {
		if len(got[name]) == 0 {
			return false
		}
	}
	return true
}

// status is the receiver's component status as the health check reports it ("" if unknown).
func (r *faultRig) status() string { return componentStatus(r.health, receiverStatus) }

// componentStatus is the status of a component (e.g. "processor:k8s_object_link") as the health
// check extension (component status, verbose) at addr reports it; "" if unknown.
func componentStatus(addr, key string) string {
	c := &http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + addr + "/status?verbose")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var doc map[string]any
	if json.NewDecoder(resp.Body).Decode(&doc) != nil {
		return ""
	}
	return findStatus(doc, key)
}

// findStatus looks for the component named key anywhere under components and returns its status.
func findStatus(doc map[string]any, key string) string {
	comps, _ := doc["components"].(map[string]any)
	for name, v := range comps {
		sub, _ := v.(map[string]any)
		if name == key {
			s, _ := sub["status"].(string)
			return s
		}
		if s := findStatus(sub, key); s != "" {
			return s
		}
	}
	return ""
}

// until polls cond every 100 ms for up to timeout and returns how long it took.
func until(timeout time.Duration, cond func() bool) (time.Duration, bool) {
	start := time.Now()
	for {
		if cond() {
			return time.Since(start), true
		}
		if time.Since(start) > timeout {
			return time.Since(start), false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// logSince returns the collector's log from byte offset off on.
func (r *faultRig) logSince(off int) string {
	b, _ := os.ReadFile(r.c.LogPath)
	if off > len(b) {
		return ""
	}
	return string(b[off:])
}

func (r *faultRig) logSize() int {
	st, err := os.Stat(r.c.LogPath)
	if err != nil {
		return 0
	}
	return int(st.Size())
}

// faultResult is one row of the fault table.
type faultResult struct {
	fault          string
	noticed        time.Duration
	noticedOK      bool
	sees           string
	recovered      time.Duration
	recoveredOK    bool
	lost, twice    int
	restarts, errs map[string]float64
}

// stage runs one fault: inject, wait up to noticeWithin for a new log line containing signal or
// a status other than OK, hold the fault until faultFor after inject, restore, then measure the
// recovery, stop the writer and count the spans of every probe.
func (r *faultRig) stage(fault string, signal string, noticeWithin time.Duration, inject, restore func()) *faultResult {
	r.t.Helper()
	res := &faultResult{fault: fault}
	off := r.logSize()
	seen := map[string]bool{}
	var statuses []string
	note := func(s string) {
		if s != "" && !seen[s] {
			seen[s] = true
			statuses = append(statuses, s)
		}
	}
	note(r.status())
	start := time.Now()
	inject()
	res.noticed, res.noticedOK = until(noticeWithin, func() bool {
		st := r.status()
		note(st)
		return strings.Contains(r.logSince(off), signal) || (st != "" && st != statusOK)
	})
	// Hold the fault for faultFor in all, watching the status.
	for time.Since(start) < faultFor {
		note(r.status())
		time.Sleep(200 * time.Millisecond)
	}
	restoredAt := time.Now()
	restore()
	due := r.createdBefore(restoredAt)
	res.recovered, res.recoveredOK = until(faultRecovery, func() bool {
		st := r.status()
		note(st)
		return r.allExported(due) && st == statusOK
	})
	// Two more probes after the recovery, then every probe's spans.
	time.Sleep(2 * probeEvery)
	r.stopWriter()
	all := r.createdBefore(time.Now().Add(time.Hour))
	until(30*time.Second, func() bool { return r.allExported(all) })
	time.Sleep(time.Second) // a duplicate still in flight
	res.tally(all, r.exported())
	res.restarts = scrapeByReason(r.metrics, "otelcol_k8s_event_spans_watch_restarts")
	res.errs = scrapeByReason(r.metrics, "otelcol_k8s_event_spans_errors")
	logText := r.logSince(off)
	res.sees = fmt.Sprintf("log %q; status %s; %s", firstLine(logText, signal), strings.Join(statuses, "→"),
		byReason("watch_restarts", res.restarts, "errors", res.errs))

	Check(r.t, fault+": noticed", res.noticedOK, "no %q in the log and status OK for %s:\n%s", signal, noticeWithin, r.c.LogTail(20))
	Check(r.t, fault+": recovered", res.recoveredOK, "after %s: status %q, %d probes due:\n%s", faultRecovery, r.status(), len(due), r.c.LogTail(20))
	Check(r.t, fault+": every Event one span", len(all) > 0 && res.lost == 0 && res.twice == 0,
		"%d probes: %d lost, %d twice", len(all), res.lost, res.twice)
	r.t.Logf("%s: noticed after %s, recovered after %s; %d probes; %s", fault, res.noticed.Round(100*time.Millisecond),
		res.recovered.Round(100*time.Millisecond), len(all), res.sees)
	appendFaultRow(r.t, r.env, r.t.Name(), res)
	return res
}

// tally counts the Events or writes of want without a span (lost) and with more than one (twice:
// several span IDs, or one span ID exported again).
func (res *faultResult) tally(want []string, got map[string][]string) {
	for _, id := range want {
		switch {
		case len(got[id]) == 0:
			res.lost++
		case len(got[id]) > 1:
			res.twice++
		}
	}
}

// firstLine is the first log line containing s, its level and message only (the collector's
// console lines: time, level, [logger,] caller, message, fields).
func firstLine(logText, s string) string {
	for _, line := range strings.Split(logText, "\n") {
		if !strings.Contains(line, s) {
			continue
		}
		fields := strings.Split(line, "\t")
		for i := 2; i+1 < len(fields); i++ {
			if strings.Contains(fields[i], ".go:") {
				return fields[1] + " " + fields[i+1]
			}
		}
		return line
	}
	return ""
}

// byReason renders counters by reason as `name{reason}=n`, sorted, "no watch_restarts, errors"
// when every one is zero.
func byReason(pairs ...any) string {
	var parts, none []string
	for i := 0; i+1 < len(pairs); i += 2 {
		name, counts := pairs[i].(string), pairs[i+1].(map[string]float64)
		reasons := make([]string, 0, len(counts))
		for reason, n := range counts {
			if n > 0 {
				reasons = append(reasons, reason)
			}
		}
		sort.Strings(reasons)
		for _, reason := range reasons {
			parts = append(parts, fmt.Sprintf("%s{%s}=%d", name, reason, int(counts[reason])))
		}
		if len(reasons) == 0 {
			none = append(none, name)
		}
	}
	if len(none) > 0 {
		parts = append(parts, "no "+strings.Join(none, ", "))
	}
	return strings.Join(parts, ", ")
}

// scrapeByReason reads a counter's values by their reason label.
func scrapeByReason(addr, name string) map[string]float64 {
	_, body, err := scrapeSum(addr, name, "")
	out := map[string]float64{}
	if err != nil {
		return out
	}
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name) {
			continue
		}
		reason := "?"
		if i := strings.Index(line, `reason="`); i >= 0 {
			rest := line[i+len(`reason="`):]
			reason = rest[:strings.IndexByte(rest, '"')]
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
			out[reason] += v
		}
	}
	return out
}

// appendFaultRow adds a row to <out>/faults.md (with the header when the file is new).
func appendFaultRow(t *testing.T, env *Env, test string, res *faultResult) {
	path := filepath.Join(env.OutDir, "faults.md")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("faults.md: %v", err)
		return
	}
	defer f.Close()
	if st, _ := f.Stat(); st != nil && st.Size() == 0 {
		fmt.Fprintf(f, "%s\n|---|---|---|---|---|---|\n", faultTableTitle)
	}
	mark := func(d time.Duration, ok bool) string {
		switch {
		case !ok:
			return "not within " + d.Round(time.Second).String()
		case d < 100*time.Millisecond:
			return "< 0.1 s" // the first poll
		}
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	fmt.Fprintf(f, "| %s (%s) | %s | %s | %s | %d | %d |\n", res.fault, test, mark(res.noticed, res.noticedOK),
		strings.ReplaceAll(res.sees, "|", "/"), mark(res.recovered, res.recoveredOK), res.lost, res.twice)
}

// TestFaultEventsHungWatch freezes the apiserver's connections: open watches stay open and
// deliver nothing, new requests hang. The stall guard must notice and relist.
func TestFaultEventsHungWatch(t *testing.T) {
	env := Testbed(t)
	r := newEventsRig(t, env, "hung", nil)
	res := r.stage("watch hung (connections open, nothing arrives)", "Events watch delivered nothing", 2*faultStall,
		r.front.Freeze, func() { _ = r.front.Pass() })
	Check(t, "hung watch: the stall guard restarted the watch", res.restarts["stalled"] > 0, "watch_restarts %v", res.restarts)
}

// TestFaultEventsAPIServerUnreachable closes the apiserver's port for longer than the backoff
// cap: connections cut, new ones refused.
func TestFaultEventsAPIServerUnreachable(t *testing.T) {
	env := Testbed(t)
	r := newEventsRig(t, env, "unreachable", nil)
	r.stage("apiserver unreachable "+faultFor.String()+" (past the "+faultBackoffCap.String()+" backoff cap)", "list-watch failed", faultStall+4*time.Second,
		r.front.Refuse, func() {
			if err := r.front.Pass(); err != nil {
				t.Fatalf("listen again: %v", err)
			}
		})
}

// TestFaultEventsUnauthorizedMidWatch ends the watch and answers 401 to every Events request
// (credentials that stopped working), then accepts them again.
func TestFaultEventsUnauthorizedMidWatch(t *testing.T) {
	env := Testbed(t)
	r := newEventsRig(t, env, "unauthorized", nil)
	r.stage("401 Unauthorized mid-watch, then restored", "list-watch failed", 5*time.Second,
		func() { r.front.Answer(http.StatusUnauthorized, faultproxy.Resource("events")); r.front.EndWatches() },
		func() { _ = r.front.Pass() })
}

// TestFaultEventsForbiddenMidWatch ends the watch and answers 403 to every Events request (RBAC
// revoked), then accepts them again (RBAC restored): the receiver names what to grant while it
// is refused and is healthy again without a restart.
func TestFaultEventsForbiddenMidWatch(t *testing.T) {
	env := Testbed(t)
	r := newEventsRig(t, env, "forbidden", nil)
	res := r.stage("403 Forbidden mid-watch (RBAC revoked), then restored", "RBAC forbids reading Events", 5*time.Second,
		func() { r.front.Answer(http.StatusForbidden, faultproxy.Resource("events")); r.front.EndWatches() },
		func() { _ = r.front.Pass() })
	Check(t, "403: counted as forbidden", res.errs["forbidden"] > 0, "errors %v", res.errs)
}

// TestFaultEventsExpiredWatchFailingRelists expires every Events watch (410 Gone, as for a
// compacted resource version) and fails every list with 503 while the fault lasts.
func TestFaultEventsExpiredWatchFailingRelists(t *testing.T) {
	env := Testbed(t)
	r := newEventsRig(t, env, "expired", nil)
	r.stage("410 Expired watch with failing relists (503)", "list-watch failed", 5*time.Second,
		func() {
			r.front.Expire(faultproxy.Watches("events"))
			r.front.Answer(http.StatusServiceUnavailable, faultproxy.Relists("events"))
			r.front.EndWatches()
		},
		func() { _ = r.front.Pass() })
}

// TestFaultEventsLeaseStolen takes the Events leader Lease away from the leader (another holder
// renews it for faultFor) and then lets it expire: the receiver stops watching while it does not
// lead, takes the Lease back, and relists without losing or repeating an Event.
func TestFaultEventsLeaseStolen(t *testing.T) {
	env := Testbed(t)
	lease := "fault-lease"
	r := newEventsRig(t, env, "lease", func(cfg Config, _ *faultRig) {
		cfg.Set("receivers.k8s_event_spans.leader_election", map[string]any{
			"lease_name": lease, "lease_namespace": "fault-lease",
			"lease_duration": "6s", "renew_deadline": "4s", "retry_period": "1s",
		})
	})
	var stop chan struct{}
	var done sync.WaitGroup
	steal := func() {
		stop = make(chan struct{})
		done.Go(func() {
			for {
				l, err := r.client.CoordinationV1().Leases(r.ns).Get(context.Background(), lease, metav1.GetOptions{})
				if err == nil {
					thief, now, secs := "fault-thief", metav1.NewMicroTime(time.Now()), int32(6)
					l.Spec.HolderIdentity, l.Spec.RenewTime, l.Spec.LeaseDurationSeconds = &thief, &now, &secs
					_, _ = r.client.CoordinationV1().Leases(r.ns).Update(context.Background(), l, metav1.UpdateOptions{})
				}
				select {
				case <-stop:
					return
				case <-time.After(time.Second):
				}
			}
		})
	}
	r.stage("Events leader Lease stolen for "+faultFor.String(), "Lost or released the Events leader lease", 8*time.Second,
		steal, func() { close(stop); done.Wait() })
	Check(t, "lease stolen: the receiver took the Lease back", strings.Count(r.logSince(0), "Acquired the Events leader lease") >= 2,
		"%s", r.c.LogTail(20))
}

// TestFaultBackendDown takes the OTLP backend away (its port refuses) for faultFor while the
// collector exports through a persistent sending queue with retries without a deadline, as the
// chart configures it: every Event arrives at the backend once it is back.
func TestFaultBackendDown(t *testing.T) {
	env := Testbed(t)
	sinkPort, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	sinkOut := filepath.Join(env.OutDir, "fault-backend-sink-spans.jsonl")
	_ = os.Remove(sinkOut)
	sink := Config{}
	sink.Set("receivers.otlp.protocols.grpc.endpoint", fmt.Sprintf("127.0.0.1:%d", sinkPort))
	sink.Set("exporters.file.path", sinkOut)
	sink.Set("exporters.file.flush_interval", "100ms")
	sink.SetPipeline("receivers", "otlp")
	sink.SetPipeline("exporters", "file")
	sink.Set("service.telemetry.metrics.level", "none")
	env.StartExtraCollector(t, "fault-backend-sink", sink)
	proxy, err := faultproxy.ListenTCP(fmt.Sprintf("127.0.0.1:%d", sinkPort))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	queueDir := filepath.Join(env.OutDir, "fault-backend-queue")
	if err := os.MkdirAll(queueDir, 0o755); err != nil {
		t.Fatal(err)
	}
	exp := env.Components.otlpExporter()
	r := newEventsRig(t, env, "backend", func(cfg Config, r *faultRig) {
		cfg.Delete("exporters.file")
		cfg.Set("exporters."+exp, map[string]any{
			"endpoint": proxy.Addr(), "tls": map[string]any{"insecure": true},
			"sending_queue":    map[string]any{"enabled": true, "storage": "file_storage/queue", "block_on_overflow": false},
			"retry_on_failure": map[string]any{"enabled": true, "initial_interval": "500ms", "max_interval": "2s", "max_elapsed_time": 0},
		})
		cfg.Set("extensions.file_storage/queue.directory", queueDir)
		cfg.Set("service.extensions", []any{"health_check", "file_storage/queue"})
		cfg.SetPipeline("exporters", exp)
		r.out = sinkOut
	})
	r.stage("OTLP backend down "+faultFor.String()+" (persistent queue, retries without a deadline)", "Exporting failed", 5*time.Second,
		proxy.Refuse, func() {
			if err := proxy.Pass(); err != nil {
				t.Fatalf("listen again: %v", err)
			}
		})
}

// TestFaultRedisStalled freezes Redis (connections open, no answer) for faultFor under the
// audit webhook, k8s_object_link's ID map and the shared diff base, while a writer labels a
// ServiceAccount every 300 ms: the processor goes on from memory and reconciles when Redis
// answers again; every audited write is one span.
func TestFaultRedisStalled(t *testing.T) {
	env := Testbed(t)
	requireAuditReceiver(t, env)
	proxy, err := faultproxy.ListenTCP("127.0.0.1:6379")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	const name = "fault-redis"
	prefix := "e2e-" + name + ":"
	t.Cleanup(func() { deleteRedisPrefix(t, "127.0.0.1:6379", prefix) })
	out := filepath.Join(env.OutDir, name+"-spans.jsonl")
	_ = os.Remove(out)
	healthPort, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	health := fmt.Sprintf("127.0.0.1:%d", healthPort)
	cfg := doorConfig(out, prefix)
	cfg.Set("processors.k8s_object_link.id_map.redis.addresses", []any{proxy.Addr()})
	cfg.Set("processors.k8s_object_link.id_map.redis.timeout", "1s")
	cfg.Set("receivers.k8s_audit.shared_diff_base.redis.addresses", []any{proxy.Addr()})
	cfg.Set("receivers.k8s_audit.shared_diff_base.redis.timeout", "1s")
	cfg.Set("extensions.health_check.http.endpoint", health)
	cfg.Set("extensions.health_check.http.status.enabled", true)
	cfg.Set("extensions.health_check.http.status.path", "/status")
	cfg.Set("service.extensions", []any{"health_check"})
	c := env.StartExtraCollectorWith(t, name, cfg, CollectorOptions{FeatureGates: []string{healthGate}})
	env.Router.SetRoute(ToAll(c.AuditURL))
	t.Cleanup(env.RestoreRoute)
	const processor = "processor:k8s_object_link"

	since := time.Now()
	stopWriter := steadyWriter(t, env, "kubetrail-fault-redis", 300*time.Millisecond)
	time.Sleep(3 * time.Second)
	res := &faultResult{fault: "Redis stalled " + faultFor.String() + " (connections open, no answer)"}
	var statuses []string
	note := func(s string) {
		if s != "" && (len(statuses) == 0 || statuses[len(statuses)-1] != s) {
			statuses = append(statuses, s)
		}
	}
	note(componentStatus(health, processor))
	off := len(readFile(c.LogPath))
	start := time.Now()
	proxy.Freeze()
	res.noticed, res.noticedOK = until(10*time.Second, func() bool {
		st := componentStatus(health, processor)
		note(st)
		return strings.Contains(readFile(c.LogPath)[off:], "Redis ID map unavailable") || (st != "" && st != statusOK)
	})
	for time.Since(start) < faultFor {
		note(componentStatus(health, processor))
		time.Sleep(200 * time.Millisecond)
	}
	if err := proxy.Pass(); err != nil {
		t.Fatal(err)
	}
	res.recovered, res.recoveredOK = until(faultRecovery, func() bool {
		st := componentStatus(health, processor)
		note(st)
		return strings.Contains(readFile(c.LogPath)[off:], "Redis ID map available again") && st == statusOK
	})
	time.Sleep(time.Second)
	stopWriter()
	logged := loggedWrites(t, env.AuditLog(), since, time.Now())
	got := waitAuditSpans(t, logged, out)
	res.tally(slices.Collect(maps.Keys(logged)), got)
	logText := readFile(c.LogPath)[off:]
	res.sees = fmt.Sprintf("log %q; status %s", firstLine(logText, "Redis ID map unavailable"), strings.Join(statuses, "→"))
	Check(t, "Redis stalled: noticed", res.noticedOK, "%s", c.LogTail(20))
	Check(t, "Redis stalled: recovered (reconciled, status OK)", res.recoveredOK, "status %q:\n%s", componentStatus(health, processor), c.LogTail(20))
	checkEachWriteOnce(t, "Redis stalled", logged, got)
	t.Logf("%s: noticed after %s, recovered after %s; %d writes; %s", res.fault, res.noticed.Round(100*time.Millisecond),
		res.recovered.Round(100*time.Millisecond), len(logged), res.sees)
	appendFaultRow(t, env, t.Name(), res)
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// TestFaultKafkaBrokerRestarted restarts the Kafka broker (SIGTERM, down for kafkaDownFor, started
// again on the same port and data directory) between an edge collector (the webhook's events into
// Kafka, kafka-edge.yaml) and a processing collector (kafka receiver and k8s_audit connector,
// kafka-processing.yaml) while a writer labels a ServiceAccount every 300 ms: the edge holds the
// webhook's answer while it retries (the apiserver keeps the batch), the consumer reconnects and
// rejoins its group, and every audited write is one span.
func TestFaultKafkaBrokerRestarted(t *testing.T) {
	env := Testbed(t)
	requireAuditReceiver(t, env)
	requireComponent(t, env, "receivers", "kafka")
	requireComponent(t, env, "exporters", "kafka")
	requireComponent(t, env, "connectors", "k8s_audit")
	const kafkaDownFor = 5 * time.Second
	const topic, group = "kube-audit-fault", "kubetrail-fault"
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(env.OutDir, "kafka-fault-data")
	_ = os.RemoveAll(dataDir)
	logPath := filepath.Join(env.OutDir, "kafka-fault.log")
	bootstrap := fmt.Sprintf("127.0.0.1:%d", port)
	var broker *Process
	startBroker := func() {
		t.Helper()
		p, err := StartProcess("kafka-fault", logPath, env.pidDir, nil, env.KafkaBin,
			"-ports", fmt.Sprint(port), "-data-dir", dataDir, "-topic", topic+":2", "-log-level", "warn")
		if err != nil {
			t.Fatal(err)
		}
		if err := WaitTCP(bootstrap, p, 30*time.Second); err != nil {
			t.Fatalf("kafka: %v\n%s", err, p.LogTail(20))
		}
		broker = p
	}
	startBroker()
	t.Cleanup(func() { _ = broker.Stop(10 * time.Second) })

	out := filepath.Join(env.OutDir, "fault-kafka-spans.jsonl")
	_ = os.Remove(out)
	edge := env.StartExtraCollector(t, "fault-kafka-edge", kafkaEdgeConfig(bootstrap, topic, ClusterName))
	proc := env.StartExtraCollector(t, "fault-kafka-processing", kafkaProcessingConfig(bootstrap, topic, group, out))
	env.Router.SetRoute(ToAll(edge.AuditURL))
	t.Cleanup(env.RestoreRoute)

	since := time.Now()
	stopWriter := steadyWriter(t, env, "kubetrail-fault-kafka", 300*time.Millisecond)
	time.Sleep(3 * time.Second)
	res := &faultResult{fault: "Kafka broker restarted (down " + kafkaDownFor.String() + ", same data directory)"}
	edgeOff, procOff := len(readFile(edge.LogPath)), len(readFile(proc.LogPath))
	start := time.Now()
	if err := broker.Stop(10 * time.Second); err != nil {
		t.Logf("kafka stop: %v", err)
	}
	const edgeSignal = "unable to open connection to broker"
	res.noticed, res.noticedOK = until(kafkaDownFor, func() bool {
		return strings.Contains(readFile(edge.LogPath)[edgeOff:], edgeSignal)
	})
	if d := kafkaDownFor - time.Since(start); d > 0 {
		time.Sleep(d)
	}
	restartedAt := time.Now()
	startBroker()
	due := loggedWrites(t, env.AuditLog(), since, restartedAt)
	res.recovered, res.recoveredOK = until(faultRecovery, func() bool {
		got := auditSpanIDsIn(t, out)
		for id := range due {
			if len(got[id]) == 0 {
				return false
			}
		}
		return true
	})
	time.Sleep(2 * time.Second)
	stopWriter()
	logged := loggedWrites(t, env.AuditLog(), since, time.Now())
	got := waitAuditSpans(t, logged, out)
	res.tally(slices.Collect(maps.Keys(logged)), got)
	procLog := readFile(proc.LogPath)[procOff:]
	res.sees = fmt.Sprintf("edge log %q; processing log %q", firstLine(readFile(edge.LogPath)[edgeOff:], edgeSignal), firstLine(procLog, "unable to open connection to broker"))
	Check(t, "Kafka broker restarted: the edge noticed", res.noticedOK, "%s", edge.LogTail(20))
	Check(t, "Kafka broker restarted: every write before the restart is a span again", res.recoveredOK, "%d writes due:\n%s", len(due), proc.LogTail(20))
	checkEachWriteOnce(t, "Kafka broker restarted", logged, got)
	t.Logf("%s: noticed after %s, recovered after %s; %d writes; %s", res.fault, res.noticed.Round(100*time.Millisecond),
		res.recovered.Round(100*time.Millisecond), len(logged), res.sees)
	appendFaultRow(t, env, t.Name(), res)
}
