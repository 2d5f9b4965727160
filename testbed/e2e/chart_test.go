//go:build e2e

package e2e

import (
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/kubetrail/kubetrail/internal/model"
)

// TestChartAcceptedByTheAPIServer renders the Helm chart (distribution/helm/kubetrail) in both
// modes and has the testbed's real kube-apiserver accept every object with a server-side dry run:
// the schemas, defaulting, validation and admission of Kubernetes v1.36 see the manifests as an
// install would, without creating anything. Lint and rendering are checked by the dist tests.
func TestChartAcceptedByTheAPIServer(t *testing.T) {
	env := Testbed(t)
	helm := helmBinary(t)
	chart := filepath.Join(env.Root, "distribution", "helm", "kubetrail")
	defer checkNoDryRunSpans(t, env, time.Now())
	for _, tc := range []struct {
		name string
		sets []string
		kind string // the workload kind the mode renders
	}{
		// The defaults: certificates and the apiserver's kubeconfig generated into Secrets, the
		// NetworkPolicy (which needs the control plane's CIDRs), the Redis password Secret.
		{"gateway", []string{"mode=gateway", "gateway.networkPolicy.controlPlaneCIDRs={172.16.0.0/12}"}, "statefulset"},
		{"daemonset", []string{"mode=daemonset"}, "daemonset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The namespace must exist for a dry run of namespaced objects: default does, and the
			// release name keeps the objects apart from the scenarios' (nothing is created anyway).
			args := []string{"template", "chart-" + tc.name, chart, "--namespace", "default", "--set", "clusterName=" + ClusterName,
				"--set", "otlp.endpoint=" + env.Jaeger.OTLPGRPC}
			for _, s := range tc.sets {
				args = append(args, "--set", s)
			}
			rendered, err := exec.Command(helm, args...).Output()
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, stderrOf(err))
			}
			manifest := filepath.Join(t.TempDir(), "chart.yaml")
			if err := os.WriteFile(manifest, rendered, 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := env.RunKubectl("apply", "--dry-run=server", "-f", manifest)
			Check(t, "the apiserver accepts the "+tc.name+" rendering", err == nil, "kubectl apply --dry-run=server: %v\n%s", err, out)
			// One line per object: "<kind>.<group>/<name> created (server dry run)".
			accepted := regexp.MustCompile(`(?m)^\S+ (created|configured|unchanged) \(server dry run\)$`).FindAllString(out, -1)
			objects := strings.Count("\n"+string(rendered), "\nkind: ")
			Check(t, "every rendered object of "+tc.name+" is accepted", len(accepted) == objects && objects > 0,
				"%d objects rendered, %d accepted:\n%s", objects, len(accepted), out)
			Check(t, tc.name+" renders its workload", strings.Contains(out, tc.kind+".apps/chart-"+tc.name+"-kubetrail "),
				"no %s in:\n%s", tc.kind, out)
		})
	}
}

// checkNoDryRunSpans checks that the chart's server-side dry runs since start left no spans: the
// apiserver audits a dry run like a write, and k8s_audit leaves it out
// (filtered_events{reason=dry_run}), since none of these objects was ever written.
func checkNoDryRunSpans(t *testing.T, env *Env, start time.Time) {
	t.Helper()
	var dry []string
	for _, s := range env.SpansIn(t, Window{Start: start, End: time.Now()}) {
		if strings.HasPrefix(s.Attr(model.AttrObjectName), "chart-") {
			dry = append(dry, s.Name+" "+s.Attr(model.AttrObjectName))
		}
	}
	Check(t, "the dry-run applies left no spans", len(dry) == 0, "%d spans of dry-run objects: %v", len(dry), dry)
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// TestChartNotesPrintAWebhookKubeconfig: a gateway install gives the apiserver a kubeconfig it
// can use as --audit-webhook-config-file, pointing at the webhook with the cluster in the path:
// with the chart's generated certificates (the default) it is in a Secret of the release, whose
// certificate check names the Service (tls-server-name) and whose extraction the notes print;
// otherwise the notes print it. kubectl reads it, as the apiserver's client-go would.
func TestChartNotesPrintAWebhookKubeconfig(t *testing.T) {
	env := Testbed(t)
	helm := helmBinary(t)
	chart := filepath.Join(env.Root, "distribution", "helm", "kubetrail")
	defer checkNoDryRunSpans(t, env, time.Now())
	const cidrs = "gateway.networkPolicy.controlPlaneCIDRs={172.16.0.0/12}"
	for _, tc := range []struct {
		name       string
		sets       []string
		fromSecret bool // the kubeconfig is in the Secret notes-kubetrail-apiserver-kubeconfig
		wantServer string
	}{
		{"defaults: generated certificates, ClusterIP", []string{cidrs}, true,
			"https://notes-kubetrail.kubetrail.svc:9880/audit/" + ClusterName},
		{"NodePort when asked, plain http", []string{"gateway.tls.insecurePlainHTTP=true", "gateway.service.type=NodePort",
			"gateway.service.nodePort=30988", "gateway.networkPolicy.enabled=false"}, false, "http://127.0.0.1:30988/audit/" + ClusterName},
		{"ClusterIP with an existing Secret", []string{cidrs, "gateway.tls.existingSecret=s"}, false,
			"https://notes-kubetrail.kubetrail.svc:9880/audit/" + ClusterName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// --dry-run=client renders without installing, but helm v3.19 still checks that the
			// cluster is reachable: hence here, with the testbed's apiserver.
			args := []string{"install", "notes", chart, "--dry-run=client", "--kubeconfig", env.Kubeconfig,
				"--namespace", "kubetrail", "--set", "clusterName=" + ClusterName, "--set", "otlp.endpoint=" + env.Jaeger.OTLPGRPC}
			for _, s := range tc.sets {
				args = append(args, "--set", s)
			}
			out, err := exec.Command(helm, args...).Output()
			if err != nil {
				t.Fatalf("helm install --dry-run=client: %v\n%s", err, stderrOf(err))
			}
			manifest, notes, ok := strings.Cut(string(out), "NOTES:\n")
			if !ok {
				t.Fatalf("no notes in:\n%s", out)
			}
			var kubeconfig []byte
			if tc.fromSecret {
				kubeconfig = secretKey(t, manifest, "notes-kubetrail-apiserver-kubeconfig", "audit-webhook-kubeconfig.yaml")
				Check(t, "the notes say how to copy the kubeconfig Secret",
					strings.Contains(notes, "get secret notes-kubetrail-apiserver-kubeconfig"), "notes:\n%s", notes)
			} else {
				start := strings.Index(notes, "apiVersion: v1\nkind: Config")
				end := strings.Index(notes, "current-context: default")
				if start < 0 || end < start {
					t.Fatalf("no kubeconfig in the install notes:\n%s", out)
				}
				kubeconfig = []byte(notes[start:end+len("current-context: default")] + "\n")
			}
			path := filepath.Join(t.TempDir(), "audit-webhook.yaml")
			if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
				t.Fatal(err)
			}
			server, err := env.RunKubectl("config", "view", "--kubeconfig", path, "--minify", "-o", "jsonpath={.clusters[0].cluster.server}")
			Check(t, "kubectl reads the kubeconfig ("+tc.name+")", err == nil && server == tc.wantServer,
				"server %q (err %v), want %q\n%s", server, err, tc.wantServer, kubeconfig)
			if strings.HasPrefix(tc.wantServer, "https:") {
				name, err := env.RunKubectl("config", "view", "--kubeconfig", path, "--minify", "-o", "jsonpath={.clusters[0].cluster.tls-server-name}")
				Check(t, "the kubeconfig checks the certificate for the Service's name ("+tc.name+")",
					err == nil && name == "notes-kubetrail.kubetrail.svc", "tls-server-name %q (err %v)", name, err)
			}
			Check(t, "the notes warn about plain HTTP exactly when it is on ("+tc.name+")",
				strings.Contains(notes, "WARNING: gateway.tls.insecurePlainHTTP=true") == strings.HasPrefix(tc.wantServer, "http:"), "notes:\n%s", notes)
		})
	}
}

// secretKey is a data key, decoded, of the Secret name among the manifests of a helm dry run.
func secretKey(t *testing.T, manifests, name, key string) []byte {
	t.Helper()
	for _, doc := range strings.Split(manifests, "\n---\n") {
		var obj struct {
			Kind     string                `json:"kind"`
			Metadata struct{ Name string } `json:"metadata"`
			Data     map[string]string     `json:"data"`
		}
		if yaml.Unmarshal([]byte(doc), &obj) != nil || obj.Kind != "Secret" || obj.Metadata.Name != name {
			continue
		}
		b, err := base64.StdEncoding.DecodeString(obj.Data[key])
		if err != nil || len(b) == 0 {
			t.Fatalf("Secret %s key %s: %v", name, key, err)
		}
		return b
	}
	t.Fatalf("no Secret %s in the dry run's manifests:\n%s", name, manifests)
	return nil
}

// helmBinary is the helm `make e2e` built (KUBETRAIL_HELM), or the cache's.
func helmBinary(t *testing.T) string {
	t.Helper()
	helm := os.Getenv("KUBETRAIL_HELM")
	if helm == "" {
		cache := envOr("KUBETRAIL_CACHE", filepath.Join(os.Getenv("HOME"), ".cache", "kubetrail"))
		helm = filepath.Join(cache, "bin", "helm-"+envOr("HELM_VERSION", "v3.19.0"), "helm")
	}
	if _, err := os.Stat(helm); err != nil {
		t.Fatalf("helm: %v (build it with testbed/hack/ensure-helm.sh; make e2e does)", err)
	}
	return helm
}
