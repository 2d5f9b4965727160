//go:build dist

package distribution_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
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
	args := []string{"template", "kt", chartDir, "--namespace", "kubetrail"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	out, stderr, err := helm(t, args...)
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", sets, err, stderr)
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

func TestChartLints(t *testing.T) {
	for _, mode := range []string{"gateway", "daemonset"} {
		out, stderr, err := helm(t, "lint", "--strict", chartDir, "--set", "clusterName=lint", "--set", "mode="+mode)
		if err != nil {
			t.Errorf("helm lint --strict (mode %s): %v\n%s%s", mode, err, out, stderr)
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
			name: "gateway defaults: StatefulSet of 2, webhook Service, PDB, bundled Redis",
			want: []string{"StatefulSet/kt-kubetrail", "Service/kt-kubetrail", "Service/kt-kubetrail-headless", "PodDisruptionBudget/kt-kubetrail",
				"Deployment/kt-kubetrail-redis", "Service/kt-kubetrail-redis", "ClusterRole/kt-kubetrail", "ClusterRoleBinding/kt-kubetrail", "ServiceAccount/kt-kubetrail"},
			absent: []string{"DaemonSet/kt-kubetrail", "Secret/kt-kubetrail-tls"},
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
				if e := dig(objs["Service/kt-kubetrail"], "spec", "ports", 0, "nodePort"); e != float64(30988) {
					t.Errorf("nodePort %v", e)
				}
				c := dig(sts, "spec", "template", "spec", "containers", 0)
				if img := dig(c, "image"); img != "otelcol-kubetrail:0.1.0" {
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
			want:   []string{"DaemonSet/kt-kubetrail", "Deployment/kt-kubetrail-redis", "ClusterRole/kt-kubetrail"},
			absent: []string{"StatefulSet/kt-kubetrail", "Service/kt-kubetrail", "PodDisruptionBudget/kt-kubetrail"},
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
			name: "gateway with webhook TLS, client CA and allowed names: chart-made Secret",
			sets: []string{"gateway.tls.enabled=true", "gateway.tls.cert=CERT", "gateway.tls.key=KEY", "gateway.tls.clientCA=CA",
				"gateway.tls.allowedClientNames={kube-apiserver-audit}"},
			want: []string{"Secret/kt-kubetrail-tls"},
			checkFn: func(t *testing.T, objs map[string]map[string]any, cfg map[string]any) {
				if f := dig(cfg, "receivers", "k8s_audit", "tls", "client_ca_file"); f != "/etc/otelcol-kubetrail-tls/ca.crt" {
					t.Errorf("client_ca_file %v", f)
				}
				if n := dig(cfg, "receivers", "k8s_audit", "allowed_client_names", 0); n != "kube-apiserver-audit" {
					t.Errorf("allowed_client_names %v", n)
				}
				if d := dig(objs["Secret/kt-kubetrail-tls"], "data", "ca.crt"); d != "Q0E=" {
					t.Errorf("Secret ca.crt %v", d)
				}
			},
		},
		{
			name:   "external Redis with a password Secret, one replica, events off, config override",
			sets:   []string{"redis.addresses={redis.example:6379}", "redis.passwordSecret.name=r", "redis.passwordSecret.key=pw", "gateway.replicas=1", "events.enabled=false", "config.processors.k8s_object_link.owner_wait=5s", "goMemLimit=500MiB"},
			absent: []string{"Deployment/kt-kubetrail-redis"},
			checkFn: func(t *testing.T, objs map[string]map[string]any, cfg map[string]any) {
				if p := dig(cfg, "processors", "k8s_object_link", "id_map", "redis", "password"); p != "${env:REDIS_PASSWORD}" {
					t.Errorf("password %v", p)
				}
				if w := dig(cfg, "processors", "k8s_object_link", "owner_wait"); w != "5s" {
					t.Errorf("config override not merged: owner_wait %v", w)
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
			name:   "one replica, memory ID map, no persistence",
			sets:   []string{"gateway.replicas=1", "redis.bundled.enabled=false", "gateway.persistence.enabled=false", "goMemLimit=", "gateway.service.type=ClusterIP"},
			absent: []string{"Deployment/kt-kubetrail-redis"},
			checkFn: func(t *testing.T, objs map[string]map[string]any, cfg map[string]any) {
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
			objs := renderChart(t, append([]string{"clusterName=chart-test"}, tc.sets...)...)
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
		{"TLS without a certificate", []string{"clusterName=c", "gateway.tls.enabled=true"}, "gateway.tls.enabled needs"},
		{"allowed names without a client CA", []string{"clusterName=c", "gateway.tls.allowedClientNames={a}"}, "allowedClientNames needs gateway.tls.clientCA"},
		{"Redis address without a port", []string{"clusterName=c", "redis.addresses={redis}"}, "redis/addresses/0"},
		{"unreadable memory limit for GOMEMLIMIT auto", []string{"clusterName=c", "resources.limits.memory=1G"}, "goMemLimit auto"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"template", "kt", chartDir}
			for _, s := range tc.sets {
				args = append(args, "--set", s)
			}
			_, stderr, err := helm(t, args...)
			if err == nil {
				t.Fatalf("helm template %v succeeded", tc.sets)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("error does not say %q:\n%s", tc.want, stderr)
			}
		})
	}
}

// TestManifestsNameTheImage: the chart and the shipped manifest run the image `make image` builds,
// tagged with the distribution's version (builder-config.yaml dist.version).
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
	want := "otelcol-kubetrail:" + builder.Dist.Version
	if chart.AppVersion != builder.Dist.Version {
		t.Errorf("Chart.yaml appVersion %q, the distribution is %q", chart.AppVersion, builder.Dist.Version)
	}
	for _, mode := range []string{"gateway", "daemonset"} {
		objs := renderChart(t, "clusterName=c", "mode="+mode)
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
