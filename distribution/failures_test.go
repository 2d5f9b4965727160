//go:build dist

package distribution_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWrongRedisPasswordFailsStart: a password Redis refuses is a configuration error the
// collector reports at start, naming Redis's answer, instead of running with every replica on
// its own memory (trees quietly split).
func TestWrongRedisPasswordFailsStart(t *testing.T) {
	requireBinary(t)
	redisPort := freePort(t)
	redis := exec.Command("redis-server", "--port", fmt.Sprint(redisPort), "--bind", "127.0.0.1",
		"--requirepass", "the-right-one", "--save", "", "--appendonly", "no")
	if err := redis.Start(); err != nil {
		t.Fatalf("starting redis-server (make redis installs it): %v", err)
	}
	t.Cleanup(func() { _ = redis.Process.Kill(); _ = redis.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", redisPort))
		if err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server did not listen: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	config := func(password string) string {
		path := filepath.Join(t.TempDir(), "config.yaml")
		body := fmt.Sprintf(`receivers:
  k8s_audit:
    endpoint: 127.0.0.1:%d
    cluster: test
processors:
  k8s_object_link:
    id_map:
      backend: redis
      redis: {addresses: ["127.0.0.1:%d"], password: %q}
exporters:
  debug:
service:
  telemetry: {metrics: {level: none}}
  pipelines:
    traces: {receivers: [k8s_audit], processors: [k8s_object_link], exporters: [debug]}
`, freePort(t), redisPort, password)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	run := func(password string, limit time.Duration) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		cmd := exec.CommandContext(ctx, binary, "--config", config(password))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		if ctx.Err() != nil {
			return out.String(), ctx.Err()
		}
		return out.String(), err
	}

	out, err := run("a-wrong-one", 20*time.Second)
	if err == nil || err == context.DeadlineExceeded {
		t.Fatalf("with a wrong password the collector must fail to start, got %v\n%s", err, out)
	}
	if !strings.Contains(out, "WRONGPASS") {
		t.Fatalf("the start error must carry Redis's answer:\n%s", out)
	}
	// The right password starts: the collector is still running when the deadline stops it.
	if out, err := run("the-right-one", 4*time.Second); err != context.DeadlineExceeded {
		t.Fatalf("with the right password the collector must run, it ended with %v\n%s", err, out)
	}
}

// TestOneBadItemThroughTheRealBinary: a batch with items that are not valid events is answered
// 200; its good items are exported, the bad ones are not.
func TestOneBadItemThroughTheRealBinary(t *testing.T) {
	requireBinary(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "spans.jsonl")
	auditPort, healthPort := freePort(t), freePort(t)
	startCollector(t, fmt.Sprintf(`extensions:
  health_check: {endpoint: 127.0.0.1:%d}
receivers:
  k8s_audit:
    endpoint: 127.0.0.1:%d
    cluster: test
exporters:
  file: {path: %s}
service:
  extensions: [health_check]
  telemetry: {metrics: {level: none}}
  pipelines:
    traces: {receivers: [k8s_audit], exporters: [file]}
`, healthPort, auditPort, out), healthPort)

	item := func(id, ts string) string {
		return fmt.Sprintf(`{"level":"Metadata","auditID":%q,"stage":"ResponseComplete","verb":"create",`+
			`"user":{"username":"alice"},"objectRef":{"resource":"configmaps","namespace":"default","name":"cm-%s","apiVersion":"v1"},`+
			`"responseStatus":{"code":201},"requestReceivedTimestamp":%q,"stageTimestamp":%q}`, id, id, ts, ts)
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	body := `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` + strings.Join([]string{
		item("good-1", now),
		item("bad-timestamp", "yesterday"),
		item("year-9999", "9999-12-31T23:59:59Z"),
		`["not", "an", "event"]`,
		item("good-2", now),
	}, ",") + `]}`
	resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/audit", auditPort), "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, want 200: the good items are taken", resp.StatusCode)
	}
	var got map[string]int
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if got = exportedAuditIDs(t, out); len(got) >= 2 {
			break
		}
	}
	if len(got) != 2 || got["good-1"] != 1 || got["good-2"] != 1 {
		t.Fatalf("exported audit IDs %v, want good-1 and good-2 once each", got)
	}
}
