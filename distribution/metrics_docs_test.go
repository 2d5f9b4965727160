//go:build dist

package distribution_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"
	"sigs.k8s.io/yaml"

	"github.com/kubetrail/kubetrail/internal/envelopetest"
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
			items, err := envelopetest.Items(b)
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

// documentedType is what a documentation.md says of a metric: its type (Sum, Gauge, Histogram)
// and unit.
type documentedType struct{ typ, unit string }

// documentedTypes reads the "| Unit | Metric Type | Value Type | …" row of each metric section.
func documentedTypes(t *testing.T, path string) map[string]documentedType {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]documentedType{}
	var cur string
	header := false
	for line := range strings.SplitSeq(string(raw), "\n") {
		switch {
		case strings.HasPrefix(line, "### "):
			cur, header = strings.TrimSpace(strings.TrimPrefix(line, "### ")), false
		case strings.HasPrefix(line, "| Unit | Metric Type |"):
			header = true
		case header && strings.HasPrefix(line, "| ") && !strings.HasPrefix(line, "| ---"):
			cols := strings.Split(strings.Trim(line, "| "), " | ")
			out[cur] = documentedType{unit: strings.TrimSpace(cols[0]), typ: strings.TrimSpace(cols[1])}
			header = false
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s documents no metric type", path)
	}
	return out
}

// promNames are the sample names Prometheus scrapes of a documented metric, by the rule the
// collector's Prometheus reader follows (TestKitQueriesExportedMetrics checks the rule on a scrape):
// histograms end in _bucket, _sum and _count; counters keep their name, without the _total an
// OpenMetrics exposition would add (the reader answers Prometheus's text format 0.0.4 even when
// the scraper asks for OpenMetrics first, and Prometheus stores the names as it scraped them),
// and no unit is appended.
func promNames(name string, d documentedType) []string {
	if d.typ == "Histogram" {
		return []string{name + "_bucket", name + "_sum", name + "_count"}
	}
	return []string{name}
}

// prometheusAccept is the Accept header Prometheus scrapes with (scrape_protocols' default order):
// OpenMetrics first, whose counters carry _total, then the text format.
const prometheusAccept = "application/openmetrics-text;version=1.0.0;escaping=underscores,application/openmetrics-text;version=0.0.1;q=0.75," +
	"text/plain;version=0.0.4;q=0.5,*/*;q=0.1"

// scrapedSamples reads every sample name of the collector's Prometheus endpoint, scraped as
// Prometheus scrapes it.
func scrapedSamples(t *testing.T, port int) map[string]bool {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", port), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", prometheusAccept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape answered %d %v:\n%s", resp.StatusCode, err, body)
	}
	names := map[string]bool{}
	for line := range strings.SplitSeq(string(body), "\n") {
		if m := sampleLine.FindStringSubmatch(line); m != nil && !strings.HasPrefix(line, "#") {
			names[m[1]] = true
		}
	}
	return names
}

// metricNameRef finds the metric names of a PromQL expression: every selector here names its
// metric followed by its label matchers (metric{…}), and every metric of the kit is otelcol_….
var metricNameRef = regexp.MustCompile(`\b([a-zA-Z_:][a-zA-Z0-9_:]*)\{|\b(otelcol_[a-zA-Z0-9_:]+)`)

// TestKitQueriesExportedMetrics: every metric name the chart's PrometheusRule and Grafana dashboard
// query is one that otelcol-kubetrail exports. The built binary runs with the rendered chart's
// telemetry settings (its Prometheus reader, the default level) and is driven so that the
// collector's own metrics and the components' exist: audit batches through the webhook, a Redis
// ID map that cannot be reached, a receiver window other than the processor's, and a backend
// that is down behind a one-request queue (sends fail, the queue fills and refuses, the webhook
// answers 503). Its scrape, with Prometheus's Accept header, gives the names as Prometheus stores them;
// names the run cannot produce (the Events receiver needs an apiserver) come from the
// components' documentation.md by the same naming rule, which the scrape checks on every
// documented metric it has.
func TestKitQueriesExportedMetrics(t *testing.T) {
	requireBinary(t)
	objs := renderChart(t, "clusterName=c", controlPlaneCIDRs, "metrics.prometheusRule.enabled=true", "metrics.grafanaDashboard.enabled=true")

	// What the kit queries: each metric name, and where.
	queried := map[string][]string{}
	addQuery := func(where, expr string) {
		for _, m := range metricNameRef.FindAllStringSubmatch(expr, -1) {
			name := m[1] + m[2]
			if !slices.Contains(queried[name], where) {
				queried[name] = append(queried[name], where)
			}
		}
	}
	for alert, expr := range alertRules(t, objs["PrometheusRule/kt-kubetrail"]) {
		addQuery("alert "+alert, expr)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal([]byte(dig(objs["ConfigMap/kt-kubetrail-dashboard"], "data", "kubetrail.json").(string)), &dash); err != nil {
		t.Fatal(err)
	}
	for _, p := range dash.Panels {
		for _, q := range p.Targets {
			addQuery("panel "+p.Title, q.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if q, ok := dig(v.Query, "query").(string); ok {
			addQuery("variable "+v.Name, q)
		}
	}
	if len(queried) < 15 {
		t.Fatalf("the kit queries %d metrics: %v", len(queried), queried)
	}

	// The binary, with the chart's telemetry and a pipeline that records what the kit reads.
	cfg, _ := collectorConfig(t, objs)
	telemetry := dig(cfg, "service", "telemetry").(map[string]any)
	metricsPort, healthPort, auditPort, deadPort, redisPort := freePort(t), freePort(t), freePort(t), freePort(t), freePort(t)
	reader := dig(telemetry, "metrics", "readers", 0, "pull", "exporter", "prometheus").(map[string]any)
	reader["host"], reader["port"] = "127.0.0.1", metricsPort
	telemetryYAML, err := yaml.Marshal(telemetry)
	if err != nil {
		t.Fatal(err)
	}
	startCollector(t, fmt.Sprintf(`extensions:
  health_check: {endpoint: 127.0.0.1:%d}
receivers:
  k8s_audit: {endpoint: 127.0.0.1:%d, cluster: test, window: 30m}
processors:
  k8s_object_link:
    window: 1h
    owner_wait: 0s
    id_map: {backend: redis, redis: {addresses: ["127.0.0.1:%d"]}}
exporters:
  otlp_grpc:
    endpoint: 127.0.0.1:%d
    tls: {insecure: true}
    sending_queue: {queue_size: 1, num_consumers: 1, block_on_overflow: false}
    retry_on_failure: {initial_interval: 100ms, max_interval: 200ms, max_elapsed_time: 1s}
service:
  extensions: [health_check]
  telemetry:
%s
  pipelines:
    traces: {receivers: [k8s_audit], processors: [k8s_object_link], exporters: [otlp_grpc]}
`, healthPort, auditPort, redisPort, deadPort, indent(string(telemetryYAML), "    ")), healthPort)

	refused := 0
	for i, b := range recordedBodies(t, "deployment") {
		resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/audit", auditPort), "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
		case http.StatusServiceUnavailable:
			refused++
		default:
			t.Fatalf("batch %d answered %d", i+1, resp.StatusCode)
		}
	}
	if refused == 0 {
		t.Fatal("no batch was refused: the one-request queue never filled")
	}
	// Sends fail after max_elapsed_time; wait for the scrape to have them.
	var exported map[string]bool
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		exported = scrapedSamples(t, metricsPort)
		if exported["otelcol_exporter_send_failed_spans"] || time.Now().After(deadline) {
			break
		}
	}

	// The documented metrics, named by the rule, the rule checked on what the scrape has.
	documented := map[string]string{}
	checked, checkedTypes := 0, map[string]bool{}
	for _, doc := range []string{
		filepath.Join(root, "receiver", "k8sauditreceiver", "documentation.md"),
		filepath.Join(root, "receiver", "k8seventsreceiver", "documentation.md"),
		filepath.Join(root, "processor", "k8sobjectlinkprocessor", "documentation.md"),
		filepath.Join(root, "connector", "k8sauditconnector", "documentation.md"),
	} {
		for name, d := range documentedTypes(t, doc) {
			names := promNames(name, d)
			seen := 0
			for _, n := range names {
				documented[n] = doc
				if exported[n] {
					seen++
				}
			}
			// A documented metric the scrape has under another name breaks the rule.
			for n := range exported {
				if !slices.Contains(names, n) && slices.Contains([]string{name, name + "_total", name + "_bucket", name + "_sum", name + "_count"}, n) {
					t.Errorf("%s (%s, %s) is exported as %s, not as the rule names it: %v", name, d.typ, doc, n, names)
				}
			}
			if seen > 0 {
				checked++
				checkedTypes[d.typ] = true
			}
		}
	}
	if checked < 5 || !checkedTypes["Sum"] || !checkedTypes["Histogram"] {
		t.Errorf("the scrape has %d documented metrics (types %v): too few to check the naming rule on", checked, checkedTypes)
	}
	for name, where := range queried {
		if !exported[name] && documented[name] == "" {
			t.Errorf("%s (%v) is neither exported by the binary nor documented by a component", name, where)
		}
	}
}

func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+prefix)
}
