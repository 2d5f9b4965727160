//go:build dist

package distribution_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/kubetrail/kubetrail/testbed/envelope"
)

// documentedMetric is one "### <name>" section of a component's generated documentation.md:
// its attribute names and the values each may take.
type documentedMetric map[string][]string

var docValue = regexp.MustCompile("``([^`]+)``")

// documentedMetrics reads the metric sections of a documentation.md.
func documentedMetrics(t *testing.T, path string) map[string]documentedMetric {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]documentedMetric{}
	var cur documentedMetric
	inAttributes := false
	for line := range strings.SplitSeq(string(raw), "\n") {
		switch {
		case strings.HasPrefix(line, "### "):
			cur = documentedMetric{}
			docs[strings.TrimSpace(strings.TrimPrefix(line, "### "))] = cur
			inAttributes = false
		case strings.HasPrefix(line, "#### Attributes"):
			inAttributes = true
		case inAttributes && cur != nil && strings.HasPrefix(line, "| ") &&
			!strings.HasPrefix(line, "| Name ") && !strings.HasPrefix(line, "| ----"):
			cols := strings.Split(line, " | ")
			name := strings.TrimSpace(strings.TrimPrefix(cols[0], "|"))
			var values []string
			if len(cols) > 2 {
				for _, m := range docValue.FindAllStringSubmatch(cols[2], -1) {
					values = append(values, m[1])
				}
			}
			cur[name] = values
		}
	}
	if len(docs) == 0 {
		t.Fatalf("%s documents no metric", path)
	}
	return docs
}

// scrapedFamily is one metric family of a Prometheus text scrape: its label names and values.
type scrapedFamily map[string]map[string]bool

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? `)
var labelPair = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// collectorLabel: a label the collector's telemetry or a scraper adds, not a component's.
func collectorLabel(name string) bool {
	return name == "le" || name == "quantile" || name == "job" || name == "instance" ||
		strings.HasPrefix(name, "otel_scope_") || strings.HasPrefix(name, "service_")
}

// scrapeMetrics reads the collector's Prometheus endpoint: the families whose names start with
// one of prefixes, by the name of their "# TYPE" line.
func scrapeMetrics(t *testing.T, port int, prefixes ...string) map[string]scrapedFamily {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape answered %d %v:\n%s", resp.StatusCode, err, body)
	}
	families := map[string]scrapedFamily{}
	var cur string
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			cur = strings.Fields(rest)[0]
			if !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(cur, p) }) {
				cur = ""
			} else if families[cur] == nil {
				families[cur] = scrapedFamily{}
			}
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if cur == "" || m == nil || !strings.HasPrefix(m[1], cur) {
			continue
		}
		for _, kv := range labelPair.FindAllStringSubmatch(m[2], -1) {
			if collectorLabel(kv[1]) {
				continue
			}
			if families[cur][kv[1]] == nil {
				families[cur][kv[1]] = map[string]bool{}
			}
			families[cur][kv[1]][kv[2]] = true
		}
	}
	return families
}

// documentedName finds the documented metric a Prometheus family exports: the same name, or
// with the suffixes the exporter may add (_total on counters, a unit the name lacks).
func documentedName(family string, docs map[string]documentedMetric) (string, bool) {
	names := []string{family, strings.TrimSuffix(family, "_total")}
	for _, n := range slices.Clone(names) {
		for _, unit := range []string{"_bytes", "_seconds", "_milliseconds", "_ratio"} {
			names = append(names, strings.TrimSuffix(n, unit))
		}
	}
	for _, n := range names {
		if _, ok := docs[n]; ok {
			return n, true
		}
	}
	return "", false
}

// requireDocumented fails for every scraped family, label name or label value that the
// documentation.md of the component that exports it does not list, and for every family of want
// (family -> label names) that was not scraped with those labels (so the check cannot pass on
// an empty scrape).
func requireDocumented(t *testing.T, scraped map[string]scrapedFamily, docFor func(family string) (string, map[string]documentedMetric), want map[string][]string) {
	t.Helper()
	for family, labels := range scraped {
		docPath, docs := docFor(family)
		name, ok := documentedName(family, docs)
		if !ok {
			t.Errorf("exported metric %s is not documented in %s", family, docPath)
			continue
		}
		for label, values := range labels {
			documented, ok := docs[name][label]
			if !ok {
				t.Errorf("exported metric %s has label %q, which %s does not list for %s (it lists %v)",
					family, label, docPath, name, slices.Sorted(func(yield func(string) bool) {
						for k := range docs[name] {
							if !yield(k) {
								return
							}
						}
					}))
				continue
			}
			for v := range values {
				if !slices.Contains(documented, v) {
					t.Errorf("exported metric %s has %s=%q, not among the values %s lists: %v", family, label, v, docPath, documented)
				}
			}
		}
	}
	for family, labels := range want {
		got, ok := scraped[family]
		if !ok {
			t.Errorf("metric %s was not exported: the traffic did not record it, or it is exported under another name", family)
			continue
		}
		for _, l := range labels {
			if got[l] == nil {
				t.Errorf("metric %s was exported without its label %q", family, l)
			}
		}
	}
}

// TestExportedMetricsAreTheDocumented: operators write alerts from documentation.md (issue 30:
// diff_base_records was documented with result= and exported with reason=, so alerts written
// from the docs never fired). The built binary is driven through the webhook (a recorded
// capture, a bad item, a malformed body) and through the k8s_audit connector (the capture as OTLP
// log records, a record of no known shape, an event with a bad timestamp), its own Prometheus endpoint is
// scraped, and every otelcol_k8s_audit_* / otelcol_k8s_object_link_* / otelcol_k8s_event_*
// family, each of its labels and their values must be listed by the documentation.md of the
// component that exports it. The webhook and the connector run in two collectors: both export
// otelcol_k8s_audit_* and the telemetry's Prometheus reader adds no scope label to tell them apart
// (in one collector the scrape answers 500: in_flight_bytes "collected before with the same name").
func TestExportedMetricsAreTheDocumented(t *testing.T) {
	requireBinary(t)
	bodies := recordedBodies(t, "deployment")
	docPaths := map[string]string{
		"receiver":  filepath.Join(root, "receiver", "k8sauditreceiver", "documentation.md"),
		"connector": filepath.Join(root, "connector", "k8sauditconnector", "documentation.md"),
		"processor": filepath.Join(root, "processor", "k8sobjectlinkprocessor", "documentation.md"),
		"events":    filepath.Join(root, "receiver", "k8seventsreceiver", "documentation.md"),
	}
	docs := map[string]map[string]documentedMetric{}
	for k, p := range docPaths {
		docs[k] = documentedMetrics(t, p)
	}
	// docFor names the doc of a family: audit's is the door the run drove.
	docFor := func(audit string) func(string) (string, map[string]documentedMetric) {
		return func(family string) (string, map[string]documentedMetric) {
			switch {
			case strings.HasPrefix(family, "otelcol_k8s_object_link_"):
				return docPaths["processor"], docs["processor"]
			case strings.HasPrefix(family, "otelcol_k8s_event"):
				return docPaths["events"], docs["events"]
			}
			return docPaths[audit], docs[audit]
		}
	}
	prefixes := []string{"otelcol_k8s_audit_", "otelcol_k8s_event", "otelcol_k8s_object_link_"}
	// run starts the binary with receivers and pipelines (YAML) and the telemetry's Prometheus
	// reader on a free loopback port, which it returns.
	run := func(dir, receivers, connectors, pipelines string) (int, int) {
		t.Helper()
		port, healthPort, metricsPort := freePort(t), freePort(t), freePort(t)
		startCollector(t, fmt.Sprintf(`extensions:
  health_check: {endpoint: 127.0.0.1:%d}
receivers:
%s
connectors:
%s
processors:
  k8s_object_link: {window: 30m}
exporters:
  file: {path: %s}
service:
  extensions: [health_check]
  telemetry:
    metrics:
      level: detailed
      readers:
        - pull: {exporter: {prometheus: {host: 127.0.0.1, port: %d}}}
  pipelines:
%s
`, healthPort, fmt.Sprintf(receivers, port), connectors, filepath.Join(dir, "spans.jsonl"), metricsPort, pipelines), healthPort)
		return port, metricsPort
	}
	send := func(url, contentType string, body []byte) int {
		t.Helper()
		resp, err := http.Post(url, contentType, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}

	t.Run("webhook", func(t *testing.T) {
		port, metricsPort := run(t.TempDir(), "  k8s_audit: {endpoint: 127.0.0.1:%d, cluster: test}", "",
			"    traces: {receivers: [k8s_audit], processors: [k8s_object_link], exporters: [file]}")
		url := fmt.Sprintf("http://127.0.0.1:%d/audit", port)
		for i, b := range bodies {
			if code := send(url, "application/json", b); code != http.StatusOK {
				t.Fatalf("recorded batch %d answered %d", i+1, code)
			}
		}
		if code := send(url, "application/json", []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[["not","an","event"]]}`)); code != http.StatusOK {
			t.Fatalf("a batch with a bad item answered %d, want 200", code)
		}
		if code := send(url, "application/json", []byte(`{"kind":"EventList",`)); code != http.StatusBadRequest {
			t.Fatalf("a truncated body answered %d, want 400", code)
		}
		requireDocumented(t, scrapeMetrics(t, metricsPort, prefixes...), docFor("receiver"), map[string][]string{
			"otelcol_k8s_audit_dropped_events":      {"reason"},
			"otelcol_k8s_audit_rejected_requests":   {"reason"},
			"otelcol_k8s_audit_receive_lag":         {"input"},
			"otelcol_k8s_object_link_assignments":   {"result"},
			"otelcol_k8s_object_link_owner_lookups": {"source", "result"},
		})
	})

	t.Run("connector", func(t *testing.T) {
		port, metricsPort := run(t.TempDir(), "  otlp: {protocols: {http: {endpoint: 127.0.0.1:%d}}}",
			"  k8s_audit: {cluster: test}",
			"    logs/audit: {receivers: [otlp], exporters: [k8s_audit]}\n"+
				"    traces: {receivers: [k8s_audit], processors: [k8s_object_link], exporters: [file]}")
		ld := plog.NewLogs()
		records := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords()
		for _, b := range bodies {
			items, err := envelope.Items(b)
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range items {
				records.AppendEmpty().Body().SetStr(string(it))
			}
		}
		records.AppendEmpty().Body().SetStr("not an audit event")
		records.AppendEmpty().Body().SetStr(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","auditID":"x","stage":"ResponseComplete",` +
			`"verb":"create","objectRef":{"resource":"configmaps","name":"a"},"requestReceivedTimestamp":"yesterday","stageTimestamp":"yesterday"}`)
		data, err := (&plog.JSONMarshaler{}).MarshalLogs(ld)
		if err != nil {
			t.Fatal(err)
		}
		if code := send(fmt.Sprintf("http://127.0.0.1:%d/v1/logs", port), "application/json", data); code != http.StatusOK {
			t.Fatalf("OTLP logs answered %d", code)
		}
		scraped := scrapeMetrics(t, metricsPort, prefixes...)
		if !scraped["otelcol_k8s_audit_dropped_events"]["reason"]["unknown_format"] {
			t.Errorf("the record of no known shape was not counted as dropped_events{reason=\"unknown_format\"}: %v", scraped["otelcol_k8s_audit_dropped_events"])
		}
		requireDocumented(t, scraped, docFor("connector"), map[string][]string{
			"otelcol_k8s_audit_dropped_events":    {"reason"},
			"otelcol_k8s_audit_log_records":       {"format"},
			"otelcol_k8s_audit_receive_lag":       {"input"},
			"otelcol_k8s_object_link_assignments": {"result"},
		})
	})
}
