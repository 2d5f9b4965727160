//go:build e2e

package e2e

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"
)

// The managed clusters' forwarder (distribution/examples/managed/forwarder/): a contrib collector
// with a cloud receiver and an otlp_grpc exporter into the chart's mode managed. The contrib
// collector is not in this build, so TestHelmInstallManaged runs otelcol-kubetrail with the
// forwarder's config, its receiver swapped for file_log; these are its pieces.

// forwarderDir is the forwarder examples' directory, from the repository root.
const forwarderDir = "distribution/examples/managed/forwarder"

// forwarderTLS are the files the forwarder's exporter presents and trusts; cert and key "" for a
// forwarder without the client certificate.
type forwarderTLS struct{ ca, cert, key, serverName string }

// forwarderConfig returns the forwarder example file (eks-cloudwatch.yaml, …) as the shipped
// collector runs it here: its exporter (TLS, sending_queue, retry) and its file_storage
// extension as written, but for the endpoint, the TLS files and the storage directory, which are
// the test's; its receivers replaced by receivers (file_log ones), all in its logs pipeline.
func forwarderConfig(t *testing.T, env *Env, file, endpoint string, tls forwarderTLS, receivers map[string]any) Config {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(env.Root, forwarderDir, file))
	if err != nil {
		t.Fatal(err)
	}
	var cfg Config
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	exp := env.Components.otlpExporter()
	if cfg.Get("exporters."+exp) == nil {
		t.Fatalf("%s has no %s exporter, the build's OTLP exporter", file, exp)
	}
	if cfg.Get("extensions.file_storage") == nil || cfg.Get("exporters."+exp+".sending_queue.storage") != "file_storage" {
		t.Fatalf("%s: want its queue on the file_storage extension", file)
	}
	for _, k := range []string{"ca_file", "cert_file", "key_file"} {
		if cfg.Get("exporters."+exp+".tls."+k) == nil {
			t.Fatalf("%s: the exporter's tls has no %s", file, k)
		}
	}
	cfg.Set("exporters."+exp+".endpoint", endpoint)
	cfg.Set("exporters."+exp+".tls.ca_file", tls.ca)
	cfg.Set("exporters."+exp+".tls.server_name_override", tls.serverName)
	if tls.cert == "" {
		cfg.Delete("exporters." + exp + ".tls.cert_file")
		cfg.Delete("exporters." + exp + ".tls.key_file")
	} else {
		cfg.Set("exporters."+exp+".tls.cert_file", tls.cert)
		cfg.Set("exporters."+exp+".tls.key_file", tls.key)
	}
	cfg.Set("extensions.file_storage.directory", t.TempDir())
	// The cloud receiver's extensions (text_encoding) are not in this build; file_storage is.
	for id := range cfg["extensions"].(map[string]any) {
		if id != "file_storage" {
			cfg.Delete("extensions." + id)
		}
	}
	cfg.Set("service.extensions", []any{"file_storage"})
	cfg["receivers"] = receivers
	ids := slices.Sorted(maps.Keys(receivers))
	list := make([]any, len(ids))
	for i, id := range ids {
		list[i] = id
	}
	cfg.Set("service.pipelines.logs.receivers", list)
	cfg.Set("service.telemetry.metrics.level", "none")
	return cfg
}

// recordedAuditEvent is one audit Event of a ConfigMap create, as an EKS audit log stream (and
// so awscloudwatch's record body) carries it: the apiserver's JSON line.
func recordedAuditEvent(t *testing.T, ns, name string, at time.Time) []byte {
	t.Helper()
	var id [16]byte
	_, _ = rand.Read(id[:])
	ts := at.UTC().Format("2006-01-02T15:04:05.000000Z")
	ev := map[string]any{
		"kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata",
		"auditID":                  fmt.Sprintf("%x-%x-%x-%x-%x", id[0:4], id[4:6], id[6:8], id[8:10], id[10:]),
		"stage":                    "ResponseComplete",
		"requestURI":               "/api/v1/namespaces/" + ns + "/configmaps",
		"verb":                     "create",
		"user":                     map[string]any{"username": "kubernetes-admin", "groups": []any{"system:masters", "system:authenticated"}},
		"sourceIPs":                []any{"10.0.0.1"},
		"userAgent":                "kubectl/v1.36.3",
		"objectRef":                map[string]any{"resource": "configmaps", "namespace": ns, "name": name, "apiVersion": "v1"},
		"responseStatus":           map[string]any{"metadata": map[string]any{}, "code": 201},
		"requestReceivedTimestamp": ts, "stageTimestamp": ts,
	}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// checkForwarderManifests checks the forwarder's StatefulSet against the installed release
// (a server-side dry run in its namespace; the Secret it mounts and the Service it sends to are
// the release's) and the chart rendered with the forwarder's values: its NetworkPolicy admits the
// StatefulSet's pods to the receiver's ports.
func checkForwarderManifests(t *testing.T, env *Env, rel *chartRelease) {
	t.Helper()
	stsFile := filepath.Join(env.Root, forwarderDir, "statefulset.yaml")
	if out, err := env.RunKubectl("apply", "--dry-run=server", "-f", stsFile); err != nil {
		t.Errorf("kubectl apply --dry-run=server -f statefulset.yaml: %v\n%s", err, out)
	}
	b, err := os.ReadFile(stsFile)
	if err != nil {
		t.Fatal(err)
	}
	var sts appsv1.StatefulSet
	for _, doc := range strings.Split(string(b), "\n---\n") {
		if strings.Contains(doc, "kind: StatefulSet") {
			if err := yaml.Unmarshal([]byte(doc), &sts); err != nil {
				t.Fatal(err)
			}
		}
	}
	if sts.Name == "" || len(sts.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("statefulset.yaml: no StatefulSet of one container")
	}
	Check(t, "the forwarder runs in the release's namespace", sts.Namespace == rel.ns, "%q, release in %q", sts.Namespace, rel.ns)
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			// The files the forwarder configs read (/etc/kubetrail-shipper/*): in the release's Secret.
			data := objectData(t, env, rel.ns, "secret", v.Secret.SecretName)
			for _, k := range []string{"tls.crt", "tls.key", "ca.crt"} {
				Check(t, "the release's Secret "+v.Secret.SecretName+" has the forwarder's "+k, len(data[k]) > 0, "keys %v", slices.Sorted(maps.Keys(data)))
			}
		}
	}
	for _, e := range sts.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "KUBETRAIL_OTLP_ENDPOINT" {
			svc, err := env.RunKubectl("get", "service", "-n", rel.ns, "-o", "jsonpath={.items[*].metadata.name}")
			host, _, _ := strings.Cut(e.Value, ".")
			Check(t, "the forwarder sends to the release's Service", err == nil && slices.Contains(strings.Fields(svc), host) && strings.HasSuffix(e.Value, "."+rel.ns+".svc:4317"),
				"KUBETRAIL_OTLP_ENDPOINT=%s; Services in %s: %s (%v)", e.Value, rel.ns, svc, err)
		}
	}

	cmd := exec.Command(helmBinary(t), "template", rel.name, filepath.Join(env.Root, "distribution", "helm", "kubetrail"), "-n", rel.ns,
		"-f", filepath.Join(env.Root, forwarderDir, "kubetrail-values.yaml"),
		"--set", "clusterName="+readmeCluster, "--set", "otlp.endpoint="+env.Jaeger.OTLPGRPC,
		"--show-only", "templates/networkpolicy-managed.yaml")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template with kubetrail-values.yaml: %v\n%s", err, stderrOf(err))
	}
	var np networkingv1.NetworkPolicy
	if err := yaml.Unmarshal(out, &np); err != nil {
		t.Fatalf("the chart's NetworkPolicy: %v\n%s", err, out)
	}
	admitted := false
	for _, rule := range np.Spec.Ingress {
		ports := map[string]bool{}
		for _, p := range rule.Ports {
			if p.Port != nil {
				ports[p.Port.String()] = true
			}
		}
		if !ports["otlp-grpc"] {
			continue
		}
		for _, peer := range rule.From {
			if peer.NamespaceSelector == nil && peer.IPBlock == nil && peer.PodSelector != nil && len(peer.PodSelector.MatchExpressions) == 0 {
				ok := len(peer.PodSelector.MatchLabels) > 0
				for k, v := range peer.PodSelector.MatchLabels {
					ok = ok && sts.Spec.Template.Labels[k] == v
				}
				admitted = admitted || (ok && np.Namespace == sts.Namespace)
			}
		}
	}
	Check(t, "the chart's NetworkPolicy (kubetrail-values.yaml) admits the forwarder's pods to otlp-grpc", admitted,
		"policy in %s:\n%s\nforwarder labels %v in %s", np.Namespace, out, sts.Spec.Template.Labels, sts.Namespace)
}
