//go:build dist

package distribution_test

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/internal/redactiontest"
)

// TestNoPlantedCredentialLeavesTheBinary posts the recorded RequestResponse captures of the
// deployment and secret scenarios, with credentials planted in every place redaction covers
// (internal/redactiontest: literal env values of credential names in every container list of
// Pods, ReplicaSets, the Deployment and its patches, a credential annotation on every object and
// pod template, values inside the last-applied annotation, new Secret values, a mutating
// webhook's patch setting an env value, an annotation and a Secret key, error messages quoting
// the planted value), to bin/otelcol-kubetrail running the shipped distribution/config.yaml with
// debug logging, and searches every byte the file exporter wrote and everything the collector
// logged for them: none may appear, as written or in base64, nor any part of one.
func TestNoPlantedCredentialLeavesTheBinary(t *testing.T) {
	requireBinary(t)
	var plant redactiontest.Planter
	type batch struct {
		cluster string
		body    []byte
	}
	var batches []batch
	var all [][]byte
	for _, scenario := range []string{"deployment", "secret"} {
		for _, raw := range recordedBodies(t, scenario) {
			body, err := plant.Capture(raw)
			if err != nil {
				t.Fatal(err)
			}
			batches = append(batches, batch{cluster: scenario, body: body})
			all = append(all, body)
		}
	}
	if len(plant.Values) < 100 {
		t.Fatalf("planted %d values, want them in every body", len(plant.Values))
	}

	out := filepath.Join(t.TempDir(), "traces.jsonl")
	auditPort, healthPort := freePort(t), freePort(t)
	c := launchWith(t, []string{"--config", filepath.Join(root, "distribution", "config.yaml"), "--set=service.telemetry.logs.level=debug"},
		fmt.Sprintf("KUBETRAIL_AUDIT_ENDPOINT=127.0.0.1:%d", auditPort),
		fmt.Sprintf("KUBETRAIL_HEALTH_ENDPOINT=127.0.0.1:%d", healthPort),
		fmt.Sprintf("KUBETRAIL_METRICS_PORT=%d", freePort(t)),
		"KUBETRAIL_OUT="+out)
	t.Cleanup(func() {
		c.stop()
		if t.Failed() {
			t.Logf("collector log:\n%s", c.logs.String())
		}
	})
	waitHealthy(t, c, healthPort)

	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	for i, b := range batches {
		resp, err := client.Post(fmt.Sprintf("http://127.0.0.1:%d/audit/%s", auditPort, b.cluster), "application/json", bytes.NewReader(b.body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST of planted batch %d (%s) answered %d", i+1, b.cluster, resp.StatusCode)
		}
	}

	want := expectedAuditIDs(t, all)
	for deadline := time.Now().Add(60 * time.Second); ; {
		forest := readForest(t, out)
		if forest != nil && countType(forest, model.SpanTypeAudit) >= len(want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("exported audit spans: %d, want %d", countType(forest, model.SpanTypeAudit), len(want))
		}
		time.Sleep(250 * time.Millisecond)
	}
	// Stop the collector: everything it holds (spans waiting for owners) is exported, and its
	// log is complete.
	if !c.stop() {
		t.Error("the collector did not stop on SIGTERM")
	}
	traces, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	logs := c.logs.Bytes()

	for _, where := range []struct {
		name string
		data []byte
	}{{"the exported traces", traces}, {"the collector's log", logs}} {
		for _, v := range plant.Values {
			for _, form := range redactiontest.Forms(v) {
				if i := bytes.Index(where.data, []byte(form)); i >= 0 {
					t.Errorf("planted value %q (as %q) is in %s: …%s…", v, form, where.name, where.data[max(i-200, 0):min(i+len(form)+50, len(where.data))])
				}
			}
		}
		if i := bytes.Index(where.data, []byte(redactiontest.Prefix)); i >= 0 {
			t.Errorf("part of a planted value is in %s: …%s…", where.name, where.data[max(i-200, 0):min(i+100, len(where.data))])
		}
	}

	// The planted entries did reach the spans, masked: names, keys and paths stay.
	for _, present := range []string{
		`{\"name\":\"` + redactiontest.EnvPassword + `\",\"value\":\"<redacted>\"}`,
		`{\"name\":\"` + redactiontest.EnvPlain + `\",\"value\":\"` + redactiontest.PlainValue + `\"}`,
		`\"` + redactiontest.AnnotationKey + `\":\"<redacted>\"`,
		`env[name=` + redactiontest.EnvToken + `].value`,
		`{\"name\":\"` + redactiontest.EnvWebhook + `\",\"value\":\"<redacted>\"}`,
		`has the literal value \"<redacted>\"`,
	} {
		if !bytes.Contains(traces, []byte(present)) {
			t.Errorf("the exported traces lack %s", present)
		}
	}
}

// launchWith starts the collector with these arguments (launch's, with flags of its own).
func launchWith(t *testing.T, args []string, env ...string) *launched {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	l := &launched{cmd: cmd, logs: &bytes.Buffer{}, exited: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = l.logs, l.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { l.exited <- cmd.Wait() }()
	return l
}
