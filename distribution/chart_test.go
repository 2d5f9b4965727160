//go:build dist

package distribution_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The chart's tests: helm (built by testbed/hack/ensure-helm.sh; `make dist-test` passes its path
// in KUBETRAIL_HELM) lints and renders distribution/helm/kubetrail, and the real binary validates
// the collector config every rendering carries. testbed/e2e's chart tests apply the renderings to
// a real apiserver and read the install notes (helm install --dry-run needs a reachable cluster).

var chartDir = filepath.Join(root, "distribution", "helm", "kubetrail")

func helmBinary(t *testing.T) string {
	t.Helper()
	h := os.Getenv("KUBETRAIL_HELM")
	if h == "" {
		t.Fatal("KUBETRAIL_HELM is not set: run `make dist-test` (it builds helm with testbed/hack/ensure-helm.sh)")
	}
	if _, err := os.Stat(h); err != nil {
		t.Fatalf("helm %s: %v", h, err)
	}
	return h
}

// helm runs helm with args and returns its stdout, and its error with stderr.
func helm(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(helmBinary(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// renderChart runs `helm template` with --set flags and returns the manifests by "Kind/name".
func renderChart(t *testing.T, sets ...string) map[string]map[string]any {
	t.Helper()
	return renderChartWith(t, nil, sets...)
}

// renderChartWith is renderChart with values files (-f) before the --set flags.
func renderChartWith(t *testing.T, valuesFiles []string, sets ...string) map[string]map[string]any {
	t.Helper()
	return renderChartAt(t, chartDir, valuesFiles, sets...)
}

// renderChartAt is renderChartWith for the chart in dir.
func renderChartAt(t *testing.T, dir string, valuesFiles []string, sets ...string) map[string]map[string]any {
	t.Helper()
	args := []string{"template", "kt", dir, "--namespace", "kubetrail", "--set", backend}
	for _, f := range valuesFiles {
		args = append(args, "--values", f)
	}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	out, stderr, err := helm(t, args...)
	if err != nil {
		t.Fatalf("helm template %v %v: %v\n%s", valuesFiles, sets, err, stderr)
	}
	objs := map[string]map[string]any{}
	for _, doc := range strings.Split(out, "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("rendered document does not parse: %v\n%s", err, doc)
		}
		if obj == nil {
			continue
		}
		name, _ := dig(obj, "metadata", "name").(string)
		objs[obj["kind"].(string)+"/"+name] = obj
	}
	return objs
}

// dig walks nested maps (and list indexes given as int).
func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// collectorConfig returns the collector config of a rendering, parsed, and writes it to a file
// for `validate`.
func collectorConfig(t *testing.T, objs map[string]map[string]any) (map[string]any, string) {
	t.Helper()
	cm := objs["ConfigMap/kt-kubetrail"]
	raw, _ := dig(cm, "data", "config.yaml").(string)
	if raw == "" {
		t.Fatalf("no ConfigMap kt-kubetrail with config.yaml among %v", keys(objs))
	}
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatalf("config.yaml does not parse: %v", err)
	}
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(raw), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg, path
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// backend is the value every rendering needs (otlp.endpoint has no default: TestChartRequiresABackend);
// the tests' renderings set it first, so a test's own --set can replace it.
const backend = "otlp.endpoint=jaeger-collector.observability.svc:4317"

// controlPlaneCIDRs is the value a gateway rendering needs (gateway.networkPolicy is on and has no
// default CIDR: the rendering fails without one).
const controlPlaneCIDRs = "gateway.networkPolicy.controlPlaneCIDRs={10.0.0.0/24}"

func TestChartLints(t *testing.T) {
	for _, mode := range []string{"gateway", "daemonset", "managed"} {
		out, stderr, err := helm(t, "lint", "--strict", chartDir, "--set", backend, "--set", "clusterName=lint", "--set", "mode="+mode, "--set", controlPlaneCIDRs)
		if err != nil {
			t.Errorf("helm lint --strict (mode %s): %v\n%s%s", mode, err, out, stderr)
		}
	}
	for _, f := range managedValuesFiles(t) {
		out, stderr, err := helm(t, "lint", "--strict", chartDir, "--set", backend, "--set", "clusterName=lint", "--values", f)
		if err != nil {
			t.Errorf("helm lint --strict --values %s: %v\n%s%s", filepath.Base(f), err, out, stderr)
		}
	}
}

// TestChartRendersValidConfigs renders the chart in both modes and in the variants its values
// allow; every rendering must carry the objects of its mode and a config the binary validates.
func TestChartRendersValidConfigs(t *testing.T) {
	requireBinary(t)
	for _, tc := range []struct {
		name    string
		sets    []string
		want    []string // Kind/name that must be rendered
		absent  []string // … and must not
		checkFn func(t *testing.T, objs map[string]map[string]any, cfg map[string]any)
	}{
		{
			name: "gateway defaults: StatefulSet of 2, webhook Service, PDB, bundled Redis, certificates, NetworkPolicy",
			want: []string{"StatefulSet/kt-kubetrail", "Service/kt-kubetrail", "Service/kt-kubetrail-headless", "PodDisruptionBudget/kt-kubetrail",
				"Deployment/kt-kubetrail-redis", "Service/kt-kubetrail-redis", "ClusterRole/kt-kubetrail", "ClusterRoleBinding/kt-kubetrail", "ServiceAccount/kt-kubetrail",
				"Secret/kt-kubetrail-tls", "Secret/kt-kubetrail-apiserver-kubeconfig", "Secret/kt-kubetrail-redis", "NetworkPolicy/kt-kubetrail", "NetworkPolicy/kt-kubetrail-redis"},
			absent: []string{"DaemonSet/kt-kubetrail"},
			checkFn: func(t *testing.T, objs map[string]map[string]any, cfg map[string]any) {
				sts := objs["StatefulSet/kt-kubetrail"]
				if r := dig(sts, "spec", "replicas"); r != float64(2) {
					t.Errorf("replicas = %v, want 2", r)
				}
				if n := dig(sts, "spec", "volumeClaimTemplates", 0, "metadata", "name"); n != "state" {
					t.Errorf("no volume claim template for the queue: %v", n)
				}
				if a := dig(cfg, "processors", "k8s_object_link", "id_map", "redis", "addresses", 0); a != "kt-kubetrail-redis.kubetrail.svc:6379" {
					t.Errorf("Redis address %v", a)
				}
				if e := dig(cfg, "receivers", "k8s_audit", "endpoint"); e != "${env:POD_IP}:9880" {
					t.Errorf("webhook endpoint %v", e)
				}
				if sh, idMap := dig(cfg, "receivers", "k8s_audit", "shared_diff_base", "redis"), dig(cfg, "processors", "k8s_object_link", "id_map", "redis"); sh == nil || !reflect.DeepEqual(sh, idMap) {
					t.Errorf("shared diff base %v, want the ID map's Redis %v", sh, idMap)
				}
				if ty, np := dig(objs["Service/kt-kubetrail"], "spec", "type"), dig(objs["Service/kt-kubetrail"], "spec", "ports", 0, "nodePort"); ty != "ClusterIP" || np != nil {
					t.Errorf("webhook Service type %v, nodePort %v; want ClusterIP without a nodePort", ty, np)
				}
				c := dig(sts, "spec", "template", "spec", "containers", 0)
				if img := dig(c, "image"); img != shippedImage+":0.1.0" {
					t.Errorf("image %v", img)
				}
				if u := dig(sts, "spec", "template", "spec", "securityContext", "runAsUser"); u != float64(10001) {
					t.Errorf("gateway pods run as %v, want the image's UID 10001", u)
				}
				if v := envValue(c, "GOMEMLIMIT"); v != "819MiB" {
					t.Errorf("GOMEMLIMIT = %q, want 80%% of the 1Gi limit (819MiB)", v)
				}
			},
		},
		{
			name:   "daemonset: control-plane nodes tail the audit log, webhook off",
			sets:   []string{"mode=daemonset", "daemonset.startAt=beginning"},
			want:   []string{"DaemonSet/kt-kubetrail", "Deployment/kt-kubetrail-redis", "NetworkPolicy/kt-kubetrail-redis", "ClusterRole/kt-kubetrail"},
			absent: []string{"StatefulSet/kt-kubetrail", "Service/kt-kubetrail", "PodDisruptionBudget/kt-kubetrail", "Secret/kt-kubetrail-tls", "NetworkPolicy/kt-kubetrail"},
			checkFn: func(t *testing.T, objs map[string]map[string]any, cfg map[string]any) {
				if e := dig(cfg, "receivers", "k8s_audit", "endpoint"); e != "" {
					t.Errorf("webhook endpoint %v, want off", e)
				}
				if f := dig(cfg, "receivers", "k8s_audit", "files", 0); f != "/var/log/kubernetes/audit/audit.log" {
					t.Errorf("files %v", f)
				}
				if s := dig(cfg, "receivers", "k8s_audit", "storage"); s != "file_storage" {
					t.Errorf("audit file checkpoints in %v, want file_storage", s)
				}
				ds := objs["DaemonSet/kt-kubetrail"]
				spec := dig(ds, "spec", "template", "spec")
				if _, ok := dig(spec, "nodeSelector").(map[string]any)["node-role.kubernetes.io/control-plane"]; !ok {
					t.Errorf("DaemonSet not on control-plane nodes: %v", dig(spec, "nodeSelector"))
				}
				vols := map[string]any{}
				for _, v := range dig(spec, "volumes").([]any) {
					vols[dig(v, "name").(string)] = dig(v, "hostPath", "path")
				}
				if vols["audit-log"] != "/var/log/kubernetes/audit" || vols["state"] != "/var/lib/otelcol-kubetrail" {
					t.Errorf("hostPath volumes %v", vols)
				}
			},
		},
		{
			name:   "gateway with the webhook certificates from an existing Secret",
			sets:   []string{"gateway.tls.existingSecret=mine", "gateway.tls.allowedClientNames={apiserver-a,apiserver-b}"},
			absent: []string{"Secret/kt-kubetrail-tls", "Secret/kt-kubetrail-apiserver-kubeconfig", "Certificate/kt-kubetrail-tls"},
			checkFn: func(t *testing.T, objs map[string]map[string]any, cfg map[string]any) {
				requireWebhookTLS(t, cfg, []any{"apiserver-a", "apiserver-b"})
				if v := tlsVolume(objs["StatefulSet/kt-kubetrail"]); dig(v, "secret", "secretName") != "mine" {
					t.Errorf("tls volume %v, want the Secret mine", v)
				}
			},
		},
		{
			name: "gateway with cert-manager: a self-signed CA issuer, the webhook's and the apiserver's Certificates",
			sets: []string{"gateway.tls.certManager.enabled=true", "gateway.tls.extraServerNames={kubetrail.example,10.96.0.99}"},
			want: []string{"Issuer/kt-kubetrail-selfsigned", "Certificate/kt-kubetrail-ca", "Issuer/kt-kubetrail-ca",
				"Certificate/kt-kubetrail-tls", "Certificate/kt-kubetrail-apiserver-client"},
			absent: []string{"Secret/kt-kubetrail-tls", "Secret/kt-kubetrail-apiserver-kubeconfig"},
			checkFn: func(t *testing.T, objs map[string]map[string]any, cfg map[string]any) {
				requireWebhookTLS(t, cfg, []any{"kube-apiserver-audit"})
				server, client := objs["Certificate/kt-kubetrail-tls"], objs["Certificate/kt-kubetrail-apiserver-client"]
				if n := dig(server, "spec", "secretName"); n != "kt-kubetrail-tls" || dig(tlsVolume(objs["StatefulSet/kt-kubetrail"]), "secret", "secretName") != n {
					t.Errorf("the webhook's Certificate writes %v, the pods mount %v", n, tlsVolume(objs["StatefulSet/kt-kubetrail"]))
				}
				if d := dig(server, "spec", "dnsNames"); !slices.Contains(d.([]any), any("kt-kubetrail.kubetrail.svc")) || !slices.Contains(d.([]any), any("kubetrail.example")) {
					t.Errorf("serving certificate dnsNames %v", d)
				}
				if ip := dig(server, "spec", "ipAddresses", 0); ip != "10.96.0.99" {
					t.Errorf("serving certificate ipAddresses %v", dig(server, "spec", "ipAddresses"))
				}
				if cn := dig(client, "spec", "commonName"); cn != "kube-apiserver-audit" {
					t.Errorf("the apiserver's certificate has CN %v, not the allowed name", cn)
				}
				for _, c := range []map[string]any{server, client} {
					if i := dig(c, "spec", "issuerRef", "name"); i != "kt-kubetrail-ca" {
						t.Errorf("%v issued by %v, want the CA issuer kt-kubetrail-ca (one CA for both)", dig(c, "metadata", "name"), i)
					}
				}
			},
		},
		{
			name:   "gateway in plain HTTP, only with insecurePlainHTTP: no TLS, no certificates",
			sets:   []string{"gateway.tls.insecurePlainHTTP=true", "gateway.networkPolicy.enabled=false"},
			absent: []string{"Secret/kt-kubetrail-tls", "Secret/kt-kubetrail-apiserver-kubeconfig", "NetworkPolicy/kt-kubetrail"},
			checkFn: func(t *testing.T, objs map[string]map[string]any, cfg map[string]any) {
				if tls := dig(cfg, "receivers", "k8s_audit", "tls"); tls != nil {
					t.Errorf("tls %v with insecurePlainHTTP", tls)
				}
				if v := tlsVolume(objs["StatefulSet/kt-kubetrail"]); v != nil {
					t.Errorf("tls volume %v with insecurePlainHTTP", v)
				}
			},
		},
		{
			name:   "external Redis with a password Secret, one replica, events off, config override",
			sets:   []string{"redis.addresses={redis.example:6379}", "redis.passwordSecret.name=r", "redis.passwordSecret.key=pw", "gateway.replicas=1", "events.enabled=false", "config.processors.k8s_object_link.owner_wait=5s", "goMemLimit=500MiB", "otlp.compression=snappy"},
			absent: []string{"Deployment/kt-kubetrail-redis", "NetworkPolicy/kt-kubetrail-redis"},
			checkFn: func(t *testing.T, objs map[string]map[string]any, cfg map[string]any) {
				if p := dig(cfg, "processors", "k8s_object_link", "id_map", "redis", "password"); p != "${env:REDIS_PASSWORD}" {
					t.Errorf("password %v", p)
				}
				if w := dig(cfg, "processors", "k8s_object_link", "owner_wait"); w != "5s" {
					t.Errorf("config override not merged: owner_wait %v", w)
				}
				if c := dig(cfg, "exporters", "otlp_grpc", "compression"); c != "snappy" {
					t.Errorf("otlp.compression not rendered: %v", c)
				}
				if r := dig(cfg, "receivers", "k8s_event_spans"); r != nil {
					t.Errorf("events receiver rendered though disabled")
				}
				c := dig(objs["StatefulSet/kt-kubetrail"], "spec", "template", "spec", "containers", 0)
				if v := envValue(c, "GOMEMLIMIT"); v != "500MiB" {
					t.Errorf("GOMEMLIMIT = %q", v)
				}
			},
		},
		{
			name:   "managed, OTLP logs, events off: the connector alone feeds traces",
			sets:   []string{"mode=managed", shipperFrom, "events.enabled=false", "managed.connector.dedup_window=0", "managed.connector.format=native"},
			want:   []string{"StatefulSet/kt-kubetrail", "Service/kt-kubetrail", "Service/kt-kubetrail-headless", "PodDisruptionBudget/kt-kubetrail"},
			absent: []string{"DaemonSet/kt-kubetrail"},
			checkFn: func(t *testing.T, objs map[string]map[string]any, cfg map[string]any) {
				if got := dig(cfg, "service", "pipelines", "traces", "receivers"); !reflect.DeepEqual(got, []any{"k8s_audit"}) {
					t.Errorf("traces receivers %v, want [k8s_audit]", got)
				}
				if r := dig(cfg, "receivers", "k8s_audit"); r != nil {
					t.Errorf("k8s_audit receiver rendered in mode managed")
				}
				if d := dig(cfg, "connectors", "k8s_audit", "dedup_window"); d != float64(0) {
					t.Errorf("dedup_window %v, want 0", d)
				}
				if sh, idMap := dig(cfg, "connectors", "k8s_audit", "shared_diff_base", "redis"), dig(cfg, "processors", "k8s_object_link", "id_map", "redis"); sh == nil || !reflect.DeepEqual(sh, idMap) {
					t.Errorf("connector's shared diff base %v, want the ID map's Redis %v", sh, idMap)
				}
			},
		},
		{
			name: "redis.sharedDiffBase=false: the ID map alone uses Redis",
			sets: []string{"redis.sharedDiffBase=false"},
			checkFn: func(t *testing.T, objs map[string]map[string]any, cfg map[string]any) {
				if sh := dig(cfg, "receivers", "k8s_audit", "shared_diff_base"); sh != nil || dig(cfg, "processors", "k8s_object_link", "id_map", "redis") == nil {
					t.Errorf("shared_diff_base %v rendered, or the ID map lost its Redis", sh)
				}
			},
		},
		{
			name: "gateway.otlp: an OTLP receiver in the traces pipeline, on the Service, admitted from gateway.otlp.from",
			sets: []string{"gateway.otlp.enabled=true", "gateway.otlp.from[0].namespaceSelector.matchLabels.team=ci"},
			checkFn: func(t *testing.T, objs map[string]map[string]any, cfg map[string]any) {
				if g, h := dig(cfg, "receivers", "otlp", "protocols", "grpc", "endpoint"), dig(cfg, "receivers", "otlp", "protocols", "http", "endpoint"); g != "${env:POD_IP}:4317" || h != "${env:POD_IP}:4318" {
					t.Errorf("otlp receiver endpoints %v, %v", g, h)
				}
				if r := dig(cfg, "service", "pipelines", "traces", "receivers"); !reflect.DeepEqual(r, []any{"k8s_audit", "k8s_event_spans", "otlp"}) {
					t.Errorf("traces pipeline receivers %v: the OTLP spans must pass k8s_object_link", r)
				}
				if p := namedPorts(t, dig(objs["Service/kt-kubetrail"], "spec", "ports"), "port"); p["otlp-grpc"] != 4317 || p["otlp-http"] != 4318 || p["audit"] != 9880 {
					t.Errorf("webhook Service ports %v", p)
				}
				c := dig(objs["StatefulSet/kt-kubetrail"], "spec", "template", "spec", "containers", 0)
				if p := namedPorts(t, dig(c, "ports"), "containerPort"); p["otlp-grpc"] != 4317 || p["otlp-http"] != 4318 {
					t.Errorf("container ports %v", p)
				}
				np := ingressPolicyOf(t, objs, "NetworkPolicy/kt-kubetrail", objs["StatefulSet/kt-kubetrail"])
				var otlpRule any
				for _, rule := range dig(np, "spec", "ingress").([]any) {
					if dig(rule, "ports", 0, "port") == "otlp-grpc" {
						otlpRule = rule
					}
				}
				if got := dig(otlpRule, "from"); !reflect.DeepEqual(got, []any{map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"team": "ci"}}}}) ||
					dig(otlpRule, "ports", 1, "port") != "otlp-http" {
					t.Errorf("NetworkPolicy rule of the OTLP ports: %v", otlpRule)
				}
				notes := renderNotes(t, "", controlPlaneCIDRs, "gateway.otlp.enabled=true", "gateway.otlp.from[0].namespaceSelector.matchLabels.team=ci")
				requireNotesSay(t, notes, "OTEL_EXPORTER_OTLP_ENDPOINT=http://kt-kubetrail.kubetrail.svc:4318", "the NetworkPolicy admits only gateway.otlp.from")
			},
		},
		{
			name:   "one replica, memory ID map, no persistence, NodePort when asked",
			sets:   []string{"gateway.replicas=1", "redis.bundled.enabled=false", "gateway.persistence.enabled=false", "goMemLimit=", "gateway.service.type=NodePort", "gateway.service.nodePort=30988"},
			absent: []string{"Deployment/kt-kubetrail-redis", "Secret/kt-kubetrail-redis"},
			checkFn: func(t *testing.T, objs map[string]map[string]any, cfg map[string]any) {
				if ty, np := dig(objs["Service/kt-kubetrail"], "spec", "type"), dig(objs["Service/kt-kubetrail"], "spec", "ports", 0, "nodePort"); ty != "NodePort" || np != float64(30988) {
					t.Errorf("webhook Service type %v, nodePort %v; want the NodePort 30988 asked for", ty, np)
				}
				if p := dig(cfg, "processors", "k8s_object_link", "id_map"); p != nil {
					t.Errorf("id_map %v without Redis", p)
				}
				if sh := dig(cfg, "receivers", "k8s_audit", "shared_diff_base"); sh != nil {
					t.Errorf("shared_diff_base %v without Redis", sh)
				}
				if m := dig(cfg, "processors", "k8s_object_link", "id_map"); m != nil {
					t.Errorf("id_map %v, want the memory default", m)
				}
				c := dig(objs["StatefulSet/kt-kubetrail"], "spec", "template", "spec", "containers", 0)
				if v := envValue(c, "GOMEMLIMIT"); v != "" {
					t.Errorf("GOMEMLIMIT = %q, want unset", v)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := renderChart(t, append([]string{"clusterName=chart-test", controlPlaneCIDRs}, tc.sets...)...)
			for _, k := range tc.want {
				if objs[k] == nil {
					t.Errorf("%s not rendered (have %v)", k, keys(objs))
				}
			}
			for _, k := range tc.absent {
				if objs[k] != nil {
					t.Errorf("%s rendered", k)
				}
			}
			cfg, path := collectorConfig(t, objs)
			requireDeliveryGuarantees(t, cfg)
			validate(t, path, "POD_IP=127.0.0.1", "REDIS_PASSWORD=x")
			if tc.checkFn != nil {
				tc.checkFn(t, objs, cfg)
			}
		})
	}
}

// requireDeliveryGuarantees: the parts of the shipped manifest's config that make a 200 from the
// webhook a promise are in every rendering, unchanged.
func requireDeliveryGuarantees(t *testing.T, cfg map[string]any) {
	t.Helper()
	var shipped map[string]any
	if err := yaml.Unmarshal([]byte(clusterConfig(t)), &shipped); err != nil {
		t.Fatal(err)
	}
	for _, path := range [][]any{
		{"exporters", "otlp_grpc", "sending_queue"},
		{"exporters", "otlp_grpc", "retry_on_failure"},
		{"extensions", "file_storage"},
		{"extensions", "file_storage/queue"},
		{"processors", "memory_limiter"},
		{"processors", "k8s_object_link", "storage"},
		{"service", "pipelines", "traces", "processors"},
	} {
		if got, want := dig(cfg, path...), dig(shipped, path...); !reflect.DeepEqual(got, want) {
			t.Errorf("%v differs from distribution/kubernetes/kubetrail.yaml:\n chart:   %v\n shipped: %v", path, got, want)
		}
	}
	for _, p := range dig(cfg, "service", "pipelines", "traces", "processors").([]any) {
		if strings.HasPrefix(p.(string), "batch") {
			t.Errorf("a batch processor in the pipeline: it acknowledges spans it may lose")
		}
	}
}

func envValue(container any, name string) string {
	env, _ := dig(container, "env").([]any)
	for _, e := range env {
		if dig(e, "name") == name {
			v, _ := dig(e, "value").(string)
			return v
		}
	}
	return ""
}

// TestChartRefusesBadValues: values the chart cannot honour fail the rendering with a message
// naming the key, instead of installing something that silently differs.
func TestChartRefusesBadValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		sets []string
		want string
	}{
		{"no cluster name", nil, "clusterName is required"},
		{"cluster name with a slash", []string{"clusterName=prod/eu"}, "clusterName is required"},
		{"misspelled key", []string{"clusterName=c", "gateway.replicsa=3"}, "additional properties 'replicsa' not allowed"},
		{"unknown mode", []string{"clusterName=c", "mode=deployment"}, "mode"},
		{"replicas without a shared ID map", []string{"clusterName=c", "redis.bundled.enabled=false"}, "gateway.replicas > 1 needs a shared ID map"},
		{"no control-plane CIDRs for the NetworkPolicy", []string{"clusterName=c"}, "gateway.networkPolicy.controlPlaneCIDRs is required"},
		{"a control-plane address that is no CIDR", []string{"clusterName=c", "gateway.networkPolicy.controlPlaneCIDRs={10.0.0.1}"}, "controlPlaneCIDRs/0"},
		{"TLS switched off by the old key", []string{"clusterName=c", controlPlaneCIDRs, "gateway.tls.enabled=false"}, "additional properties 'enabled' not allowed"},
		{"a client CA without allowed names", []string{"clusterName=c", controlPlaneCIDRs, "gateway.tls.allowedClientNames={}"}, "allowedClientNames"},
		{"two sources of certificates", []string{"clusterName=c", controlPlaneCIDRs, "gateway.tls.existingSecret=s", "gateway.tls.certManager.enabled=true"}, "choose one source"},
		{"TLS to the bundled Redis", []string{"clusterName=c", controlPlaneCIDRs, "redis.tls.enabled=true"}, "the bundled Redis has no TLS"},
		{"Redis address without a port", []string{"clusterName=c", "redis.addresses={redis}"}, "redis/addresses/0"},
		{"an export compression the exporter does not know", []string{"clusterName=c", controlPlaneCIDRs, "otlp.compression=lz4"}, "otlp/compression"},
		{"unreadable memory limit for GOMEMLIMIT auto", []string{"clusterName=c", "resources.limits.memory=1G"}, "goMemLimit auto"},
		{"unknown key under managed", []string{"clusterName=c", "mode=managed", "managed.recievers.otlp.protocols.grpc.endpoint=x"}, "additional properties 'recievers' not allowed"},
		{"unknown connector key", []string{"clusterName=c", "mode=managed", "managed.connector.formt=aks"}, "additional properties 'formt' not allowed"},
		{"unknown connector format", []string{"clusterName=c", "mode=managed", "managed.connector.format=eks"}, "managed/connector/format"},
		{"connector cluster other than clusterName", []string{"clusterName=c", "mode=managed", "managed.connector.cluster=d"}, "managed.connector.cluster: set by the chart"},
		{"connector window other than window", []string{"clusterName=c", "mode=managed", "managed.connector.window=1h"}, "managed.connector.window: set by the chart"},
		{"connector cluster read from the records", []string{"clusterName=c", "mode=managed", "managed.connector.cluster_attribute=k8s.cluster.name"}, "managed.connector.cluster_attribute: a release traces one cluster"},
		{"k8s_audit as a log receiver", []string{"clusterName=c", "mode=managed", "managed.receivers.k8s_audit.endpoint=x"}, "managed.receivers.k8s_audit: not a log receiver"},
		{"receiver config that is no map", []string{"clusterName=c", "mode=managed", "managed.receivers.otlp=x"}, "managed/receivers/otlp"},
		{"Service port name a container cannot carry", []string{"clusterName=c", "mode=managed", "managed.service.ports[0].name=otlp-grpc-receiver", "managed.service.ports[0].port=4317"}, "managed/service/ports/0/name"},
		{"Service port taken by the metrics", []string{"clusterName=c", "mode=managed", "managed.service.ports[0].name=prom", "managed.service.ports[0].port=8888"}, "managed.service.ports: prom/8888 is taken"},
		{"webhook TLS in managed mode", []string{"clusterName=c", "mode=managed", "gateway.tls.existingSecret=s"}, "gateway.tls is the audit webhook's"},
		{"gateway.otlp outside mode gateway", []string{"clusterName=c", "mode=daemonset", "gateway.otlp.enabled=true"}, "gateway.otlp: mode gateway only"},
		{"gateway.otlp without peers for the NetworkPolicy", []string{"clusterName=c", controlPlaneCIDRs, "gateway.otlp.enabled=true"}, "gateway.otlp.from is required"},
		{"managed replicas without a shared ID map", []string{"clusterName=c", "mode=managed", "redis.bundled.enabled=false"}, "gateway.replicas > 1 needs a shared ID map"},
	} {
		t.Run(tc.name, func(t *testing.T) { requireRenderingRefused(t, tc.sets, tc.want) })
	}
}

// requireRenderingRefused checks that rendering the chart with sets fails with an error that says want.
func requireRenderingRefused(t *testing.T, sets []string, want string) {
	t.Helper()
	args := []string{"template", "kt", chartDir, "--set", backend}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	_, stderr, err := helm(t, args...)
	if err == nil {
		t.Fatalf("helm template %v succeeded", sets)
	}
	if !strings.Contains(stderr, want) {
		t.Errorf("error does not say %q:\n%s", want, stderr)
	}
}

// TestManifestsNameTheImage: the chart and the shipped manifest run the image `make image` builds,
// tagged with the distribution's version (builder-config.yaml dist.version).
// shippedImage is the image every release publishes and `make image` names: the chart's and the
// manifest's default.
const shippedImage = "ghcr.io/kubetrail/otelcol-kubetrail"

func TestManifestsNameTheImage(t *testing.T) {
	var builder struct {
		Dist struct {
			Version string `json:"version"`
		} `json:"dist"`
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	for path, into := range map[string]any{
		filepath.Join(root, "builder-config.yaml"): &builder,
		filepath.Join(chartDir, "Chart.yaml"):      &chart,
	} {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(raw, into); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	want := shippedImage + ":" + builder.Dist.Version
	if chart.AppVersion != builder.Dist.Version {
		t.Errorf("Chart.yaml appVersion %q, the distribution is %q", chart.AppVersion, builder.Dist.Version)
	}
	for _, mode := range []string{"gateway", "daemonset", "managed"} {
		objs := renderChart(t, "clusterName=c", "mode="+mode, controlPlaneCIDRs, shipperFrom)
		for k, obj := range objs {
			if img := dig(obj, "spec", "template", "spec", "containers", 0, "image"); strings.HasPrefix(k, "StatefulSet/") || strings.HasPrefix(k, "DaemonSet/") {
				if img != want {
					t.Errorf("%s (%s) runs %v, want %s", k, mode, img, want)
				}
			}
		}
	}
	raw, err := os.ReadFile(filepath.Join(root, "distribution", "kubernetes", "kubetrail.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "image: "+want+"\n") {
		t.Errorf("distribution/kubernetes/kubetrail.yaml does not run %s", want)
	}
}

// managedValuesFiles are the chart's examples/values-*.yaml, one per way the audit logs arrive in
// mode managed; the test fails if one of the documented files is missing.
func managedValuesFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "examples", "values-*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range files {
		have[filepath.Base(f)] = true
	}
	for _, name := range []string{"values-otlp.yaml", "values-eks.yaml", "values-aks.yaml", "values-gke.yaml", "values-kafka.yaml"} {
		if !have[name] {
			t.Errorf("examples/%s is missing (have %v)", name, files)
		}
	}
	return files
}

// managedValues is what a values file sets for mode managed, as far as the test compares it.
type managedValues struct {
	Mode  string `json:"mode"`
	Image struct {
		Repository string `json:"repository"`
	} `json:"image"`
	Managed struct {
		Receivers map[string]any `json:"receivers"`
		Connector map[string]any `json:"connector"`
		Service   struct {
			Ports *[]struct {
				Name string  `json:"name"`
				Port float64 `json:"port"`
			} `json:"ports"`
		} `json:"service"`
	} `json:"managed"`
}

// TestChartManagedValuesFiles renders the chart with each examples/values-*.yaml: a gateway
// StatefulSet without the k8s_audit receiver or the webhook port, whose log receivers feed
// logs/audit into the k8s_audit connector, the connector feeds traces, and the Service exposes
// the file's ports. A rendering whose receivers are all in the binary (values-otlp.yaml,
// values-kafka.yaml) runs the shipped image and goes through `otelcol-kubetrail validate`; the
// others name cloud receivers (awsfirehose, azure_event_hub, googlecloudpubsub) that this build
// does not contain, because they cannot be built from the module mirror (builder-config.yaml),
// so validate would refuse them as unknown types. They are checked structurally here, and their
// connector keys by the schema and the connector's own test of distribution/examples/managed/
// (TestManagedExamplesConfigureTheConnector).
func TestChartManagedValuesFiles(t *testing.T) {
	requireBinary(t)
	built := builtComponents(t)["receivers"]
	for _, file := range managedValuesFiles(t) {
		t.Run(filepath.Base(file), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var vals managedValues
			if err := yaml.Unmarshal(raw, &vals); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if vals.Mode != "managed" {
				t.Fatalf("mode %q, want managed", vals.Mode)
			}
			wantReceivers := vals.Managed.Receivers
			if len(wantReceivers) == 0 {
				// The default OTLP receiver, with TLS and a client certificate required.
				wantReceivers = map[string]any{"otlp": map[string]any{"protocols": map[string]any{
					"grpc": map[string]any{"endpoint": "${env:POD_IP}:4317", "tls": receiverTLS},
					"http": map[string]any{"endpoint": "${env:POD_IP}:4318", "tls": receiverTLS},
				}}}
			}
			wantPorts := map[string]float64{"otlp-grpc": 4317, "otlp-http": 4318}
			if p := vals.Managed.Service.Ports; p != nil {
				wantPorts = map[string]float64{}
				for _, port := range *p {
					wantPorts[port.Name] = port.Port
				}
			}
			shipped := true // every receiver is in the binary
			for id := range wantReceivers {
				typ, _, _ := strings.Cut(id, "/")
				shipped = shipped && built[typ]
			}

			objs := renderChartWith(t, []string{file}, "clusterName=chart-test")
			for _, k := range []string{"StatefulSet/kt-kubetrail", "Service/kt-kubetrail-headless", "PodDisruptionBudget/kt-kubetrail", "ConfigMap/kt-kubetrail"} {
				if objs[k] == nil {
					t.Errorf("%s not rendered (have %v)", k, keys(objs))
				}
			}
			if objs["DaemonSet/kt-kubetrail"] != nil || objs["Secret/kt-kubetrail-tls"] != nil {
				t.Errorf("DaemonSet or webhook TLS Secret rendered in mode managed")
			}
			cfg, path := collectorConfig(t, objs)
			requireDeliveryGuarantees(t, cfg)

			// No webhook: no k8s_audit receiver, no port 9880 anywhere.
			if r := dig(cfg, "receivers", "k8s_audit"); r != nil {
				t.Errorf("k8s_audit receiver rendered in mode managed: %v", r)
			}
			rendered := map[string]any{}
			for k, v := range dig(cfg, "receivers").(map[string]any) {
				if k != "k8s_event_spans" {
					rendered[k] = v
				}
			}
			if !reflect.DeepEqual(rendered, wantReceivers) {
				t.Errorf("log receivers\n got  %v\n want %v", rendered, wantReceivers)
			}
			container := dig(objs["StatefulSet/kt-kubetrail"], "spec", "template", "spec", "containers", 0)
			containerPorts := namedPorts(t, dig(container, "ports"), "containerPort")
			for _, svc := range []string{"Service/kt-kubetrail", "Service/kt-kubetrail-headless"} {
				for name, port := range namedPorts(t, dig(objs[svc], "spec", "ports"), "port") {
					if name == "audit" || port == 9880 {
						t.Errorf("%s exposes the webhook port %s/%v", svc, name, port)
					}
				}
			}
			if _, ok := containerPorts["audit"]; ok {
				t.Errorf("the container declares the webhook port: %v", containerPorts)
			}

			// The connector: cluster and window are the chart's, the rest the file's.
			conn, _ := dig(cfg, "connectors", "k8s_audit").(map[string]any)
			if conn["cluster"] != "chart-test" || conn["window"] != "30m" {
				t.Errorf("connector cluster %v, window %v; want chart-test, 30m", conn["cluster"], conn["window"])
			}
			for k, v := range vals.Managed.Connector {
				if !reflect.DeepEqual(conn[k], v) {
					t.Errorf("connector %s = %v, the file sets %v", k, conn[k], v)
				}
			}

			// The pipelines: receivers -> logs/audit -> k8s_audit -> traces.
			var names []any
			for k := range wantReceivers {
				names = append(names, k)
			}
			slices.SortFunc(names, func(a, b any) int { return strings.Compare(a.(string), b.(string)) })
			logs := dig(cfg, "service", "pipelines", "logs/audit")
			if got := dig(logs, "receivers"); !reflect.DeepEqual(got, names) {
				t.Errorf("logs/audit receivers %v, want %v", got, names)
			}
			if got := dig(logs, "exporters"); !reflect.DeepEqual(got, []any{"k8s_audit"}) {
				t.Errorf("logs/audit exporters %v, want [k8s_audit]", got)
			}
			if got := dig(cfg, "service", "pipelines", "traces", "receivers"); !reflect.DeepEqual(got, []any{"k8s_audit", "k8s_event_spans"}) {
				t.Errorf("traces receivers %v, want [k8s_audit k8s_event_spans]", got)
			}

			// The Service exposes the listed ports, and the container declares them; none listed, no Service.
			svcPorts := namedPorts(t, dig(objs["Service/kt-kubetrail"], "spec", "ports"), "port")
			if len(wantPorts) == 0 {
				if objs["Service/kt-kubetrail"] != nil {
					t.Errorf("a Service rendered without ports listed: %v", svcPorts)
				}
			} else if !reflect.DeepEqual(svcPorts, wantPorts) {
				t.Errorf("Service ports %v, want %v", svcPorts, wantPorts)
			}
			for name, port := range wantPorts {
				if containerPorts[name] != port {
					t.Errorf("container port %s = %v, want %v", name, containerPorts[name], port)
				}
			}

			// The image: the shipped one only where it has the receivers, and the file says so.
			header := string(raw[:bytes.Index(raw, []byte("\nmode:"))])
			image := dig(container, "image").(string)
			if shipped {
				if image != shippedImage+":0.1.0" || !strings.Contains(header, "shipped otelcol-kubetrail image") {
					t.Errorf("%v: the shipped image (%s), and the header says so", names, image)
				}
				validate(t, path, "POD_IP=127.0.0.1")
			} else {
				if strings.HasPrefix(image, shippedImage+":") || vals.Image.Repository == "" {
					t.Errorf("image %s: the shipped image has none of %v", image, names)
				}
				for _, n := range names {
					module := "receiver/" + strings.ReplaceAll(n.(string), "_", "") + "receiver" // azure_event_hub: azureeventhubreceiver
					if !strings.Contains(header, module) || !strings.Contains(header, "IN THE IMAGE") || !strings.Contains(header, "builder-config.yaml") {
						t.Errorf("the header does not say that the %s receiver must be in the image and how:\n%s", n, header)
					}
				}
			}

			notes := renderNotes(t, file)
			requireNotesSay(t, notes, append([]string{"(managed mode)", "No audit webhook"}, func() (w []string) {
				for name, port := range wantPorts {
					w = append(w, fmt.Sprintf("%s: kt-kubetrail.kubetrail.svc:%v", name, port))
				}
				if shipped {
					return append(w, "in the shipped otelcol-kubetrail image")
				}
				return append(w, "must be in the image "+image)
			}()...)...)
		})
	}
}

// namedPorts maps a list of ports by name to the value of key (port, containerPort).
func namedPorts(t *testing.T, list any, key string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	l, _ := list.([]any)
	for _, p := range l {
		name, _ := dig(p, "name").(string)
		port, _ := dig(p, key).(float64)
		if name == "health" || name == "metrics" {
			continue
		}
		out[name] = port
	}
	return out
}

// renderNotes renders the chart's NOTES.txt with a values file ("": none) and --set flags.
// `helm template` leaves the notes out and `helm install --dry-run` wants a reachable cluster, so
// a copy of the chart carries the notes as a plain file and a template that renders it with tpl
// into a ConfigMap.
func renderNotes(t *testing.T, valuesFile string, sets ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "kubetrail")
	if err := os.CopyFS(dir, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "templates", "NOTES.txt"), filepath.Join(dir, "notes.txt")); err != nil {
		t.Fatal(err)
	}
	tmpl := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\ndata:\n  notes: {{ tpl (.Files.Get \"notes.txt\") . | toJson }}\n"
	if err := os.WriteFile(filepath.Join(dir, "templates", "zz-notes.yaml"), []byte(tmpl), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"template", "kt", dir, "--namespace", "kubetrail", "--set", backend, "--set", "clusterName=chart-test", "--show-only", "templates/zz-notes.yaml"}
	if valuesFile != "" {
		args = append(args, "--values", valuesFile)
	}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	out, stderr, err := helm(t, args...)
	if err != nil {
		t.Fatalf("rendering the notes with %s: %v\n%s", valuesFile, err, stderr)
	}
	var cm map[string]any
	if err := yaml.Unmarshal([]byte(out), &cm); err != nil {
		t.Fatal(err)
	}
	notes, _ := dig(cm, "data", "notes").(string)
	return notes
}

// TestChartPackageShipsTheValuesFiles: `helm package` puts examples/ (and dashboards/) into the chart archive
// (.helmignore keeps them), so a pulled chart has the values files its README names.
func TestChartPackageShipsTheValuesFiles(t *testing.T) {
	dir := t.TempDir()
	if out, stderr, err := helm(t, "package", chartDir, "--destination", dir); err != nil {
		t.Fatalf("helm package: %v\n%s%s", err, out, stderr)
	}
	archives, _ := filepath.Glob(filepath.Join(dir, "kubetrail-*.tgz"))
	if len(archives) != 1 {
		t.Fatalf("helm package wrote %v", archives)
	}
	f, err := os.Open(archives[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	packaged := map[string]bool{}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		packaged[h.Name] = true
	}
	for _, f := range managedValuesFiles(t) {
		if name := "kubetrail/examples/" + filepath.Base(f); !packaged[name] {
			t.Errorf("%s is not in the packaged chart (%v)", name, keys(packaged))
		}
	}
	// The dashboard the ConfigMap carries, also for import by hand.
	if name := "kubetrail/dashboards/kubetrail.json"; !packaged[name] {
		t.Errorf("%s is not in the packaged chart (%v)", name, keys(packaged))
	}
}

// requireWebhookTLS: the rendered k8s_audit receiver serves HTTPS with the mounted certificate and
// requires a client certificate signed by the mounted CA with one of names.
func requireWebhookTLS(t *testing.T, cfg map[string]any, names []any) {
	t.Helper()
	audit := dig(cfg, "receivers", "k8s_audit")
	for key, want := range map[string]string{
		"cert_file":      "/etc/otelcol-kubetrail-tls/tls.crt",
		"key_file":       "/etc/otelcol-kubetrail-tls/tls.key",
		"client_ca_file": "/etc/otelcol-kubetrail-tls/ca.crt",
	} {
		if got := dig(audit, "tls", key); got != want {
			t.Errorf("k8s_audit tls.%s = %v, want %s", key, got, want)
		}
	}
	if got := dig(audit, "allowed_client_names"); !reflect.DeepEqual(got, names) {
		t.Errorf("k8s_audit allowed_client_names = %v, want %v", got, names)
	}
}

// checkTLSMount checks that the pods mount only tls.crt, tls.key and ca.crt of the TLS Secret
// volume v (not the CA key), at /etc/otelcol-kubetrail-tls in the collector container.
func checkTLSMount(t *testing.T, v, collector any) {
	t.Helper()
	var mounted []string
	for _, item := range dig(v, "secret", "items").([]any) {
		mounted = append(mounted, dig(item, "key").(string))
	}
	if slices.Sort(mounted); !reflect.DeepEqual(mounted, []string{"ca.crt", "tls.crt", "tls.key"}) {
		t.Errorf("the pods mount %v of the TLS Secret, want ca.crt, tls.crt, tls.key (not the CA key)", mounted)
	}
	var mountPath any
	for _, m := range dig(collector, "volumeMounts").([]any) {
		if dig(m, "name") == "tls" {
			mountPath = dig(m, "mountPath")
		}
	}
	if mountPath != "/etc/otelcol-kubetrail-tls" {
		t.Errorf("tls volume mounted at %v", mountPath)
	}
}

// tlsVolume is the webhook certificate's volume of a workload (nil without one).
func tlsVolume(workload map[string]any) any {
	vols, _ := dig(workload, "spec", "template", "spec", "volumes").([]any)
	for _, v := range vols {
		if dig(v, "name") == "tls" {
			return v
		}
	}
	return nil
}

// secretData is a rendered Secret's data key, decoded.
func secretData(t *testing.T, secret map[string]any, key string) []byte {
	t.Helper()
	enc, _ := dig(secret, "data", key).(string)
	b, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || len(b) == 0 {
		t.Fatalf("Secret %v has no %s (%v)", dig(secret, "metadata", "name"), key, err)
	}
	return b
}

// TestChartSecureByDefault: a gateway installed with the default values (and the required
// control-plane CIDRs) authenticates the apiserver and nobody else can reach or write what it
// trusts: HTTPS with a required client certificate whose name is checked, certificates and the
// apiserver's kubeconfig generated by the chart and matching each other, a ClusterIP Service (no
// NodePort), a NetworkPolicy admitting only the control plane to the webhook port, a Redis that
// requires a generated password the collector is given.
func TestChartSecureByDefault(t *testing.T) {
	objs := renderChart(t, "clusterName=chart-test", controlPlaneCIDRs)
	cfg, _ := collectorConfig(t, objs)
	sts := objs["StatefulSet/kt-kubetrail"]
	collector := dig(sts, "spec", "template", "spec", "containers", 0)

	t.Run("webhook TLS with a client CA and allowed names", func(t *testing.T) {
		requireWebhookTLS(t, cfg, []any{"kube-apiserver-audit"})
		v := tlsVolume(sts)
		if n := dig(v, "secret", "secretName"); n != "kt-kubetrail-tls" {
			t.Fatalf("tls volume %v, want the Secret kt-kubetrail-tls", v)
		}
		checkTLSMount(t, v, collector)
	})

	t.Run("no NodePort", func(t *testing.T) {
		for k, obj := range objs {
			if !strings.HasPrefix(k, "Service/") {
				continue
			}
			if ty := dig(obj, "spec", "type"); ty == "NodePort" || ty == "LoadBalancer" {
				t.Errorf("%s is of type %v", k, ty)
			}
			for _, p := range dig(obj, "spec", "ports").([]any) {
				if np := dig(p, "nodePort"); np != nil {
					t.Errorf("%s has nodePort %v", k, np)
				}
			}
		}
		if ty := dig(objs["Service/kt-kubetrail"], "spec", "type"); ty != "ClusterIP" {
			t.Errorf("webhook Service type %v, want ClusterIP", ty)
		}
	})

	t.Run("NetworkPolicy: the webhook port from the control plane only", func(t *testing.T) {
		np := ingressPolicyOf(t, objs, "NetworkPolicy/kt-kubetrail", sts)
		from := map[any][]any{} // port -> peers
		for _, rule := range dig(np, "spec", "ingress").([]any) {
			ports, _ := dig(rule, "ports").([]any)
			peers, _ := dig(rule, "from").([]any)
			if len(ports) == 0 || len(peers) == 0 {
				t.Errorf("an ingress rule open to every port or every peer: %v", rule)
			}
			for _, p := range ports {
				from[dig(p, "port")] = append(from[dig(p, "port")], peers...)
			}
		}
		if want := []any{map[string]any{"ipBlock": map[string]any{"cidr": "10.0.0.0/24"}}}; !reflect.DeepEqual(from["audit"], want) {
			t.Errorf("the webhook port admits %v, want only %v", from["audit"], want)
		}
		if want := []any{map[string]any{"namespaceSelector": map[string]any{}}}; !reflect.DeepEqual(from["metrics"], want) {
			t.Errorf("the metrics port admits %v, want the cluster's pods", from["metrics"])
		}
		if len(from) != 2 {
			t.Errorf("ports admitted: %v, want audit and metrics", from)
		}
		ports := namedPorts(t, dig(collector, "ports"), "containerPort")
		if ports["audit"] != 9880 {
			t.Errorf("the policy's port name audit is %v on the container", ports["audit"])
		}
	})

	t.Run("bundled Redis with a generated password", func(t *testing.T) {
		secret := objs["Secret/kt-kubetrail-redis"]
		if pw := secretData(t, secret, "password"); len(pw) < 32 {
			t.Errorf("generated Redis password of %d characters", len(pw))
		}
		ref := map[string]any{"secretKeyRef": map[string]any{"name": "kt-kubetrail-redis", "key": "password"}}
		redis := dig(objs["Deployment/kt-kubetrail-redis"], "spec", "template", "spec", "containers", 0)
		args, _ := dig(redis, "args").([]any)
		if i := slices.Index(args, any("--requirepass")); i < 0 || i+1 >= len(args) || args[i+1] != "$(REDIS_PASSWORD)" {
			t.Errorf("Redis args %v, want --requirepass $(REDIS_PASSWORD)", args)
		}
		for name, c := range map[string]any{"Redis": redis, "collector": collector} {
			if got := envFrom(c, "REDIS_PASSWORD"); !reflect.DeepEqual(got, ref) {
				t.Errorf("%s REDIS_PASSWORD from %v, want %v", name, got, ref)
			}
		}
		if p := dig(cfg, "processors", "k8s_object_link", "id_map", "redis", "password"); p != "${env:REDIS_PASSWORD}" {
			t.Errorf("id_map redis password %v", p)
		}
	})

	t.Run("NetworkPolicy: the bundled Redis from the collector pods only", func(t *testing.T) {
		redis := objs["Deployment/kt-kubetrail-redis"]
		np := ingressPolicyOf(t, objs, "NetworkPolicy/kt-kubetrail-redis", redis)
		rules, _ := dig(np, "spec", "ingress").([]any)
		want := []any{map[string]any{
			"ports": []any{map[string]any{"protocol": "TCP", "port": "redis"}},
			"from":  []any{map[string]any{"podSelector": map[string]any{"matchLabels": dig(sts, "spec", "selector", "matchLabels")}}},
		}}
		if !reflect.DeepEqual(rules, want) {
			t.Errorf("ingress %v, want only the collector pods to the redis port: %v", rules, want)
		}
		ports := namedPorts(t, dig(redis, "spec", "template", "spec", "containers", 0, "ports"), "containerPort")
		if ports["redis"] != 6379 {
			t.Errorf("the policy's port name redis is %v on the Redis container", ports["redis"])
		}
	})

	t.Run("the apiserver's kubeconfig matches the generated certificates", func(t *testing.T) {
		tlsSecret, kcSecret := objs["Secret/kt-kubetrail-tls"], objs["Secret/kt-kubetrail-apiserver-kubeconfig"]
		caPEM := secretData(t, tlsSecret, "ca.crt")
		kc := parseKubeconfig(t, secretData(t, kcSecret, "audit-webhook-kubeconfig.yaml"))
		if kc.server != "https://kt-kubetrail.kubetrail.svc:9880/audit/chart-test" || kc.serverName != "kt-kubetrail.kubetrail.svc" {
			t.Errorf("kubeconfig server %q, tls-server-name %q", kc.server, kc.serverName)
		}
		if !bytes.Equal(kc.caPEM, caPEM) {
			t.Errorf("the kubeconfig's CA is not the ca.crt the webhook checks clients with")
		}
		if !bytes.Equal(kc.certPEM, secretData(t, kcSecret, "client.crt")) || !bytes.Equal(kc.keyPEM, secretData(t, kcSecret, "client.key")) {
			t.Errorf("the kubeconfig's client certificate or key differs from client.crt/client.key, which an upgrade keeps")
		}
		verifyCertificates(t, caPEM, secretData(t, tlsSecret, "tls.crt"), secretData(t, tlsSecret, "tls.key"),
			kc.certPEM, kc.keyPEM, "kt-kubetrail.kubetrail.svc", "kube-apiserver-audit")
	})

	t.Run("notes: where the kubeconfig is, no warning", func(t *testing.T) {
		notes := renderNotes(t, "", controlPlaneCIDRs)
		requireNotesSay(t, notes,
			"kubectl -n kubetrail get secret kt-kubetrail-apiserver-kubeconfig",
			`jsonpath='{.data.audit-webhook-kubeconfig\.yaml}'`,
			"The audit webhook: https://kt-kubetrail.kubetrail.svc:9880/audit/chart-test",
			"admits the webhook port only from 10.0.0.0/24",
			"password from the Secret kt-kubetrail-redis",
		)
		if strings.Contains(notes, "WARNING") {
			t.Errorf("the default install's notes warn:\n%s", notes)
		}
	})
}

// requireNotesSay checks that the rendered install notes say each of wants.
func requireNotesSay(t *testing.T, notes string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(notes, want) {
			t.Errorf("the notes do not say %q:\n%s", want, notes)
		}
	}
}

// envFrom is the valueFrom of a container's environment variable.
func envFrom(container any, name string) any {
	env, _ := dig(container, "env").([]any)
	for _, e := range env {
		if dig(e, "name") == name {
			return dig(e, "valueFrom")
		}
	}
	return nil
}

// ingressPolicyOf returns the rendered NetworkPolicy name after checking that it is an ingress
// policy selecting the pods of workload (its spec.selector).
func ingressPolicyOf(t *testing.T, objs map[string]map[string]any, name string, workload map[string]any) map[string]any {
	t.Helper()
	np := objs[name]
	if np == nil {
		t.Fatalf("no %s among %v", name, keys(objs))
	}
	if got, want := dig(np, "spec", "podSelector", "matchLabels"), dig(workload, "spec", "selector", "matchLabels"); !reflect.DeepEqual(got, want) {
		t.Errorf("%s selects %v, the pods are %v", name, got, want)
	}
	if got := dig(np, "spec", "policyTypes"); !reflect.DeepEqual(got, []any{"Ingress"}) {
		t.Errorf("%s policyTypes %v", name, got)
	}
	return np
}

// TestChartPlainHTTPOnlyWhenAsked: plain HTTP takes gateway.tls.insecurePlainHTTP, and the notes
// say loudly what it exposes; every other way to configure the gateway keeps TLS on.
func TestChartPlainHTTPOnlyWhenAsked(t *testing.T) {
	notes := renderNotes(t, "", "gateway.tls.insecurePlainHTTP=true", "gateway.networkPolicy.enabled=false",
		"gateway.service.type=NodePort", "gateway.service.nodePort=30988")
	requireNotesSay(t, notes, "WARNING: gateway.tls.insecurePlainHTTP=true", "PLAIN HTTP", "server: http://127.0.0.1:30988/audit/chart-test",
		"WARNING: no NetworkPolicy")
	for _, sets := range [][]string{
		nil,
		{"gateway.tls.existingSecret=s"},
		{"gateway.tls.certManager.enabled=true"},
		{"gateway.networkPolicy.enabled=false"},
		{"gateway.service.type=NodePort"},
		{"config.receivers.k8s_audit.endpoint=0.0.0.0:9880"},
	} {
		objs := renderChart(t, append([]string{"clusterName=c", controlPlaneCIDRs}, sets...)...)
		cfg, _ := collectorConfig(t, objs)
		if dig(cfg, "receivers", "k8s_audit", "tls", "client_ca_file") == nil || dig(cfg, "receivers", "k8s_audit", "allowed_client_names") == nil {
			t.Errorf("%v: webhook without client certificates: %v", sets, dig(cfg, "receivers", "k8s_audit"))
		}
	}
}

// TestChartRedisTLS: TLS to an external Redis verifies the server with the given CA and name.
func TestChartRedisTLS(t *testing.T) {
	objs := renderChart(t, "clusterName=c", controlPlaneCIDRs, "redis.addresses={redis.example:6380}", "redis.passwordSecret.name=r",
		"redis.passwordSecret.key=pw", "redis.tls.enabled=true", "redis.tls.caSecret.name=redis-ca", "redis.tls.caSecret.key=ca.pem",
		"redis.tls.serverName=redis.example")
	cfg, _ := collectorConfig(t, objs)
	want := map[string]any{"insecure": false, "ca_file": "/etc/otelcol-kubetrail-redis-tls/ca.crt", "server_name_override": "redis.example"}
	if got := dig(cfg, "processors", "k8s_object_link", "id_map", "redis", "tls"); !reflect.DeepEqual(got, want) {
		t.Errorf("id_map redis tls %v, want %v", got, want)
	}
	spec := dig(objs["StatefulSet/kt-kubetrail"], "spec", "template", "spec")
	var volume, mount any
	for _, v := range dig(spec, "volumes").([]any) {
		if dig(v, "name") == "redis-tls" {
			volume = v
		}
	}
	for _, m := range dig(spec, "containers", 0, "volumeMounts").([]any) {
		if dig(m, "name") == "redis-tls" {
			mount = dig(m, "mountPath")
		}
	}
	if dig(volume, "secret", "secretName") != "redis-ca" || dig(volume, "secret", "items", 0, "key") != "ca.pem" ||
		dig(volume, "secret", "items", 0, "path") != "ca.crt" || mount != "/etc/otelcol-kubetrail-redis-tls" {
		t.Errorf("redis-tls volume %v mounted at %v", volume, mount)
	}
	if objs["Secret/kt-kubetrail-redis"] != nil || objs["Deployment/kt-kubetrail-redis"] != nil {
		t.Errorf("bundled Redis rendered beside redis.addresses")
	}
}

// renderUpgrade renders the chart as `helm upgrade` would with live objects in the cluster: a
// copy of the chart whose one lookup (kubetrail.lookup) reads them, by "Kind/name", from files.
func renderUpgrade(t *testing.T, live map[string]map[string]any, sets ...string) map[string]map[string]any {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "kubetrail")
	if err := os.CopyFS(dir, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	helpers := filepath.Join(dir, "templates", "_helpers.tpl")
	raw, err := os.ReadFile(helpers)
	if err != nil {
		t.Fatal(err)
	}
	const lookup = `{{- lookup "v1" .kind .root.Release.Namespace .name | default dict | toJson -}}`
	if !bytes.Contains(raw, []byte(lookup)) {
		t.Fatalf("kubetrail.lookup in _helpers.tpl is not %s", lookup)
	}
	raw = bytes.Replace(raw, []byte(lookup), []byte(`{{- .root.Files.Get (printf "lookup/%s-%s.json" .kind .name) | default "{}" -}}`), 1)
	if err := os.WriteFile(helpers, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "lookup"), 0o700); err != nil {
		t.Fatal(err)
	}
	for k, obj := range live {
		b, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "lookup", strings.Replace(k, "/", "-", 1)+".json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return renderChartAt(t, dir, nil, sets...)
}

// TestChartCertificatesStableAcrossUpgrades: an upgrade keeps the generated CA, certificates,
// kubeconfig and Redis password (lookup of the installed Secrets), so the kubeconfig copied to the
// control-plane nodes stays valid; it writes the Service's ClusterIP into the kubeconfig once the
// Service exists; a changed server name or client name is signed again by the same CA.
func TestChartCertificatesStableAcrossUpgrades(t *testing.T) {
	sets := []string{"clusterName=chart-test", controlPlaneCIDRs}
	installed := renderChart(t, sets...)
	live := map[string]map[string]any{}
	for _, k := range []string{"Secret/kt-kubetrail-tls", "Secret/kt-kubetrail-apiserver-kubeconfig", "Secret/kt-kubetrail-redis", "Service/kt-kubetrail"} {
		live[k] = installed[k]
	}
	svc := map[string]any{}
	for k, v := range live["Service/kt-kubetrail"] {
		svc[k] = v
	}
	svc["spec"] = map[string]any{"type": "ClusterIP", "clusterIP": "10.96.0.50", "ports": dig(svc, "spec", "ports")}
	live["Service/kt-kubetrail"] = svc

	kubeconfigOf := func(objs map[string]map[string]any) kubeconfig {
		return parseKubeconfig(t, secretData(t, objs["Secret/kt-kubetrail-apiserver-kubeconfig"], "audit-webhook-kubeconfig.yaml"))
	}
	first := kubeconfigOf(installed)
	caPEM := secretData(t, installed["Secret/kt-kubetrail-tls"], "ca.crt")

	upgraded := renderUpgrade(t, live, sets...)
	for _, k := range []string{"Secret/kt-kubetrail-tls", "Secret/kt-kubetrail-redis"} {
		if !reflect.DeepEqual(dig(upgraded[k], "data"), dig(installed[k], "data")) {
			t.Errorf("%s changed on upgrade", k)
		}
	}
	kc := kubeconfigOf(upgraded)
	if kc.server != "https://10.96.0.50:9880/audit/chart-test" || kc.serverName != "kt-kubetrail.kubetrail.svc" {
		t.Errorf("upgraded kubeconfig server %q, tls-server-name %q; want the ClusterIP, checked for the Service's name", kc.server, kc.serverName)
	}
	if !bytes.Equal(kc.caPEM, first.caPEM) || !bytes.Equal(kc.certPEM, first.certPEM) || !bytes.Equal(kc.keyPEM, first.keyPEM) {
		t.Errorf("the upgrade changed the kubeconfig's CA or client certificate")
	}

	renamed := renderUpgrade(t, live, append(sets, "gateway.tls.extraServerNames={kubetrail.example}", "gateway.tls.allowedClientNames={apiserver-2}")...)
	tlsSecret := renamed["Secret/kt-kubetrail-tls"]
	if !bytes.Equal(secretData(t, tlsSecret, "ca.crt"), caPEM) {
		t.Fatalf("a new name replaced the CA")
	}
	if bytes.Equal(secretData(t, tlsSecret, "tls.crt"), secretData(t, installed["Secret/kt-kubetrail-tls"], "tls.crt")) {
		t.Errorf("the serving certificate was kept though its names changed")
	}
	kc = kubeconfigOf(renamed)
	verifyCertificates(t, caPEM, secretData(t, tlsSecret, "tls.crt"), secretData(t, tlsSecret, "tls.key"), kc.certPEM, kc.keyPEM, "kubetrail.example", "apiserver-2")
}

// shipperFrom is the managed-mode value a rendering with the default OTLP receiver needs
// (managed.networkPolicy is on and has no default peer: the rendering fails without one).
const shipperFrom = "managed.networkPolicy.from[0].podSelector.matchLabels.app=shipper"

// receiverTLS is the tls block the default OTLP receiver of mode managed carries on both
// protocols: the mounted certificate, and a client certificate required, signed by the mounted CA.
var receiverTLS = map[string]any{
	"cert_file":       "/etc/otelcol-kubetrail-tls/tls.crt",
	"key_file":        "/etc/otelcol-kubetrail-tls/tls.key",
	"client_ca_file":  "/etc/otelcol-kubetrail-tls/ca.crt",
	"min_version":     "1.2",
	"reload_interval": "1h",
}

// TestChartManagedSecureByDefault: mode managed installed with the default values (and the
// required shipper peers) takes audit logs from the shipper only, as gateway mode takes the
// webhook from the apiserver only: its OTLP receiver serves TLS on both protocols and requires a
// client certificate signed by a CA the chart generates and uses for nothing else; the shipper's
// certificate, key and that CA are in a Secret of their own and verify against each other; a
// NetworkPolicy admits only the listed peers to the receivers' ports; the notes say where the
// shipper's certificate is, and do not warn.
func TestChartManagedSecureByDefault(t *testing.T) {
	objs := renderChart(t, "clusterName=chart-test", "mode=managed", shipperFrom)
	cfg, path := collectorConfig(t, objs)
	validate(t, path, "POD_IP=127.0.0.1")
	sts := objs["StatefulSet/kt-kubetrail"]
	collector := dig(sts, "spec", "template", "spec", "containers", 0)

	t.Run("OTLP over TLS with a required client certificate", func(t *testing.T) {
		for _, proto := range []string{"grpc", "http"} {
			if got := dig(cfg, "receivers", "otlp", "protocols", proto, "tls"); !reflect.DeepEqual(got, receiverTLS) {
				t.Errorf("otlp %s tls = %v, want %v", proto, got, receiverTLS)
			}
		}
		v := tlsVolume(sts)
		if n := dig(v, "secret", "secretName"); n != "kt-kubetrail-receiver-tls" {
			t.Fatalf("tls volume %v, want the Secret kt-kubetrail-receiver-tls", v)
		}
		checkTLSMount(t, v, collector)
		if objs["Secret/kt-kubetrail-tls"] != nil || objs["Secret/kt-kubetrail-apiserver-kubeconfig"] != nil {
			t.Errorf("the webhook's Secrets rendered in mode managed")
		}
	})

	t.Run("the shipper's certificate is signed by the CA the receiver checks", func(t *testing.T) {
		server, client := objs["Secret/kt-kubetrail-receiver-tls"], objs["Secret/kt-kubetrail-shipper-client"]
		caPEM := secretData(t, server, "ca.crt")
		if !bytes.Equal(secretData(t, client, "ca.crt"), caPEM) {
			t.Errorf("the shipper's ca.crt is not the CA of the receiver's certificate")
		}
		if _, ok := dig(client, "data").(map[string]any)["ca.key"]; ok {
			t.Errorf("the shipper's Secret holds the CA key")
		}
		verifyCertificates(t, caPEM, secretData(t, server, "tls.crt"), secretData(t, server, "tls.key"),
			secretData(t, client, "tls.crt"), secretData(t, client, "tls.key"), "kt-kubetrail.kubetrail.svc", "kubetrail-log-shipper")
	})

	t.Run("NetworkPolicy: the receivers' ports from the listed peers only", func(t *testing.T) {
		np := ingressPolicyOf(t, objs, "NetworkPolicy/kt-kubetrail", sts)
		from := map[any][]any{} // port -> peers
		for _, rule := range dig(np, "spec", "ingress").([]any) {
			ports, _ := dig(rule, "ports").([]any)
			peers, _ := dig(rule, "from").([]any)
			if len(ports) == 0 || len(peers) == 0 {
				t.Errorf("an ingress rule open to every port or every peer: %v", rule)
			}
			for _, p := range ports {
				from[dig(p, "port")] = append(from[dig(p, "port")], peers...)
			}
		}
		shipper := []any{map[string]any{"podSelector": map[string]any{"matchLabels": map[string]any{"app": "shipper"}}}}
		for _, port := range []string{"otlp-grpc", "otlp-http"} {
			if !reflect.DeepEqual(from[port], shipper) {
				t.Errorf("port %s admits %v, want only %v", port, from[port], shipper)
			}
		}
		if want := []any{map[string]any{"namespaceSelector": map[string]any{}}}; !reflect.DeepEqual(from["metrics"], want) {
			t.Errorf("the metrics port admits %v, want the cluster's pods", from["metrics"])
		}
		if len(from) != 3 {
			t.Errorf("ports admitted: %v, want otlp-grpc, otlp-http and metrics", from)
		}
		ports := namedPorts(t, dig(collector, "ports"), "containerPort")
		if ports["otlp-grpc"] != 4317 || ports["otlp-http"] != 4318 {
			t.Errorf("the policy's port names are %v on the container", ports)
		}
	})

	t.Run("notes: where the shipper's certificate is, no warning", func(t *testing.T) {
		notes := renderNotes(t, "", "mode=managed", shipperFrom)
		requireNotesSay(t, notes,
			"The OTLP receiver takes TLS only, with a client certificate",
			"kubectl -n kubetrail get secret kt-kubetrail-shipper-client -o jsonpath='{.data.tls\\.crt}'",
			"server name\nkt-kubetrail.kubetrail.svc",
			"https://…:<otlp-http port>/v1/logs",
			"The NetworkPolicy kt-kubetrail admits the receivers' ports only from managed.networkPolicy.from",
		)
		if strings.Contains(notes, "WARNING") {
			t.Errorf("the default managed install's notes warn:\n%s", notes)
		}
	})
}

// TestChartManagedOptOuts: each way to give up mode managed's TLS or NetworkPolicy is a value
// of its own, and the notes say loudly what it exposes; without the shipper's peers the rendering
// fails, naming the value; receivers of one's own get no TLS from the chart, and the notes say
// so; the certificates may come from an existing Secret or cert-manager instead.
func TestChartManagedOptOuts(t *testing.T) {
	t.Run("without managed.networkPolicy.from the rendering fails", func(t *testing.T) {
		_, stderr, err := helm(t, "template", "kt", chartDir, "--namespace", "kubetrail", "--set", backend, "--set", "clusterName=c", "--set", "mode=managed")
		if err == nil || !strings.Contains(stderr, "managed.networkPolicy.from is required") || !strings.Contains(stderr, "managed.networkPolicy.enabled=false") {
			t.Fatalf("err %v, stderr %s; want the refusal naming managed.networkPolicy.from and the opt-out", err, stderr)
		}
		// Receivers that pull have no ports, and need no peers.
		objs := renderChart(t, "clusterName=c", "mode=managed", "managed.service.ports=null", "managed.receivers.kafka.brokers={k:9092}")
		np := ingressPolicyOf(t, objs, "NetworkPolicy/kt-kubetrail", objs["StatefulSet/kt-kubetrail"])
		rules, _ := dig(np, "spec", "ingress").([]any)
		for _, rule := range rules {
			ports, _ := dig(rule, "ports").([]any)
			for _, p := range ports {
				if dig(p, "port") != "metrics" {
					t.Errorf("a pulling receiver's policy admits port %v", dig(p, "port"))
				}
			}
		}
	})

	t.Run("insecurePlaintext: no TLS, and the notes warn", func(t *testing.T) {
		objs := renderChart(t, "clusterName=c", "mode=managed", shipperFrom, "managed.tls.insecurePlaintext=true")
		cfg, _ := collectorConfig(t, objs)
		for _, proto := range []string{"grpc", "http"} {
			if tls := dig(cfg, "receivers", "otlp", "protocols", proto, "tls"); tls != nil {
				t.Errorf("otlp %s tls = %v with insecurePlaintext", proto, tls)
			}
		}
		if objs["Secret/kt-kubetrail-receiver-tls"] != nil || objs["Secret/kt-kubetrail-shipper-client"] != nil || tlsVolume(objs["StatefulSet/kt-kubetrail"]) != nil {
			t.Errorf("certificates rendered or mounted with insecurePlaintext")
		}
		if objs["NetworkPolicy/kt-kubetrail"] == nil {
			t.Errorf("insecurePlaintext dropped the NetworkPolicy")
		}
		notes := renderNotes(t, "", "mode=managed", shipperFrom, "managed.tls.insecurePlaintext=true")
		requireNotesSay(t, notes, "WARNING: managed.tls.insecurePlaintext=true", "PLAIN TEXT", "http://…:<otlp-http port>/v1/logs")
	})

	t.Run("networkPolicy.enabled=false: no policy, TLS kept, and the notes warn", func(t *testing.T) {
		objs := renderChart(t, "clusterName=c", "mode=managed", "managed.networkPolicy.enabled=false")
		if objs["NetworkPolicy/kt-kubetrail"] != nil {
			t.Errorf("NetworkPolicy rendered though disabled")
		}
		cfg, _ := collectorConfig(t, objs)
		if !reflect.DeepEqual(dig(cfg, "receivers", "otlp", "protocols", "grpc", "tls"), receiverTLS) {
			t.Errorf("disabling the policy dropped TLS: %v", dig(cfg, "receivers", "otlp"))
		}
		notes := renderNotes(t, "", "mode=managed", "managed.networkPolicy.enabled=false")
		if !strings.Contains(notes, "WARNING: no NetworkPolicy (managed.networkPolicy.enabled=false)") || !strings.Contains(notes, "the client certificate still authenticates") {
			t.Errorf("the notes do not warn about the missing policy:\n%s", notes)
		}
	})

	t.Run("receivers of one's own: no TLS added, the notes say so", func(t *testing.T) {
		objs := renderChart(t, "clusterName=c", "mode=managed", shipperFrom, "managed.receivers.otlp/own.protocols.grpc.endpoint=${env:POD_IP}:4317")
		cfg, _ := collectorConfig(t, objs)
		if tls := dig(cfg, "receivers", "otlp/own", "protocols", "grpc", "tls"); tls != nil {
			t.Errorf("the chart added tls to a receiver of the user's: %v", tls)
		}
		if objs["Secret/kt-kubetrail-receiver-tls"] != nil {
			t.Errorf("certificates generated for receivers of the user's")
		}
		notes := renderNotes(t, "", "mode=managed", shipperFrom, "managed.receivers.otlp/own.protocols.grpc.endpoint=${env:POD_IP}:4317")
		if !strings.Contains(notes, "The chart adds no TLS to receivers of your own") {
			t.Errorf("the notes do not say that receivers of one's own need their own TLS:\n%s", notes)
		}
	})

	t.Run("existingSecret or cert-manager instead of generated certificates", func(t *testing.T) {
		objs := renderChart(t, "clusterName=c", "mode=managed", shipperFrom, "managed.tls.existingSecret=my-otlp-tls")
		if n := dig(tlsVolume(objs["StatefulSet/kt-kubetrail"]), "secret", "secretName"); n != "my-otlp-tls" {
			t.Errorf("tls volume from %v, want my-otlp-tls", n)
		}
		if objs["Secret/kt-kubetrail-receiver-tls"] != nil || objs["Secret/kt-kubetrail-shipper-client"] != nil {
			t.Errorf("certificates generated beside existingSecret")
		}
		objs = renderChart(t, "clusterName=c", "mode=managed", shipperFrom, "managed.tls.certManager.enabled=true")
		for _, k := range []string{"Certificate/kt-kubetrail-receiver-tls", "Certificate/kt-kubetrail-shipper-client", "Certificate/kt-kubetrail-shipper-ca", "Issuer/kt-kubetrail-shipper-ca"} {
			if objs[k] == nil {
				t.Errorf("%s not rendered (have %v)", k, keys(objs))
			}
		}
		if cn := dig(objs["Certificate/kt-kubetrail-shipper-client"], "spec", "commonName"); cn != "kubetrail-log-shipper" {
			t.Errorf("shipper certificate CN %v", cn)
		}
		_, stderr, err := helm(t, "template", "kt", chartDir, "--namespace", "kubetrail", "--set", backend, "--set", "clusterName=c", "--set", "mode=managed", "--set", shipperFrom,
			"--set", "managed.tls.existingSecret=s", "--set", "managed.tls.certManager.enabled=true")
		if err == nil || !strings.Contains(stderr, "choose one source of the OTLP receiver's certificates") {
			t.Errorf("existingSecret with certManager: err %v, %s", err, stderr)
		}
	})
}

// TestChartManagedCertificatesStableAcrossUpgrades: an upgrade keeps the receiver's CA and
// certificate and the shipper's certificate (lookup of the installed Secrets), so the shipper
// keeps sending; a changed client name is signed again by the same CA.
func TestChartManagedCertificatesStableAcrossUpgrades(t *testing.T) {
	sets := []string{"clusterName=chart-test", "mode=managed", shipperFrom}
	installed := renderChart(t, sets...)
	live := map[string]map[string]any{}
	for _, k := range []string{"Secret/kt-kubetrail-receiver-tls", "Secret/kt-kubetrail-shipper-client"} {
		live[k] = installed[k]
	}
	upgraded := renderUpgrade(t, live, sets...)
	for k := range live {
		if !reflect.DeepEqual(dig(upgraded[k], "data"), dig(installed[k], "data")) {
			t.Errorf("%s changed on upgrade", k)
		}
	}
	renamed := renderUpgrade(t, live, append(sets, "managed.tls.clientName=fluent-bit")...)
	caPEM := secretData(t, installed["Secret/kt-kubetrail-receiver-tls"], "ca.crt")
	server, client := renamed["Secret/kt-kubetrail-receiver-tls"], renamed["Secret/kt-kubetrail-shipper-client"]
	if !bytes.Equal(secretData(t, server, "ca.crt"), caPEM) || !bytes.Equal(secretData(t, client, "ca.crt"), caPEM) {
		t.Fatalf("a new client name replaced the CA")
	}
	verifyCertificates(t, caPEM, secretData(t, server, "tls.crt"), secretData(t, server, "tls.key"),
		secretData(t, client, "tls.crt"), secretData(t, client, "tls.key"), "kt-kubetrail.kubetrail.svc", "fluent-bit")
}
