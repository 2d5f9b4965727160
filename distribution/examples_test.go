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
	"slices"
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

// exampleConfigs reads every collector example (distribution/examples/*.yaml and managed/*.yaml),
// parsed, by its path under distribution/examples (managed/kafka.yaml), and raw.
func exampleConfigs(t *testing.T) (map[string]map[string]any, map[string]string) {
	t.Helper()
	dir := filepath.Join(root, "distribution", "examples")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	managed, err := filepath.Glob(filepath.Join(dir, "managed", "*.yaml"))
	if err != nil || len(files) < 5 || len(managed) < 5 {
		t.Fatalf("examples: %v %v %v", files, managed, err)
	}
	parsed, raws := map[string]map[string]any{}, map[string]string{}
	for _, f := range append(files, managed...) {
		name, _ := filepath.Rel(dir, f)
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var cfg map[string]any
		if err := yaml.Unmarshal(raw, &cfg); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		parsed[name], raws[name] = cfg, string(raw)
	}
	return parsed, raws
}

// persistentQueue says what a config lacks of the persistent exporter queue of docs/operations.md
// ("A 200 is a promise"): each exporter of its traces pipeline queues in a file_storage extension
// that fsyncs and is started, refuses when full, retries without a deadline; no batch processor.
func persistentQueue(cfg map[string]any) []string {
	var lacks []string
	exporters, _ := dig(cfg, "service", "pipelines", "traces", "exporters").([]any)
	if len(exporters) == 0 {
		return []string{"a traces pipeline with an exporter"}
	}
	started, _ := dig(cfg, "service", "extensions").([]any)
	for _, e := range exporters {
		exp := dig(cfg, "exporters", e.(string))
		storage, _ := dig(exp, "sending_queue", "storage").(string)
		switch {
		case storage == "":
			lacks = append(lacks, fmt.Sprintf("%s: sending_queue.storage", e))
		case dig(cfg, "extensions", storage, "fsync") != true:
			lacks = append(lacks, fmt.Sprintf("%s: the extension %s with fsync: true", e, storage))
		case !slices.Contains(started, any(storage)):
			lacks = append(lacks, fmt.Sprintf("%s: %s in service.extensions", e, storage))
		}
		if dig(exp, "sending_queue", "block_on_overflow") != false {
			lacks = append(lacks, fmt.Sprintf("%s: sending_queue.block_on_overflow: false", e))
		}
		if m := dig(exp, "retry_on_failure", "max_elapsed_time"); m != float64(0) && m != "0" && m != "0s" {
			lacks = append(lacks, fmt.Sprintf("%s: retry_on_failure.max_elapsed_time: 0 (has %v)", e, m))
		}
	}
	for name, p := range dig(cfg, "service", "pipelines").(map[string]any) {
		procs, _ := dig(p, "processors").([]any)
		for _, proc := range procs {
			if typ, _, _ := strings.Cut(proc.(string), "/"); typ == "batch" {
				lacks = append(lacks, fmt.Sprintf("no batch processor (pipeline %s has %s)", name, proc))
			}
		}
	}
	return lacks
}

// errorBackoffComplete says whether a kafka receiver's error_backoff, when enabled, gives every
// interval (it has no defaults: enabled alone retries in a tight loop).
func errorBackoffComplete(receiver any) bool {
	if dig(receiver, "error_backoff", "enabled") != true {
		return true
	}
	for _, k := range []string{"initial_interval", "max_interval", "max_elapsed_time"} {
		if dig(receiver, "error_backoff", k) == nil {
			return false
		}
	}
	return true
}

// TestOperationsClaimsAboutExamples pins each thing docs/operations.md says about the example
// configurations: the sentence must still be in the doc (else the pin is out of date and says so),
// and the examples must do what it says.
func TestOperationsClaimsAboutExamples(t *testing.T) {
	opsRaw, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	ops := string(opsRaw)
	ex, raws := exampleConfigs(t)
	receiver := func(file, id string) any { return dig(ex[file], "receivers", id) }
	for _, c := range []struct {
		says  string // verbatim in docs/operations.md
		check func(t *testing.T)
	}{
		{"the Helm chart's `mode: managed` and every example in `distribution/examples/managed/` have it", func(t *testing.T) {
			n := 0
			for name, cfg := range ex {
				if strings.HasPrefix(name, "managed/") {
					n++
					if lacks := persistentQueue(cfg); len(lacks) > 0 {
						t.Errorf("%s lacks %v", name, lacks)
					}
				}
			}
			if n < 5 {
				t.Errorf("%d managed examples", n)
			}
			cfg, _ := collectorConfig(t, renderChart(t, "clusterName=c", "mode=managed", shipperFrom))
			if lacks := persistentQueue(cfg); len(lacks) > 0 {
				t.Errorf("the chart's mode managed lacks %v", lacks)
			}
		}},
		{"`message_marking: {after: true, on_error: false, on_permanent_error: true}`, `error_backoff: {enabled: true}`, `initial_offset: earliest` (`distribution/examples/managed/kafka.yaml`)", func(t *testing.T) {
			k := receiver("managed/kafka.yaml", "kafka")
			if dig(k, "message_marking", "after") != true || dig(k, "message_marking", "on_error") != false ||
				dig(k, "message_marking", "on_permanent_error") != true ||
				dig(k, "error_backoff", "enabled") != true || dig(k, "initial_offset") != "earliest" {
				t.Errorf("managed/kafka.yaml's kafka receiver: %v", k)
			}
		}},
		{"`retry_on_failure: {enabled: true}` and `storage` for the offsets across restarts (`distribution/examples/audit-from-file.yaml`", func(t *testing.T) {
			f := receiver("audit-from-file.yaml", "file_log")
			storage, _ := dig(f, "storage").(string)
			if dig(f, "retry_on_failure", "enabled") != true || storage == "" || dig(ex["audit-from-file.yaml"], "extensions", storage) == nil {
				t.Errorf("audit-from-file.yaml's file_log receiver: %v", f)
			}
		}},
		{"`storage` for the checkpoint, and the persistent exporter queue below (`distribution/examples/managed/eks-cloudwatch.yaml`)", func(t *testing.T) {
			cw := receiver("managed/eks-cloudwatch.yaml", "awscloudwatch")
			storage, _ := dig(cw, "storage").(string)
			if storage == "" || dig(ex["managed/eks-cloudwatch.yaml"], "extensions", storage) == nil {
				t.Errorf("eks-cloudwatch.yaml's awscloudwatch keeps no checkpoint in a storage extension: %v", cw)
			}
		}},
		{"→ Firehose (HTTP endpoint) → `awsfirehose` receiver, `record_type: cwlogs`; or `awscloudwatch` polling", func(t *testing.T) {
			if r := receiver("managed/eks-firehose.yaml", "awsfirehose"); dig(r, "record_type") != "cwlogs" {
				t.Errorf("eks-firehose.yaml's awsfirehose: %v", r)
			}
			if receiver("managed/eks-cloudwatch.yaml", "awscloudwatch") == nil {
				t.Error("eks-cloudwatch.yaml has no awscloudwatch receiver")
			}
		}},
		{"Event Hub → `azure_event_hub` receiver (any `format`), or the Event Hub's Kafka endpoint → `kafka` receiver", func(t *testing.T) {
			if receiver("managed/aks-eventhub.yaml", "azure_event_hub") == nil || receiver("managed/kafka.yaml", "kafka") == nil {
				t.Error("aks-eventhub.yaml has no azure_event_hub receiver, or kafka.yaml no kafka receiver")
			}
		}},
		{"Pub/Sub → `googlecloudpubsub` receiver with the `text_encoding` extension", func(t *testing.T) {
			g := ex["managed/gke-pubsub.yaml"]
			if dig(g, "receivers", "googlecloudpubsub", "encoding") != "text_encoding" || !slices.Contains(dig(g, "service", "extensions").([]any), any("text_encoding")) {
				t.Errorf("gke-pubsub.yaml: %v", dig(g, "receivers"))
			}
		}},
		{"add the line in the\nexample file's header (v0.165.1) to `builder-config.yaml`", func(t *testing.T) {
			kinds := map[string]string{"receivers": "receiver", "extensions": "extension"}
			for name, cfg := range ex {
				for kind, suffix := range kinds {
					m, _ := cfg[kind].(map[string]any)
					for id := range m {
						typ, _, _ := strings.Cut(id, "/")
						if !notInThisBuild[typ] {
							continue
						}
						mod := strings.ReplaceAll(typ, "_", "") + suffix
						line := regexp.MustCompile(`(?m)^#\s+- gomod: github\.com/open-telemetry/opentelemetry-collector-contrib/\S*/` + mod + ` v0\.165\.1$`)
						if !line.MatchString(strings.Join(headerOf(raws[name]), "\n")) {
							t.Errorf("%s uses %s, but its header has no `- gomod: …/%s v0.165.1` line", name, typ, mod)
						}
					}
				}
			}
		}},
		{"`kafka.yaml` and\n`../audit-from-file.yaml` run with the shipped binary and image", func(t *testing.T) {
			requireBinary(t)
			built := builtComponents(t)
			for _, name := range []string{"managed/kafka.yaml", "audit-from-file.yaml"} {
				for _, kind := range []string{"receivers", "processors", "exporters", "connectors", "extensions"} {
					m, _ := ex[name][kind].(map[string]any)
					for id := range m {
						if typ, _, _ := strings.Cut(id, "/"); !built[kind][typ] {
							t.Errorf("%s: %s %s is not in the binary", name, kind, typ)
						}
					}
				}
			}
		}},
		{"`k8s_audit` in a logs pipeline (its edge output: each event's bytes as received, one record,\n  the resource `k8s.cluster.name` and the object's key) into the `kafka` exporter with\n  `partition_logs_by_resource_attributes`, `encoding: otlp_proto`, `required_acks: all` and the\n  queue off", func(t *testing.T) {
			e := ex["kafka-edge.yaml"]
			p := dig(e, "service", "pipelines", "logs/edge")
			k := dig(e, "exporters", "kafka")
			if !slices.Contains(dig(p, "receivers").([]any), any("k8s_audit")) || !slices.Contains(dig(p, "exporters").([]any), any("kafka")) ||
				dig(k, "partition_logs_by_resource_attributes") != true || dig(k, "logs", "encoding") != "otlp_proto" ||
				dig(k, "producer", "required_acks") != "all" || dig(k, "sending_queue", "enabled") != false {
				t.Errorf("kafka-edge.yaml: pipeline %v, exporter %v", p, k)
			}
		}},
		{"`kafka` receiver (a consumer group, `initial_offset: earliest`, `message_marking: {after: true,\n  on_error: false, on_permanent_error: true}`, `error_backoff`), the `k8s_audit` connector with\n  `cluster_attribute: k8s.cluster.name`, `k8s_object_link` on Redis, a persistent exporter queue", func(t *testing.T) {
			p := ex["kafka-processing.yaml"]
			k := dig(p, "receivers", "kafka")
			if dig(k, "group_id") == nil || dig(k, "initial_offset") != "earliest" || dig(k, "message_marking", "after") != true ||
				dig(k, "message_marking", "on_error") != false || dig(k, "message_marking", "on_permanent_error") != true ||
				dig(k, "error_backoff", "enabled") != true {
				t.Errorf("kafka-processing.yaml's kafka receiver: %v", k)
			}
			if a := dig(p, "connectors", "k8s_audit", "cluster_attribute"); a != "k8s.cluster.name" {
				t.Errorf("kafka-processing.yaml's connector cluster_attribute %v", a)
			}
			if b := dig(p, "processors", "k8s_object_link", "id_map", "backend"); b != "redis" {
				t.Errorf("kafka-processing.yaml's ID map backend %v", b)
			}
			if lacks := persistentQueue(p); len(lacks) > 0 {
				t.Errorf("kafka-processing.yaml lacks %v", lacks)
			}
		}},
		{"`kafka-processing.yaml` therefore holds nothing (`owner_wait: 0s`) and asks the apiserver for\n  owners not in the stream (`owner_lookup`, its RBAC in the resources listed)", func(t *testing.T) {
			l := dig(ex["kafka-processing.yaml"], "processors", "k8s_object_link")
			if res, _ := dig(l, "owner_lookup", "resources").([]any); dig(l, "owner_wait") != "0s" || len(res) == 0 {
				t.Errorf("kafka-processing.yaml's k8s_object_link: %v", l)
			}
		}},
		{"The examples and the chart give every interval.", func(t *testing.T) {
			seen := 0
			check := func(where string, r any) {
				if dig(r, "error_backoff") != nil {
					seen++
				}
				if !errorBackoffComplete(r) {
					t.Errorf("%s: error_backoff enabled without every interval: %v", where, dig(r, "error_backoff"))
				}
			}
			for name, cfg := range ex {
				m, _ := cfg["receivers"].(map[string]any)
				for id, r := range m {
					check(name+" "+id, r)
				}
			}
			for _, f := range managedValuesFiles(t) {
				var v map[string]any
				raw, _ := os.ReadFile(f)
				if err := yaml.Unmarshal(raw, &v); err != nil {
					t.Fatal(err)
				}
				m, _ := dig(v, "managed", "receivers").(map[string]any)
				for id, r := range m {
					check(filepath.Base(f)+" "+id, r)
				}
			}
			cfg, _ := configOf(t, renderChart(t, "clusterName=c", "mode=kafka", controlPlaneCIDRs, kafkaBrokers), "ConfigMap/kt-kubetrail-processing")
			check("the chart's processing tier", dig(cfg, "receivers", "kafka"))
			if seen < 4 {
				t.Errorf("error_backoff in %d places, want the two examples, values-kafka.yaml and the chart", seen)
			}
		}},
		{"`producer.max_message_bytes` (8 MiB in the example)", func(t *testing.T) {
			if m := dig(ex["kafka-edge.yaml"], "exporters", "kafka", "producer", "max_message_bytes"); m != float64(8<<20) {
				t.Errorf("kafka-edge.yaml's max_message_bytes %v, want 8 MiB", m)
			}
		}},
		{"`values-eks.yaml`, `values-aks.yaml` and `values-gke.yaml` need an image with the\nprovider's receiver (`image.repository`); `values-otlp.yaml` and `values-kafka.yaml` work with the\nshipped image", func(t *testing.T) {
			requireBinary(t)
			built := builtComponents(t)
			for _, f := range managedValuesFiles(t) {
				var v map[string]any
				raw, _ := os.ReadFile(f)
				if err := yaml.Unmarshal(raw, &v); err != nil {
					t.Fatal(err)
				}
				receivers, _ := dig(v, "managed", "receivers").(map[string]any)
				inBuild := true
				for id := range receivers {
					typ, _, _ := strings.Cut(id, "/")
					inBuild = inBuild && built["receivers"][typ]
				}
				shipped := dig(v, "image", "repository") == nil
				if want := slices.Contains([]string{"values-otlp.yaml", "values-kafka.yaml"}, filepath.Base(f)); shipped != want || inBuild != want {
					t.Errorf("%s: shipped image %v, receivers %v in the build %v; want both %v", filepath.Base(f), shipped, slices.Collect(mapKeys(receivers)), inBuild, want)
				}
			}
		}},
	} {
		name := strings.Join(strings.Fields(c.says), " ")
		t.Run(name, func(t *testing.T) {
			if !strings.Contains(ops, c.says) {
				t.Fatalf("docs/operations.md no longer says %q: update this pin to what it says now", c.says)
			}
			c.check(t)
		})
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestExamplesListTheirEnvironment: each example's header lists, in its "Environment"
// paragraph, exactly the variables the file reads (${env:X} or ${X}, with or without a default).
func TestExamplesListTheirEnvironment(t *testing.T) {
	_, raws := exampleConfigs(t)
	listed := regexp.MustCompile(`\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b`)
	for name, raw := range raws {
		t.Run(name, func(t *testing.T) {
			read := map[string]bool{}
			for l := range strings.SplitSeq(raw, "\n") {
				if strings.HasPrefix(strings.TrimSpace(l), "#") {
					continue
				}
				for _, m := range envRef.FindAllStringSubmatch(l, -1) {
					read[m[1]] = true
				}
			}
			p := paragraph(headerOf(raw), "Environment")
			if p == "" {
				if len(read) > 0 {
					t.Fatalf("reads %v but its header has no \"# Environment…:\" paragraph", slices.Sorted(mapKeys(read)))
				}
				return
			}
			list := map[string]bool{}
			for _, v := range listed.FindAllString(p, -1) {
				list[v] = true
			}
			for v := range read {
				if !list[v] {
					t.Errorf("reads ${env:%s}, which its header's Environment paragraph does not list: %q", v, p)
				}
			}
			for v := range list {
				if !read[v] {
					t.Errorf("its header lists %s, which it does not read", v)
				}
			}
		})
	}
}
