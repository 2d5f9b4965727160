//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The collector's own outages, staged on the real control plane (issue 22, item 7). The testbed's
// apiserver retries a webhook batch for 8–10 s (--audit-webhook-initial-backoff 1s, see
// distribution/apiserver-flags.md); every check compares the spans with the apiserver's own audit
// log: each audited write of the scenario exactly one span.

// outageDownFor is longer than the testbed webhook's retries, so the webhook alone loses batches.
const outageDownFor = 20 * time.Second

// TestAuditOutagePastTheWebhookRetriesIsCoveredByTheLogFile stops a collector for outageDownFor
// in the middle of the deployment scenario and starts it again. The apiserver gives up on the
// batches of the first seconds of the outage (its audit error counter says so); the collector
// also tails the apiserver's audit log from a file_storage checkpoint, so the same events come in
// through the file after the restart, and the processor's duplicate marks in Redis make the two
// doors one span per write.
func TestAuditOutagePastTheWebhookRetriesIsCoveredByTheLogFile(t *testing.T) {
	env := Testbed(t)
	requireAuditReceiver(t, env)
	if !Check(t, "the collector has file_storage, the file exporter and k8s_object_link",
		env.Components.Has("extensions", "file_storage") && env.Components.Has("exporters", "file") && env.Components.Has("processors", "k8s_object_link"),
		"%v", env.Components) {
		t.FailNow()
	}
	const name = "outage"
	prefix := "e2e-" + name + ":"
	t.Cleanup(func() { deleteRedisPrefix(t, "127.0.0.1:6379", prefix) })
	dir := filepath.Join(env.OutDir, "storage-"+name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(env.OutDir, name+"-spans.jsonl")
	_ = os.Remove(out)
	cfg := doorConfig(out, prefix)
	cfg.Set("receivers.k8s_audit.files", []any{env.AuditLog()})
	cfg.Set("receivers.k8s_audit.storage", "file_storage/"+name)
	cfg.Set("extensions.file_storage/"+name+".directory", dir)
	cfg.Set("service.extensions", []any{"file_storage/" + name})
	c := env.StartExtraCollector(t, name, cfg)
	env.Router.SetRoute(ToAll(c.AuditURL))
	t.Cleanup(env.RestoreRoute)

	dropsBefore := webhookAuditErrors(t, env)
	done := make(chan *ScenarioRun, 1)
	go func() {
		run, _ := env.RunScenario("deployment")
		done <- run
	}()
	time.Sleep(time.Second)
	stopAt := time.Now()
	if err := c.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	time.Sleep(outageDownFor)
	if err := c.start(); err != nil {
		t.Fatalf("start again: %v", err)
	}
	run := <-done
	if run.Err != nil {
		t.Fatalf("scenario: %v", run.Err)
	}
	Check(t, "outage: the collector went down while the scenario ran", stopAt.Before(run.End),
		"down at %s, scenario %s – %s", stopAt.Format(time.StampMilli), run.Start.Format(time.StampMilli), run.End.Format(time.StampMilli))

	logged := loggedWrites(t, env.AuditLog(), run.Start, run.End)
	got := waitAuditSpans(t, logged, out)
	// Reading the counter after the spans settled: the retries of the outage's batches are over.
	dropped := webhookAuditErrors(t, env) - dropsBefore
	t.Logf("the apiserver gave up on %d audit events during the outage", dropped)
	Check(t, "outage: it outlasted the webhook's retries (the apiserver dropped audit events)", dropped > 0,
		"apiserver_audit_error_total{plugin=webhook} grew by %d", dropped)
	checkEachWriteOnce(t, "outage of "+outageDownFor.String()+", webhook and log file", logged, got)
	Check(t, "outage: the file input resumed from its checkpoint", c.LogContains("Resuming the audit log from its checkpoint"), "log:\n%s", c.LogTail(30))
}

// TestAuditRollingRestartOfTwoReplicas restarts two collectors one after the other while the
// deployment scenario runs and a steady writer labels a ServiceAccount every 300 ms, both behind
// one address (the router deals the apiserver's posts to them in turn; a post to the one that is
// down fails and the apiserver retries it, reaching the other). The writer keeps batches coming
// across both restarts: the scenario alone can fit in one batch. Webhook only: each restart is
// far within the retries. They share the Redis ID map and the diff base: every write's diff
// agrees with what one collector gives.
func TestAuditRollingRestartOfTwoReplicas(t *testing.T) {
	env := Testbed(t)
	requireAuditReceiver(t, env)
	a, b, outA, outB := startTwoReplicas(t, env, "rolling")
	env.Router.SetRoute(RoundRobin(a.AuditURL, b.AuditURL))
	t.Cleanup(env.RestoreRoute)

	since := time.Now()
	stopWriter := steadyWriter(t, env, "kubetrail-rolling-probe", 300*time.Millisecond)
	done := make(chan *ScenarioRun, 1)
	go func() {
		run, _ := env.RunScenario("deployment")
		done <- run
	}()
	for _, c := range []*Collector{a, b} {
		time.Sleep(time.Second)
		if err := c.Restart(); err != nil {
			t.Fatalf("restart %s: %v", c.Name, err)
		}
	}
	run := <-done
	if run.Err != nil {
		t.Fatalf("scenario: %v", run.Err)
	}
	time.Sleep(2 * time.Second) // posts after the second restart, to both replicas
	stopWriter()
	auditLog := env.AuditLog()
	logged := loggedWrites(t, auditLog, since, time.Now())
	got := waitAuditSpans(t, logged, outA, outB)
	checkEachWriteOnce(t, "rolling restart of two replicas", logged, got)
	checkDiffsAsOneCollector(t, "rolling restart of two replicas", auditLog, since, outA, outB)
	Check(t, "rolling restart: both replicas took posts", env.Router.Delivered(a.AuditURL) > 0 && env.Router.Delivered(b.AuditURL) > 0,
		"delivered a=%d b=%d", env.Router.Delivered(a.AuditURL), env.Router.Delivered(b.AuditURL))
}

// steadyWriter creates a ServiceAccount and labels it every interval until the returned function
// is called, which deletes it.
func steadyWriter(t *testing.T, env *Env, name string, interval time.Duration) (stop func()) {
	t.Helper()
	if out, err := env.RunKubectl("create", "serviceaccount", name, "-n", "default"); err != nil {
		t.Fatalf("create serviceaccount %s: %v\n%s", name, err, out)
	}
	quit, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		for i := 1; ; i++ {
			select {
			case <-quit:
				return
			case <-time.After(interval):
			}
			if out, err := env.RunKubectl("label", "serviceaccount", name, "-n", "default", "--overwrite", fmt.Sprintf("step=%d", i)); err != nil {
				t.Errorf("label serviceaccount %s: %v\n%s", name, err, out)
				return
			}
		}
	}()
	return func() {
		close(quit)
		<-finished
		if out, err := env.RunKubectl("delete", "serviceaccount", name, "-n", "default"); err != nil {
			t.Errorf("delete serviceaccount %s: %v\n%s", name, err, out)
		}
	}
}

// startTwoReplicas starts two collectors of doorConfig on one Redis key prefix of their own,
// exporting to the files outA and outB (emptied first), as two replicas behind one address.
func startTwoReplicas(t *testing.T, env *Env, name string) (a, b *Collector, outA, outB string) {
	t.Helper()
	prefix := "e2e-" + name + ":"
	t.Cleanup(func() { deleteRedisPrefix(t, "127.0.0.1:6379", prefix) })
	outA, outB = filepath.Join(env.OutDir, name+"-a-spans.jsonl"), filepath.Join(env.OutDir, name+"-b-spans.jsonl")
	_, _ = os.Remove(outA), os.Remove(outB)
	a = env.StartExtraCollector(t, name+"-a", doorConfig(outA, prefix))
	b = env.StartExtraCollector(t, name+"-b", doorConfig(outB, prefix))
	return a, b, outA, outB
}

// doorConfig is a collector with the k8s_audit receiver (webhook on, its diff base shared), and
// k8s_object_link on the shared Redis under prefix (its duplicate marks make every door and
// replica one span per event),
// exporting to the file out.
func doorConfig(out, prefix string) Config {
	cfg := Config{}
	cfg.Set("receivers.k8s_audit.cluster", ClusterName)
	cfg.Set("processors.k8s_object_link.id_map.backend", "redis")
	cfg.Set("processors.k8s_object_link.id_map.redis.addresses", []any{"127.0.0.1:6379"})
	cfg.Set("processors.k8s_object_link.id_map.redis.key_prefix", prefix)
	cfg.Set("receivers.k8s_audit.shared_diff_base.redis.addresses", []any{"127.0.0.1:6379"})
	cfg.Set("receivers.k8s_audit.shared_diff_base.redis.key_prefix", prefix)
	cfg.Set("exporters.file.path", out)
	cfg.Set("exporters.file.flush_interval", "100ms")
	cfg.Set("exporters.file.append", true) // a restart must not truncate what the first run wrote
	cfg.SetPipeline("receivers", "k8s_audit")
	cfg.SetPipeline("processors", "k8s_object_link")
	cfg.SetPipeline("exporters", "file")
	cfg.Set("service.telemetry.metrics.level", "none")
	return cfg
}

// webhookAuditErrors reads the apiserver's count of audit events its webhook backend gave up on.
func webhookAuditErrors(t *testing.T, env *Env) int {
	t.Helper()
	metrics, err := env.RunKubectl("get", "--raw", "/metrics")
	if err != nil {
		t.Fatalf("apiserver metrics: %v\n%s", err, truncate(metrics, 500))
	}
	total := 0
	sc := bufio.NewScanner(strings.NewReader(metrics))
	sc.Buffer(make([]byte, 0, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_audit_error_total{") || !strings.Contains(line, `plugin="webhook"`) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			t.Fatalf("apiserver metrics: %q: %v", line, err)
		}
		total += int(v)
	}
	return total
}
