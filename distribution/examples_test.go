//go:build dist

package distribution_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pmetric"
	"sigs.k8s.io/yaml"
)

// writeKey is one series of the controller-rates example, summed over object kinds and replicas.
type writeKey struct{ controller, verb, result string }

// controllerOf is the writer's short name as distribution/examples/controller-rates.yaml's
// transform derives it, written out here as the spec the example is checked against.
func controllerOf(user string) string {
	user = regexp.MustCompile(`^system:serviceaccount:[^:]+:`).ReplaceAllString(user, "")
	user = regexp.MustCompile(`^system:node:.*$`).ReplaceAllString(user, "kubelet")
	return regexp.MustCompile(`^system:`).ReplaceAllString(user, "")
}

func resultOf(code int) string {
	switch {
	case code == http.StatusConflict:
		return "conflict"
	case code >= 400:
		return "error"
	}
	return "ok"
}

// TestControllerRatesExample runs distribution/examples/controller-rates.yaml (filter, transform
// and the span_metrics connector of the build) on the recorded conflict capture: the exported
// counters must count every traced write once, under its controller, verb and result, with the
// 409s of the two writers that lost a race as conflicts.
func TestControllerRatesExample(t *testing.T) {
	requireBinary(t)
	config := filepath.Join(root, "distribution", "examples", "controller-rates.yaml")
	validate(t, config)

	bodies := recordedBodies(t, "conflict")
	traced := expectedAuditIDs(t, bodies)
	want := map[writeKey]int64{}
	for _, b := range bodies {
		var list struct {
			Items []struct {
				AuditID string `json:"auditID"`
				Verb    string `json:"verb"`
				User    struct {
					Username string `json:"username"`
				} `json:"user"`
				ResponseStatus struct {
					Code int `json:"code"`
				} `json:"responseStatus"`
			} `json:"items"`
		}
		if err := json.Unmarshal(b, &list); err != nil {
			t.Fatal(err)
		}
		for _, ev := range list.Items {
			if traced[ev.AuditID] {
				want[writeKey{controllerOf(ev.User.Username), ev.Verb, resultOf(ev.ResponseStatus.Code)}]++
			}
		}
	}
	if want[writeKey{"deployment-controller", "update", "conflict"}] == 0 {
		t.Fatalf("the conflict capture has no 409 of the deployment controller: %v", want)
	}

	dir := t.TempDir()
	rates := filepath.Join(dir, "rates.jsonl")
	auditPort, healthPort := freePort(t), freePort(t)
	startCollectorFile(t, config, healthPort,
		fmt.Sprintf("KUBETRAIL_AUDIT_ENDPOINT=127.0.0.1:%d", auditPort),
		fmt.Sprintf("KUBETRAIL_HEALTH_ENDPOINT=127.0.0.1:%d", healthPort),
		"KUBETRAIL_OUT="+filepath.Join(dir, "traces.jsonl"),
		"KUBETRAIL_RATES_OUT="+rates,
		"KUBETRAIL_RATES_FLUSH_INTERVAL=500ms")
	for i, b := range bodies {
		resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/audit/disttest", auditPort), "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST of batch %d answered %d", i+1, resp.StatusCode)
		}
	}

	// Cumulative counters: the last flush holds the totals. Wait until it counts every write.
	var got map[writeKey]int64
	for deadline := time.Now().Add(30 * time.Second); ; {
		got = lastCalls(t, rates)
		var n, wantN int64
		for _, c := range got {
			n += c
		}
		for _, c := range want {
			wantN += c
		}
		if n >= wantN || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	for k, c := range want {
		if got[k] != c {
			t.Errorf("%+v: counted %d, want %d", k, got[k], c)
		}
	}
	for k, c := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%+v: counted %d, want no such series", k, c)
		}
	}
}

// lastCalls reads the last metrics line of the file exporter and sums kubetrail.controller.calls
// by controller, verb and result.
func lastCalls(t *testing.T, path string) map[writeKey]int64 {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var last []byte
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		last = append(last[:0], sc.Bytes()...)
	}
	if len(last) == 0 {
		return nil
	}
	md, err := (&pmetric.JSONUnmarshaler{}).UnmarshalMetrics(last)
	if err != nil {
		return nil // mid-write; the next poll reads it whole
	}
	out := map[writeKey]int64{}
	for _, rm := range md.ResourceMetrics().All() {
		if _, ok := rm.Resource().Attributes().Get("k8s.object.name"); ok {
			t.Fatalf("a metrics resource names an object (series per object): %v", rm.Resource().Attributes().AsRaw())
		}
		for _, sm := range rm.ScopeMetrics().All() {
			for _, m := range sm.Metrics().All() {
				if m.Name() != "kubetrail.controller.calls" || m.Type() != pmetric.MetricTypeSum {
					continue
				}
				for _, dp := range m.Sum().DataPoints().All() {
					attr := func(k string) string { v, _ := dp.Attributes().Get(k); return v.AsString() }
					out[writeKey{attr("kubetrail.controller"), attr("k8s.audit.verb"), attr("kubetrail.write.result")}] += dp.IntValue()
				}
			}
		}
	}
	return out
}

// notInThisBuild are the cloud receivers of distribution/examples/managed/ (and the encoding
// extension one of them names) that this project's otelcol-kubetrail does not contain: the
// receivers are not served by its module mirror at any version tried (builder-config.yaml). Their
// examples are for a user's own build, and only their connector section is checked
// (connector/k8sauditconnector's TestManagedExamplesConfigureTheConnector).
var notInThisBuild = map[string]bool{"awscloudwatch": true, "awsfirehose": true, "azure_event_hub": true,
	"googlecloudpubsub": true, "text_encoding": true}

// builtComponents lists the component types of the binary by kind, as `otelcol-kubetrail
// components` prints them.
func builtComponents(t *testing.T) map[string]map[string]bool {
	t.Helper()
	out, err := exec.Command(binary, "components").Output()
	if err != nil {
		t.Fatalf("%s components: %v", binary, err)
	}
	var doc struct {
		Receivers, Processors, Exporters, Connectors, Extensions []struct {
			Name string `json:"name"`
		}
	}
	if err := yaml.Unmarshal(out, &doc); err != nil {
		t.Fatalf("%s components: %v", binary, err)
	}
	kinds := map[string]map[string]bool{}
	for kind, list := range map[string][]struct {
		Name string `json:"name"`
	}{"receivers": doc.Receivers, "processors": doc.Processors, "exporters": doc.Exporters, "connectors": doc.Connectors, "extensions": doc.Extensions} {
		kinds[kind] = map[string]bool{}
		for _, c := range list {
			kinds[kind][c.Name] = true
		}
	}
	if len(kinds["receivers"]) == 0 {
		t.Fatalf("%s components lists no receivers:\n%s", binary, out)
	}
	return kinds
}

// TestExamplesValidate runs `otelcol-kubetrail validate` on every example whose components are
// all in the binary; an example may lack only the cloud receivers this build cannot contain.
func TestExamplesValidate(t *testing.T) {
	requireBinary(t)
	built := builtComponents(t)
	files, err := filepath.Glob(filepath.Join(root, "distribution", "examples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	managed, err := filepath.Glob(filepath.Join(root, "distribution", "examples", "managed", "*.yaml"))
	if err != nil || len(files) < 3 || len(managed) < 5 {
		t.Fatalf("examples: %v %v %v", files, managed, err)
	}
	dir := t.TempDir()
	env := []string{"KUBETRAIL_CLUSTER=disttest", "OTLP_ENDPOINT=127.0.0.1:4317", "KAFKA_BROKERS=127.0.0.1:9092",
		"KUBETRAIL_STORAGE_DIR=" + filepath.Join(dir, "storage"), "KUBETRAIL_QUEUE_DIR=" + filepath.Join(dir, "queue"), "KUBETRAIL_OUT=" + filepath.Join(dir, "traces.jsonl"),
		"KUBETRAIL_RATES_OUT=" + filepath.Join(dir, "rates.jsonl")}
	validated := 0
	for _, f := range append(files, managed...) {
		name, _ := filepath.Rel(filepath.Join(root, "distribution", "examples"), f)
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var cfg map[string]map[string]any
			if err := yaml.Unmarshal(raw, &cfg); err != nil {
				t.Fatal(err)
			}
			// A kafka receiver marks a message once the pipeline took it, holds its partition on a
			// retryable refusal and skips (counts, logs) a message refused for good, which would
			// otherwise stop its partition.
			if kafka, ok := cfg["receivers"]["kafka"].(map[string]any); ok {
				want := map[string]any{"after": true, "on_error": false, "on_permanent_error": true}
				if got := kafka["message_marking"]; !reflect.DeepEqual(got, want) {
					t.Errorf("receivers.kafka.message_marking = %v, want %v", got, want)
				}
			}
			var missing []string
			for _, kind := range []string{"receivers", "processors", "exporters", "connectors", "extensions"} {
				for id := range cfg[kind] {
					typ, _, _ := strings.Cut(id, "/")
					if !built[kind][typ] {
						missing = append(missing, typ)
					}
				}
			}
			for _, typ := range missing {
				if !notInThisBuild[typ] {
					t.Errorf("%s is not in the build (components: %v)", typ, built)
				}
			}
			if len(missing) > 0 {
				t.Logf("not validated: %v is not in this build", missing)
				return
			}
			validate(t, f, env...)
			validated++
		})
	}
	// The examples of the stock log receivers in the build (filelog, kafka) and the OTLP-fed ones.
	if validated < len(files)+1 {
		t.Errorf("validated %d examples, want every one of examples/ and at least managed/kafka.yaml", validated)
	}
}
