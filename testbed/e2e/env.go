//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// ClusterName is the k8s.cluster.name of everything the testbed emits.
const ClusterName = "testbed"

// Env is the running testbed shared by every test of the package: one control plane, one Jaeger,
// one collector, every scenario already run once.
type Env struct {
	Root     string // repository root
	OutDir   string // testbed/.out/e2e: configs, logs, summary
	StateDir string // control plane state (KUBETRAIL_STATE)

	Kubeconfig string   // admin kubeconfig of the testbed
	Kubectl    string   // kubectl binary matching the control plane
	APIServer  string   // the apiserver's URL (https://127.0.0.1:port)
	CAFile     string   // the testbed CA, which signed the apiserver's certificate
	K8sBin     string   // the directory of the control-plane binaries
	Etcd       string   // etcd's client URL
	ClusterEnv []string // the variables of <state>/env (KUBECONFIG, KUBECTL, …), for scripts

	CollectorBin string
	JaegerBin    string
	// KafkaBin is testbed/cmd/kafka, a Kafka broker on loopback (testbed/hack/e2e.sh builds it
	// into the out dir); tests start their own.
	KafkaBin   string
	Components Components // what CollectorBin was built with

	Jaeger    *Jaeger
	Router    *AuditRouter // the apiserver's webhook target
	Collector *Collector   // the main collector, fed by Router
	// TracingAddr is the main collector's OTLP gRPC receiver, where the apiserver exports its
	// request spans (KEP-647); "" when the collector has no otlp receiver.
	TracingAddr string

	// Runs holds the first run of each scenario, made by TestMain.
	Runs map[string]*ScenarioRun

	scenarios []string // the scenarios TestMain runs, in order

	pidDir    string
	mu        sync.Mutex
	extra     []*Collector
	timings   []timing
	setupDone time.Time

	teardownOnce sync.Once
}

type timing struct {
	what string
	d    time.Duration
}

// ScenarioRun is one run of a scenario script.
type ScenarioRun struct {
	Name       string
	Start, End time.Time
	Err        error
	LogPath    string
	// Traceparent is the trace context the run's script was given (DEMO_TRACEPARENT: deployment.sh
	// puts it on its Deployment), a new one per run as a CI step's would be.
	Traceparent string
}

// Duration of the script.
func (r *ScenarioRun) Duration() time.Duration { return r.End.Sub(r.Start) }

// Window is the time range in which the run's spans start (with a margin for clock reads).
func (r *ScenarioRun) Window() Window {
	return Window{Start: r.Start.Add(-time.Second), End: r.End.Add(2 * time.Second)}
}

var (
	envMu   sync.Mutex
	current *Env
)

// Testbed returns the environment TestMain set up; the test fails now if there is none.
func Testbed(t testing.TB) *Env {
	t.Helper()
	envMu.Lock()
	defer envMu.Unlock()
	if current == nil {
		t.Fatal("no testbed: TestMain did not set one up")
	}
	return current
}

func findRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "testbed")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repository root (go.mod next to testbed/) not found above the working directory")
		}
		dir = parent
	}
}

func (e *Env) step(what string, f func() error) error {
	t0 := time.Now()
	log.Printf("e2e: %s", what)
	err := f()
	e.mu.Lock()
	e.timings = append(e.timings, timing{what, time.Since(t0)})
	e.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// setup brings the whole testbed up. On error, whatever started is left for teardown.
func setup() (*Env, error) {
	root, err := findRoot()
	if err != nil {
		return nil, err
	}
	names, err := scenarioList(root)
	if err != nil {
		return nil, err
	}
	cache := os.Getenv("KUBETRAIL_CACHE")
	if cache == "" {
		cache = filepath.Join(os.Getenv("HOME"), ".cache", "kubetrail")
	}
	e := &Env{
		Root:         root,
		OutDir:       filepath.Join(root, "testbed", ".out", "e2e"),
		CollectorBin: envOr("KUBETRAIL_COLLECTOR", filepath.Join(root, "bin", "otelcol-kubetrail")),
		JaegerBin:    envOr("KUBETRAIL_JAEGER", filepath.Join(cache, "bin", "jaeger-"+envOr("JAEGER_VERSION", "v1.76.0"), "jaeger")),
		Runs:         map[string]*ScenarioRun{},
		scenarios:    names,
	}
	e.StateDir = filepath.Join(e.OutDir, "state")
	e.KafkaBin = envOr("KUBETRAIL_KAFKA", filepath.Join(e.OutDir, "kafka"))
	e.pidDir = filepath.Join(e.OutDir, "pids")
	if err := os.MkdirAll(e.pidDir, 0o755); err != nil {
		return nil, err
	}
	for _, b := range []struct{ what, path, fix string }{
		{"collector", e.CollectorBin, "make build"},
		{"jaeger", e.JaegerBin, "testbed/hack/build-binaries.sh jaeger"},
	} {
		if _, err := os.Stat(b.path); err != nil {
			return e, fmt.Errorf("missing %s binary %s (build it with: %s)", b.what, b.path, b.fix)
		}
	}
	if err := e.step("read the collector's components", func() (err error) {
		e.Components, err = readComponents(e.CollectorBin)
		return err
	}); err != nil {
		return e, err
	}
	log.Printf("e2e: collector receivers=%v processors=%v exporters=%v", e.Components["receivers"], e.Components["processors"], e.Components["exporters"])
	if e.Router, err = startAuditRouter(); err != nil {
		return e, err
	}
	// The port stays held while the cluster comes up: cluster-up.sh picks its ports in the same
	// range by its own free_port, which takes a port nobody listens on (a CI run lost the
	// collector's start to etcd or kwok taking this one).
	var tracingHold net.Listener
	if e.Components.Has("receivers", "otlp") {
		port, err := FreePort()
		if err != nil {
			return e, err
		}
		e.TracingAddr = fmt.Sprintf("127.0.0.1:%d", port)
		if tracingHold, err = net.Listen("tcp", e.TracingAddr); err != nil {
			return e, err
		}
	}
	err = e.step("cluster up", e.clusterUp)
	if tracingHold != nil {
		_ = tracingHold.Close()
	}
	if err != nil {
		return e, err
	}
	if err := e.step("start jaeger", func() (err error) {
		e.Jaeger, err = startJaeger(e.JaegerBin, e.OutDir, e.pidDir)
		return err
	}); err != nil {
		return e, err
	}
	if err := e.step("start the collector", func() (err error) {
		cfg := e.CollectorConfig()
		if e.TracingAddr != "" {
			// The apiserver's request spans go through k8s_object_link, which joins them with the
			// audit spans; only the main collector listens there (extra collectors start from
			// CollectorConfig without it).
			cfg.Set("receivers.otlp.protocols.grpc.endpoint", e.TracingAddr)
			if recv := cfg.Pipeline("receivers"); !slices.Contains(recv, "otlp") {
				cfg.SetPipeline("receivers", append(recv, "otlp")...)
			}
			cfg.Set("processors.k8s_object_link.apiserver_join.enabled", true)
			// The kubelet's spans (replayed: kubelet_test.go) name their Pod without a cluster.
			cfg.Set("processors.k8s_object_link.doors.identity.cluster", ClusterName)
		}
		e.Collector, err = e.StartCollector("main", cfg)
		return err
	}); err != nil {
		return e, err
	}
	if e.Collector.AuditURL != "" {
		e.Router.SetRoute(ToAll(e.Collector.AuditURL))
	}
	if e.TracingAddr != "" {
		// The apiserver's span exporter reconnects with a growing backoff after failing while
		// the collector was not yet listening; the scenarios' request spans must not depend on
		// when it next tries, so wait until its spans flow to Jaeger through the collector.
		if err := e.step("wait for the apiserver's spans", e.waitAPIServerSpans); err != nil {
			return e, err
		}
	}
	e.setupDone = time.Now()
	for _, name := range e.scenarios {
		run, err := e.RunScenario(name)
		e.Runs[name] = run
		if err != nil {
			log.Printf("e2e: scenario %s failed: %v (log %s)", name, err, run.LogPath)
		}
	}
	return e, nil
}

// Scenarios lists the scenarios of the testbed: every testbed/scenarios/*.sh (lib.bash is their
// shared library, not a scenario), by file name. Scenarios use distinct object names and clean up
// after themselves, so their order does not matter.
func Scenarios(root string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(root, "testbed", "scenarios", "*.sh"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no scenario in %s", filepath.Join(root, "testbed", "scenarios"))
	}
	names := make([]string, 0, len(files))
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".sh"))
	}
	sort.Strings(names)
	return names, nil
}

// scenarioList is the scenarios TestMain runs: all of them, or the subset named in
// KUBETRAIL_E2E_SCENARIOS (comma-separated), each of which must exist.
func scenarioList(root string) ([]string, error) {
	all, err := Scenarios(root)
	if err != nil {
		return nil, err
	}
	s := os.Getenv("KUBETRAIL_E2E_SCENARIOS")
	if s == "" {
		return all, nil
	}
	var names []string
	for _, name := range strings.Split(s, ",") {
		if !slices.Contains(all, name) {
			return nil, fmt.Errorf("KUBETRAIL_E2E_SCENARIOS names %q, which is not one of %v", name, all)
		}
		names = append(names, name)
	}
	return names, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func (e *Env) clusterUp() error {
	cmd := exec.Command(filepath.Join(e.Root, "testbed", "hack", "cluster-up.sh"))
	cmd.Env = append(os.Environ(),
		"KUBETRAIL_STATE="+e.StateDir,
		"AUDIT_WEBHOOK_URL="+e.Router.URL,
		"APISERVER_TRACING_ENDPOINT="+e.TracingAddr,
		// Secrets at RequestResponse, so the run proves no secret value reaches Jaeger.
		"AUDIT_POLICY="+filepath.Join(e.Root, "testbed", "policy", "audit-policy-secrets.yaml"))
	logPath := filepath.Join(e.OutDir, "cluster-up.log")
	out, err := cmd.CombinedOutput()
	_ = os.WriteFile(logPath, out, 0o644)
	if err != nil {
		return fmt.Errorf("%w:\n%s", err, out)
	}
	vars, err := readEnvFile(filepath.Join(e.StateDir, "env"))
	if err != nil {
		return err
	}
	e.ClusterEnv = vars
	for _, kv := range vars {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "KUBECONFIG":
			e.Kubeconfig = v
		case "KUBECTL":
			e.Kubectl = v
		case "KUBETRAIL_APISERVER":
			e.APIServer = v
		case "KUBETRAIL_CA":
			e.CAFile = v
		case "KUBETRAIL_K8S_BIN":
			e.K8sBin = v
		case "KUBETRAIL_ETCD":
			e.Etcd = v
		}
	}
	return nil
}

func readEnvFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "export "); ok && strings.Contains(rest, "=") {
			out = append(out, rest)
		}
	}
	return out, sc.Err()
}

// RunScenario runs testbed/scenarios/<name>.sh against the testbed (scenarios are idempotent, so
// a test may rerun one, e.g. around a collector restart) and returns its run; env are more
// variables for the script (deployment.sh's SCENARIO_KEEP=1).
func (e *Env) RunScenario(name string, env ...string) (*ScenarioRun, error) {
	run := &ScenarioRun{Name: name, LogPath: filepath.Join(e.OutDir, "scenario-"+name+".log")}
	logf, err := os.OpenFile(run.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return run, err
	}
	defer logf.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(e.Root, "testbed", "scenarios", name+".sh"))
	run.Traceparent = newTraceparent()
	for _, v := range env {
		if tp, ok := strings.CutPrefix(v, "DEMO_TRACEPARENT="); ok {
			run.Traceparent = tp
		}
	}
	cmd.Env = append(append(os.Environ(), e.ClusterEnv...), append([]string{"DEMO_TRACEPARENT=" + run.Traceparent}, env...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	run.Start = time.Now()
	err = cmd.Run()
	run.End = time.Now()
	e.mu.Lock()
	e.timings = append(e.timings, timing{"scenario " + name, run.Duration()})
	e.mu.Unlock()
	if err != nil {
		run.Err = fmt.Errorf("scenario %s: %w\n%s", name, err, tailFile(run.LogPath, 15))
	}
	log.Printf("e2e: scenario %s ran in %s", name, run.Duration().Round(time.Millisecond))
	return run, run.Err
}

// RunsSpan returns the start of the first and the end of the last scenario run TestMain made
// (zero times when none ran).
func (e *Env) RunsSpan() (start, end time.Time) {
	for _, r := range e.Runs {
		if start.IsZero() || r.Start.Before(start) {
			start = r.Start
		}
		if r.End.After(end) {
			end = r.End
		}
	}
	return start, end
}

// RunsWrites is RunsSpan with the writes the apiserver's audit log holds in that span (see
// loggedWrites); t fails now when no scenario ran.
func (e *Env) RunsWrites(t *testing.T) (start, end time.Time, logged map[string]string) {
	t.Helper()
	if start, end = e.RunsSpan(); start.IsZero() {
		t.Fatal("no scenario ran")
	}
	return start, end, loggedWrites(t, e.AuditLog(), start, end)
}

// Run returns the run TestMain made of scenario name; the test fails now if it did not run or
// its script failed.
func (e *Env) Run(t testing.TB, name string) *ScenarioRun {
	t.Helper()
	run, ok := e.Runs[name]
	if !ok {
		t.Fatalf("scenario %s was not run (KUBETRAIL_E2E_SCENARIOS=%q)", name, os.Getenv("KUBETRAIL_E2E_SCENARIOS"))
	}
	if run.Err != nil {
		t.Fatalf("scenario %s failed: %v", name, run.Err)
	}
	return run
}

// Spans returns every span of every trace with a span in the run's window, once ingestion has
// settled: the webhook batches (1 s), the collector's batch processor and any processor holding
// spans for owners all delay export, so it polls until two reads a second apart agree.
func (e *Env) Spans(t testing.TB, run *ScenarioRun) Spans {
	t.Helper()
	return e.SpansIn(t, run.Window())
}

// SpansIn is Spans for an arbitrary window.
func (e *Env) SpansIn(t testing.TB, w Window) Spans {
	t.Helper()
	if wait := time.Until(w.End.Add(3 * time.Second)); wait > 0 {
		time.Sleep(wait)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	prev := -1
	for {
		spans, err := e.Jaeger.Fetch(ctx, w, nil)
		if err != nil {
			t.Fatalf("fetch spans from jaeger: %v", err)
		}
		// Nothing at all may be the truth (a broken pipeline), but only once the slowest path
		// (webhook batch, processor owner wait, batch, Jaeger) has had 15 s.
		if len(spans) == prev && (prev > 0 || time.Since(w.End) > 15*time.Second) {
			return spans
		}
		prev = len(spans)
		select {
		case <-ctx.Done():
			t.Logf("spans did not settle within 90 s; using the last %d", len(spans))
			return spans
		case <-time.After(time.Second):
		}
	}
}

// WaitSpans polls the run's spans until cond returns nil (then returns them) or timeout passes
// (then the test fails with cond's last error and the last spans are returned).
func (e *Env) WaitSpans(t testing.TB, w Window, timeout time.Duration, cond func(Spans) error) Spans {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		spans, err := e.Jaeger.Fetch(ctx, w, nil)
		cancel()
		if err == nil {
			if err = cond(spans); err == nil {
				return spans
			}
		}
		if time.Now().After(deadline) {
			t.Errorf("after %s: %v", timeout, err)
			return spans
		}
		time.Sleep(time.Second)
	}
}

// StartExtraCollector starts another collector (see StartCollector) and stops it when the test
// ends. The router does not send it anything until the test calls Router.SetRoute; the test
// should restore the route (to ToAll(env.Collector.AuditURL)) in a t.Cleanup.
func (e *Env) StartExtraCollector(t testing.TB, name string, cfg Config) *Collector {
	t.Helper()
	return e.StartExtraCollectorWith(t, name, cfg, CollectorOptions{})
}

// StartExtraCollectorWith is StartExtraCollector with options.
func (e *Env) StartExtraCollectorWith(t testing.TB, name string, cfg Config, opts CollectorOptions) *Collector {
	t.Helper()
	c, err := e.StartCollectorWith(name, cfg, opts)
	if err != nil {
		t.Fatalf("start collector %s: %v", name, err)
	}
	e.mu.Lock()
	e.extra = append(e.extra, c)
	e.mu.Unlock()
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Logf("stop collector %s: %v", name, err)
		}
	})
	return c
}

// RestoreRoute sends the audit stream to the main collector only again.
func (e *Env) RestoreRoute() {
	if e.Collector != nil && e.Collector.AuditURL != "" {
		e.Router.SetRoute(ToAll(e.Collector.AuditURL))
	}
}

// AuditLog is the apiserver's audit log file (--audit-log-path).
func (e *Env) AuditLog() string { return filepath.Join(e.StateDir, "audit.log") }

// RunKubectl runs kubectl against the testbed and returns its combined output.
func (e *Env) RunKubectl(args ...string) (string, error) {
	cmd := exec.Command(e.Kubectl, args...)
	cmd.Env = append(os.Environ(), e.ClusterEnv...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// teardown stops everything the harness started; the first call does the work (TestMain and the
// signal handler may both call it).
func (e *Env) teardown() { e.teardownOnce.Do(e.stopAll) }

func (e *Env) stopAll() {
	e.mu.Lock()
	extra := e.extra
	e.mu.Unlock()
	for _, c := range extra {
		_ = c.Stop()
	}
	if e.Collector != nil {
		if err := e.Collector.Stop(); err != nil {
			log.Printf("e2e: %v", err)
		}
	}
	if e.Jaeger != nil {
		if err := e.Jaeger.Stop(); err != nil {
			log.Printf("e2e: %v", err)
		}
	}
	if e.Router != nil {
		e.Router.close()
	}
	if e.StateDir != "" {
		cmd := exec.Command(filepath.Join(e.Root, "testbed", "hack", "cluster-down.sh"))
		cmd.Env = append(os.Environ(), "KUBETRAIL_STATE="+e.StateDir)
		if out, err := cmd.CombinedOutput(); err != nil {
			log.Printf("e2e: cluster-down: %v\n%s", err, out)
		}
	}
}

// ---- checks and the summary -----------------------------------------------------------------

type checkResult struct {
	name string
	ok   bool
	msg  string
}

var (
	checksMu sync.Mutex
	checks   []checkResult
)

// Check records a named check for the summary and fails the test (without stopping it) when ok
// is false. It returns ok.
func Check(t testing.TB, name string, ok bool, format string, args ...any) bool {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	checksMu.Lock()
	checks = append(checks, checkResult{t.Name() + ": " + name, ok, msg})
	checksMu.Unlock()
	if !ok {
		t.Errorf("check %q failed: %s", name, msg)
	}
	return ok
}

func (e *Env) summary(total time.Duration, testsFailed bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n==== kubetrail e2e summary ====\n")
	fmt.Fprintf(&b, "collector: %s  receivers=%v processors=%v\n", e.CollectorBin, e.Components["receivers"], e.Components["processors"])
	fmt.Fprintf(&b, "timings:")
	for _, tm := range e.timings {
		fmt.Fprintf(&b, "  %s %.1fs;", tm.what, tm.d.Seconds())
	}
	fmt.Fprintf(&b, "  total %.1fs\n", total.Seconds())
	fmt.Fprintf(&b, "scenarios:")
	for _, name := range e.scenarios {
		run := e.Runs[name]
		status := "ok"
		if run == nil {
			status = "not run"
		} else if run.Err != nil {
			status = "FAILED"
		}
		d := 0.0
		if run != nil {
			d = run.Duration().Seconds()
		}
		fmt.Fprintf(&b, "  %s %s (%.1fs);", name, status, d)
	}
	b.WriteString("\n")
	if e.Jaeger != nil && !e.setupDone.IsZero() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		spans, err := e.Jaeger.Fetch(ctx, Window{Start: e.setupDone.Add(-time.Minute), End: time.Now()}, nil)
		cancel()
		if err != nil {
			fmt.Fprintf(&b, "spans: %v\n", err)
		} else {
			fmt.Fprintf(&b, "spans: %d in %d traces; by type: %s\n", len(spans), len(spans.Traces()), formatCounts(spans.CountBy((*Span).Type)))
			fmt.Fprintf(&b, "by service: %s\n", formatCounts(spans.CountBy(func(s *Span) string { return s.Service })))
		}
	}
	if e.Collector != nil {
		warn, errs := logLevels(e.Collector.LogPath)
		fmt.Fprintf(&b, "collector log: %d warn, %d error lines (%s)\n", warn, errs, e.Collector.LogPath)
	}
	checksMu.Lock()
	defer checksMu.Unlock()
	passed, failed := 0, 0
	for _, c := range checks {
		if c.ok {
			passed++
		} else {
			failed++
		}
	}
	fmt.Fprintf(&b, "checks: %d passed, %d failed\n", passed, failed)
	for _, c := range checks {
		if !c.ok {
			fmt.Fprintf(&b, "  FAIL %s: %s\n", c.name, truncate(c.msg, 200))
		}
	}
	result := "PASS"
	if failed > 0 || testsFailed {
		result = "FAIL"
	}
	fmt.Fprintf(&b, "result: %s\n", result)
	return b.String()
}

func formatCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		name := k
		if name == "" {
			name = "(none)"
		}
		parts[i] = fmt.Sprintf("%s=%d", name, m[k])
	}
	return strings.Join(parts, " ")
}

func truncate(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// logLevels counts warn and error lines of a collector log (zap's console encoding: the level is
// the second tab-separated field).
func logLevels(path string) (warn, errs int) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0
	}
	for line := range strings.Lines(string(b)) {
		f := strings.SplitN(line, "\t", 3)
		if len(f) < 2 {
			continue
		}
		switch f[1] {
		case "warn":
			warn++
		case "error":
			errs++
		}
	}
	return warn, errs
}

// waitAPIServerSpans waits until Jaeger holds an apiserver trace that began after the collector
// started, that is one the apiserver exported to the running collector.
func (e *Env) waitAPIServerSpans() error {
	since := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for {
		ids, err := e.Jaeger.TraceIDs(ctx, apiserverService, since, time.Now().Add(time.Minute), nil)
		if err == nil && len(ids) > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no apiserver trace reached Jaeger within 90 s of the collector's start (last error: %v)", err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// newTraceparent is a fresh sampled W3C traceparent.
func newTraceparent() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return "00-" + hex.EncodeToString(b[:16]) + "-" + hex.EncodeToString(b[16:]) + "-01"
}
