//go:build dist

package distribution_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The chart as shipped: it refuses to install without a backend, its values files name the
// objects it renders, and it carries the operator's kit (monitors, alerts, a dashboard).

// modeValues are the values each mode requires besides clusterName and otlp.endpoint.
var modeValues = map[string][]string{
	"gateway":   {controlPlaneCIDRs},
	"daemonset": nil,
	"managed":   {shipperFrom},
	"kafka":     {controlPlaneCIDRs, kafkaBrokers},
}

// backendRequired is the start of the template's message for a missing otlp.endpoint.
const backendRequired = "otlp.endpoint is required: the OTLP/gRPC backend the traces go to, as host:port, e.g. --set otlp.endpoint="

// TestChartRequiresABackend: otlp.endpoint has no default, since a guessed Service takes no spans,
// the queue fills and the webhook answers 503 until the apiserver drops audit batches. Every mode
// exports over OTLP (kafka: its processing tier), so in every mode an install without it is
// refused: by the schema, naming the value, and, where the schema is skipped, by the template
// with the message that says what to give.
func TestChartRequiresABackend(t *testing.T) {
	for _, mode := range slices.Sorted(func(yield func(string) bool) {
		for m := range modeValues {
			if !yield(m) {
				return
			}
		}
	}) {
		t.Run(mode, func(t *testing.T) {
			base := append([]string{"clusterName=c", "mode=" + mode}, modeValues[mode]...)
			// With a backend it renders, and the exporter sends there.
			objs := renderChart(t, base...)
			cfgName := "ConfigMap/kt-kubetrail"
			if mode == "kafka" {
				cfgName = "ConfigMap/kt-kubetrail-processing"
			}
			var cfg map[string]any
			if err := yaml.Unmarshal([]byte(dig(objs[cfgName], "data", "config.yaml").(string)), &cfg); err != nil {
				t.Fatal(err)
			}
			if e := dig(cfg, "exporters", "otlp_grpc", "endpoint"); e != "jaeger-collector.observability.svc:4317" {
				t.Errorf("%s: exporter endpoint %v, want otlp.endpoint's", cfgName, e)
			}
			for _, tc := range []struct {
				name       string
				sets       []string
				skipSchema bool
				want       string
			}{
				{"not given: the default is empty", nil, false, "/otlp/endpoint"},
				{"given empty", []string{"otlp.endpoint="}, false, "/otlp/endpoint"},
				{"removed with null", []string{"otlp.endpoint=null"}, false, "endpoint"},
				{"blank", []string{"otlp.endpoint=  "}, false, "/otlp/endpoint"},
				{"not given, schema skipped", nil, true, backendRequired},
				{"blank, schema skipped", []string{"otlp.endpoint= "}, true, backendRequired},
				{"removed with null, schema skipped", []string{"otlp.endpoint=null"}, true, backendRequired},
			} {
				t.Run(tc.name, func(t *testing.T) {
					for _, cmd := range [][]string{{"template", "kt", chartDir}, {"lint", "--strict", chartDir}} {
						if tc.skipSchema && cmd[0] == "lint" {
							continue // lint has no --skip-schema-validation
						}
						args := slices.Clone(cmd)
						if tc.skipSchema {
							args = append(args, "--skip-schema-validation")
						}
						for _, s := range append(slices.Clone(base), tc.sets...) {
							args = append(args, "--set", s)
						}
						out, stderr, err := helm(t, args...)
						if err == nil {
							t.Fatalf("helm %v succeeded without a backend:\n%s", args, out)
						}
						if msg := stderr + out; !strings.Contains(msg, tc.want) {
							t.Errorf("helm %s refused without saying %q:\n%s", cmd[0], tc.want, msg)
						}
					}
				})
			}
		})
	}
}

// installCommand is a `helm install` line of the docs: its release, namespace, values files and
// --set values.
type installCommand struct {
	line      string
	release   string
	namespace string
	files     []string
	sets      []string
	setJSON   []string
}

// releasedChart is the chart reference the docs' install commands use: the released chart in its
// OCI registry, at --version, the checkout's Chart.yaml version (this checkout's chart renders in
// its place).
const releasedChart = "oci://ghcr.io/kubetrail/charts/kubetrail"

// chartVersion is the checkout's Chart.yaml version.
func chartVersion(t *testing.T) string {
	t.Helper()
	var chart struct {
		Version string `json:"version"`
	}
	raw, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &chart); err != nil || chart.Version == "" {
		t.Fatalf("Chart.yaml: no version (%v)", err)
	}
	return chart.Version
}

// installCommands reads the `helm install` commands of text (a values file's header, a README),
// with their continuation lines; comment marks and quotes are dropped, <cluster> becomes a name.
func installCommands(t *testing.T, text string) []installCommand {
	t.Helper()
	var cmds []installCommand
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(lines[i]), "#"))
		if !strings.HasPrefix(l, "helm install ") {
			continue
		}
		full := l
		for strings.HasSuffix(full, "\\") && i+1 < len(lines) {
			i++
			full = strings.TrimSuffix(full, "\\") + " " + strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(lines[i]), "#"))
		}
		words := strings.Fields(strings.ReplaceAll(strings.ReplaceAll(full, "'", ""), "<cluster>", "prod-eu-1"))
		c := installCommand{line: full, release: words[2], namespace: "default"}
		if words[3] != "distribution/helm/kubetrail" && words[3] != releasedChart {
			t.Errorf("%q installs %s, not the chart", full, words[3])
		}
		for j := 4; j < len(words); j++ {
			switch words[j] {
			case "--version":
				j++
				if want := chartVersion(t); words[3] != releasedChart || words[j] != want {
					t.Errorf("%q: --version %s, want the released chart at this checkout's version %s", full, words[j], want)
				}
			case "--set-json":
				j++
				c.setJSON = append(c.setJSON, words[j])
			case "-n", "--namespace":
				j++
				c.namespace = words[j]
			case "-f", "--values":
				j++
				c.files = append(c.files, filepath.Join(root, words[j]))
			case "--set":
				j++
				c.sets = append(c.sets, words[j])
			case "--create-namespace":
			default:
				t.Errorf("%q: %s is not a flag this test knows", full, words[j])
			}
		}
		cmds = append(cmds, c)
	}
	return cmds
}

// renderedObject is one object of a rendering, by kind, namespace and name.
type renderedObject struct{ kind, namespace, name string }

// render renders the chart as the command would install it (helm template with its release,
// namespace, values files and values: nothing added).
func (c installCommand) render(t *testing.T) map[renderedObject]map[string]any {
	t.Helper()
	args := []string{"template", c.release, chartDir, "--namespace", c.namespace}
	for _, f := range c.files {
		args = append(args, "--values", f)
	}
	for _, s := range c.sets {
		args = append(args, "--set", s)
	}
	for _, s := range c.setJSON {
		args = append(args, "--set-json", s)
	}
	out, stderr, err := helm(t, args...)
	if err != nil {
		t.Fatalf("the documented command %q does not render: %v\n%s", c.line, err, stderr)
	}
	objs := map[renderedObject]map[string]any{}
	for _, doc := range strings.Split(out, "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil || obj == nil {
			continue
		}
		ns, _ := dig(obj, "metadata", "namespace").(string)
		if ns == "" {
			ns = c.namespace
		}
		name, _ := dig(obj, "metadata", "name").(string)
		objs[renderedObject{obj["kind"].(string), ns, name}] = obj
	}
	return objs
}

var (
	// A Service by its DNS name: <name>.<namespace>.svc.
	serviceDNSRef = regexp.MustCompile(`\b([a-z0-9]([-a-z0-9]*[a-z0-9])?)\.([a-z0-9]([-a-z0-9]*[a-z0-9])?)\.svc\b`)
	// An object named in prose: "the Secret kubetrail-shipper-client". Names with a '-' only, so
	// that "a Secret with …" is not read as a name.
	proseRef = regexp.MustCompile(`\b(Secret|ConfigMap|Service)\s+([a-z0-9]+(?:-[a-z0-9]+)+)\b`)
	// An object a value refers to.
	keyRef = regexp.MustCompile(`\b(secretKeyRef|configMapKeyRef):\s*\{\s*name:\s*([a-z0-9.-]+)`)
	// The Secrets a documented kubectl line creates.
	createdSecret = regexp.MustCompile(`kubectl\s+-n\s+(\S+)\s+create\s+secret\s+generic\s+([a-z0-9.-]+)`)
	// The header's list of what the user provides: "Kind namespace/name".
	yoursRef = regexp.MustCompile(`\b(Secret|ConfigMap|Service)\s+([a-z0-9-]+)/([a-z0-9.-]+)`)
	envRef   = regexp.MustCompile(`\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)(?::-[^}]*)?\}`)
)

// headerOf is the leading comment block of a file.
func headerOf(raw string) []string {
	var header []string
	sc := bufio.NewScanner(strings.NewReader(raw))
	for sc.Scan() {
		if !strings.HasPrefix(sc.Text(), "#") {
			break
		}
		header = append(header, sc.Text())
	}
	return header
}

// paragraph returns the header's paragraph that begins with prefix (after "# "), up to a line
// that is only "#"; "" when there is none.
func paragraph(header []string, prefix string) string {
	for i, l := range header {
		if !strings.HasPrefix(strings.TrimPrefix(l, "# "), prefix) {
			continue
		}
		p := l
		for _, next := range header[i+1:] {
			if strings.TrimSpace(next) == "#" {
				break
			}
			p += "\n" + next
		}
		return p
	}
	return ""
}

// TestChartExamplesNameWhatTheChartRenders: every values file's header says how to install it;
// rendered as that command installs it (the same release name and namespace), every Service,
// Secret and ConfigMap the file names (a Service by its DNS name, an object in prose, a
// secretKeyRef) is one the rendering has, or one the header lists as the user's ("Yours, not the
// chart's: Secret <namespace>/<name>, …"); the header lists nothing the chart makes, and every
// Secret its kubectl lines create; every ${env:…} the file's receivers read is set on the
// collector container. The chart README's commands render too.
func TestChartExamplesNameWhatTheChartRenders(t *testing.T) {
	for _, f := range managedValuesFiles(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			header := headerOf(string(raw))
			cmds := installCommands(t, strings.Join(header, "\n"))
			if len(cmds) != 1 {
				t.Fatalf("the header has %d helm install commands, want 1", len(cmds))
			}
			cmd := cmds[0]
			if !slices.Contains(cmd.files, f) {
				t.Errorf("the header's command %q does not install this file", cmd.line)
			}
			objs := cmd.render(t)
			yours := map[renderedObject]bool{}
			yoursText := paragraph(header, "Yours, not the chart's:")
			if yoursText == "" {
				t.Errorf("no \"# Yours, not the chart's:\" paragraph in the header (the backend's Service at least is yours)")
			}
			for _, m := range yoursRef.FindAllStringSubmatch(strings.ReplaceAll(yoursText, "\n#", " "), -1) {
				o := renderedObject{m[1], m[2], m[3]}
				yours[o] = true
				if objs[o] != nil {
					t.Errorf("the header lists %s %s/%s as yours, but the chart renders it", o.kind, o.namespace, o.name)
				}
			}
			body := strings.Replace(string(raw), yoursText, "", 1)
			refs := map[renderedObject]string{}
			for _, m := range serviceDNSRef.FindAllStringSubmatch(body, -1) {
				refs[renderedObject{"Service", m[3], m[1]}] = m[0]
			}
			for _, m := range proseRef.FindAllStringSubmatch(strings.ReplaceAll(body, "\n#", " "), -1) {
				refs[renderedObject{m[1], cmd.namespace, m[2]}] = m[0]
			}
			for _, m := range keyRef.FindAllStringSubmatch(body, -1) {
				kind := map[string]string{"secretKeyRef": "Secret", "configMapKeyRef": "ConfigMap"}[m[1]]
				refs[renderedObject{kind, cmd.namespace, m[2]}] = m[0]
			}
			for _, m := range createdSecret.FindAllStringSubmatch(body, -1) {
				if o := (renderedObject{"Secret", m[1], m[2]}); !yours[o] {
					t.Errorf("the header's %q creates a Secret the \"Yours\" paragraph does not list", m[0])
				}
			}
			if len(refs) == 0 {
				t.Fatal("the file names no object: the test reads nothing")
			}
			for o, text := range refs {
				if objs[o] == nil && !yours[o] {
					t.Errorf("%q names %s %s/%s: `%s` renders no such object, and the header does not list it as yours",
						text, o.kind, o.namespace, o.name, cmd.line)
				}
			}
			// ${env:…} of the values (not of the comments) must be set on the collector.
			var values strings.Builder
			for l := range strings.SplitSeq(string(raw), "\n") {
				if code, _, _ := strings.Cut(l, " #"); !strings.HasPrefix(strings.TrimSpace(l), "#") {
					values.WriteString(code + "\n")
				}
			}
			sts := objs[renderedObject{"StatefulSet", cmd.namespace, cmd.release}]
			if sts == nil {
				t.Fatalf("no StatefulSet %s/%s rendered", cmd.namespace, cmd.release)
			}
			env := map[string]bool{}
			for _, e := range dig(sts, "spec", "template", "spec", "containers", 0, "env").([]any) {
				env[dig(e, "name").(string)] = true
			}
			for _, m := range envRef.FindAllStringSubmatch(values.String(), -1) {
				if !env[m[1]] {
					t.Errorf("%s reads %s, which the collector container does not set (managed.env)", m[0], m[1])
				}
			}
		})
	}
	t.Run("README", func(t *testing.T) {
		raw, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
		if err != nil {
			t.Fatal(err)
		}
		cmds := installCommands(t, string(raw))
		if len(cmds) < 2 {
			t.Fatalf("the chart README has %d helm install commands, want at least 2", len(cmds))
		}
		for _, c := range cmds {
			c.render(t)
		}
	})
}

// kitValues switch on every piece of the operator's kit, with labels and an interval of their own.
var kitValues = []string{
	"metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.labels.release=prom", "metrics.serviceMonitor.interval=15s",
	"metrics.podMonitor.enabled=true", "metrics.podMonitor.labels.release=prom", "metrics.podMonitor.interval=20s",
	"metrics.prometheusRule.enabled=true", "metrics.prometheusRule.labels.release=prom",
	"metrics.grafanaDashboard.enabled=true", "metrics.grafanaDashboard.annotations.grafana_folder=Kubernetes",
}

// collectorWorkloads are the rendered workloads that run the collector (not Redis).
func collectorWorkloads(objs map[string]map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	for k, o := range objs {
		kind, name, _ := strings.Cut(k, "/")
		if (kind == "StatefulSet" || kind == "DaemonSet" || kind == "Deployment") && !strings.HasSuffix(name, "-redis") {
			out[k] = o
		}
	}
	return out
}

// TestChartOperatorsKit: off by default; on, in every mode, the ServiceMonitor selects only its
// metrics Service, which (like the PodMonitor) selects every collector pod of the release and not
// Redis, on the port named metrics (8888); the PrometheusRule's alerts carry the thresholds and
// the release's selector; the dashboard ConfigMap is labelled for Grafana's sidecar and holds
// dashboards/kubetrail.json. Every alert has its runbook line in docs/operations.md.
func TestChartOperatorsKit(t *testing.T) {
	kit := []string{"ServiceMonitor/kt-kubetrail", "PodMonitor/kt-kubetrail", "PrometheusRule/kt-kubetrail",
		"ConfigMap/kt-kubetrail-dashboard", "Service/kt-kubetrail-metrics"}
	dashboard, err := os.ReadFile(filepath.Join(chartDir, "dashboards", "kubetrail.json"))
	if err != nil {
		t.Fatal(err)
	}
	ops, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	for mode, sets := range modeValues {
		t.Run(mode, func(t *testing.T) {
			base := append([]string{"clusterName=c", "mode=" + mode}, sets...)
			off := renderChart(t, base...)
			for _, k := range kit {
				if off[k] != nil {
					t.Errorf("%s rendered by default", k)
				}
			}
			objs := renderChart(t, append(base, kitValues...)...)
			for _, k := range kit {
				if objs[k] == nil {
					t.Fatalf("%s not rendered with the kit on (have %v)", k, keys(objs))
				}
			}
			workloads := collectorWorkloads(objs)
			if len(workloads) == 0 || (mode == "kafka") != (len(workloads) == 2) {
				t.Fatalf("collector workloads %v", keys(workloads))
			}
			redisPods, _ := dig(objs["Deployment/kt-kubetrail-redis"], "spec", "template", "metadata", "labels").(map[string]any)

			// The ServiceMonitor selects its Service and no other; that Service, every collector pod.
			sm := objs["ServiceMonitor/kt-kubetrail"]
			smSel, _ := dig(sm, "spec", "selector", "matchLabels").(map[string]any)
			for k, o := range objs {
				labels, _ := dig(o, "metadata", "labels").(map[string]any)
				if strings.HasPrefix(k, "Service/") && selects(smSel, labels) != (k == "Service/kt-kubetrail-metrics") {
					t.Errorf("the ServiceMonitor's selector %v and %s (labels %v)", smSel, k, dig(o, "metadata", "labels"))
				}
			}
			if ns := dig(sm, "spec", "namespaceSelector", "matchNames", 0); ns != "kubetrail" {
				t.Errorf("ServiceMonitor namespaceSelector %v", ns)
			}
			if ep := dig(sm, "spec", "endpoints", 0); dig(ep, "port") != "metrics" || dig(ep, "interval") != "15s" {
				t.Errorf("ServiceMonitor endpoint %v, want port metrics every 15s", ep)
			}
			svc := objs["Service/kt-kubetrail-metrics"]
			if p := dig(svc, "spec", "ports", 0); dig(p, "port") != float64(8888) || dig(p, "targetPort") != "metrics" {
				t.Errorf("metrics Service port %v", p)
			}
			pm := objs["PodMonitor/kt-kubetrail"]
			pmSel, _ := dig(pm, "spec", "selector", "matchLabels").(map[string]any)
			if ep := dig(pm, "spec", "podMetricsEndpoints", 0); dig(ep, "port") != "metrics" || dig(ep, "interval") != "20s" {
				t.Errorf("PodMonitor endpoint %v, want port metrics every 20s", ep)
			}
			for _, sel := range []map[string]any{dig(svc, "spec", "selector").(map[string]any), pmSel} {
				for k, w := range workloads {
					if !selects(sel, podLabels(w)) {
						t.Errorf("selector %v misses the pods of %s (%v)", sel, k, podLabels(w))
					}
					ports, _ := dig(w, "spec", "template", "spec", "containers", 0, "ports").([]any)
					if !slices.ContainsFunc(ports, func(p any) bool { return dig(p, "name") == "metrics" && dig(p, "containerPort") == float64(8888) }) {
						t.Errorf("%s has no container port metrics 8888: %v", k, ports)
					}
				}
				if redisPods != nil && selects(sel, redisPods) {
					t.Errorf("selector %v selects the Redis pods", sel)
				}
			}
			for _, k := range []string{"ServiceMonitor/kt-kubetrail", "PodMonitor/kt-kubetrail", "PrometheusRule/kt-kubetrail"} {
				if l := dig(objs[k], "metadata", "labels", "release"); l != "prom" {
					t.Errorf("%s labels %v, want release=prom added", k, dig(objs[k], "metadata", "labels"))
				}
			}

			// The rule: each alert reads this release's series and carries its threshold.
			rules := alertRules(t, objs["PrometheusRule/kt-kubetrail"])
			for name, expr := range rules {
				if !strings.Contains(expr, `namespace="kubetrail", pod=~"kt-kubetrail-.*"`) {
					t.Errorf("%s does not select the release's series: %s", name, expr)
				}
				if !strings.Contains(string(ops), name) {
					t.Errorf("alert %s has no runbook line in docs/operations.md", name)
				}
			}
			// Fractions from a values file, as YAML numbers, and from --set, as helm passes them: strings.
			tunedFile := filepath.Join(t.TempDir(), "tuned.yaml")
			if err := os.WriteFile(tunedFile, []byte("metrics: {prometheusRule: {enabled: true, selector: 'job=\"kt\"', lagSeconds: 123, queueFullRatio: 0.5}}\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			tuned := alertRules(t, renderChartWith(t, []string{tunedFile}, append(base, "metrics.prometheusRule.webhookRefusalsPerSecond=0.25",
				"metrics.prometheusRule.eventsWatchRestarts=7")...)["PrometheusRule/kt-kubetrail"])
			for name, want := range map[string]string{"KubetrailAuditLagHigh": "> 123", "KubetrailExporterQueueFull": "> 0.5",
				"KubetrailWebhookRefusing": "> 0.25", "KubetrailEventsWatchRestarting": "> 7"} {
				if !strings.Contains(tuned[name], want) || !strings.Contains(tuned[name], `{job="kt"`) {
					t.Errorf("%s with its threshold and selector set: %s (want %q and the selector)", name, tuned[name], want)
				}
			}

			// The dashboard: the chart's file, for Grafana's sidecar.
			cm := objs["ConfigMap/kt-kubetrail-dashboard"]
			if l := dig(cm, "metadata", "labels", "grafana_dashboard"); l != "1" {
				t.Errorf("dashboard ConfigMap label grafana_dashboard = %v, want \"1\"", l)
			}
			if a := dig(cm, "metadata", "annotations", "grafana_folder"); a != "Kubernetes" {
				t.Errorf("dashboard ConfigMap annotations %v", dig(cm, "metadata", "annotations"))
			}
			if got := dig(cm, "data", "kubetrail.json"); strings.TrimSpace(got.(string)) != strings.TrimSpace(string(dashboard)) {
				t.Errorf("the ConfigMap's kubetrail.json is not dashboards/kubetrail.json")
			}
		})
	}
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(dashboard, &d); err != nil || d.UID == "" {
		t.Fatalf("dashboards/kubetrail.json: %v (uid %q)", err, d.UID)
	}
	queries := 0
	for _, p := range d.Panels {
		for _, q := range p.Targets {
			if strings.Count(q.Expr, "(") != strings.Count(q.Expr, ")") || !strings.Contains(q.Expr, `namespace="$namespace", pod=~"$pod"`) {
				t.Errorf("dashboard query %q: unbalanced, or not on the $namespace and $pod variables", q.Expr)
			}
			queries++
		}
	}
	if queries < 10 {
		t.Errorf("the dashboard has %d queries", queries)
	}
}

// alertRules returns the alerts of a rendered PrometheusRule by name, and checks the parts every
// alert needs.
func alertRules(t *testing.T, rule map[string]any) map[string]string {
	t.Helper()
	out := map[string]string{}
	groups, _ := dig(rule, "spec", "groups").([]any)
	for _, g := range groups {
		for _, r := range dig(g, "rules").([]any) {
			name, _ := dig(r, "alert").(string)
			expr, _ := dig(r, "expr").(string)
			if name == "" || expr == "" || dig(r, "for") == nil || dig(r, "labels", "severity") == nil || dig(r, "annotations", "summary") == nil {
				t.Errorf("incomplete alert rule %v", r)
			}
			if strings.Count(expr, "(") != strings.Count(expr, ")") || strings.Count(expr, "{") != strings.Count(expr, "}") {
				t.Errorf("%s: unbalanced expression %s", name, expr)
			}
			out[name] = expr
		}
	}
	if len(out) < 6 {
		t.Fatalf("the PrometheusRule has %d alerts: %v", len(out), out)
	}
	return out
}
