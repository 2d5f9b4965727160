//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kubetrail/kubetrail/internal/model"
)

// kubeadmCluster names the spans of the apiserver TestKubeadmClusterConfiguration starts (the
// webhook's path /audit/{cluster}), so that they never mix with the testbed collector's.
const kubeadmCluster = "kubeadm-e2e"

// The audit flags whose value is a file or directory the apiserver opens, and whether it writes
// there (the audit log: its directory must be mounted read-write).
var auditPathFlags = map[string]bool{
	"audit-policy-file":         false,
	"audit-webhook-config-file": false,
	"audit-log-path":            true,
}

// TestKubeadmClusterConfiguration runs kubeadm's own code on distribution/kubeadm/
// cluster-configuration.yaml: `kubeadm init phase control-plane apiserver` (kubeadm of the
// testbed's Kubernetes version, chrooted with --rootfs into a directory of the test's) writes the
// apiserver's static pod. Every audit flag's path must be inside a hostPath volume mounted into
// the container (what broke for kubeadm users who added the flags alone); the same configuration
// without the snippet's extraVolumes must fail that check. Then a kube-apiserver runs on the
// generated command line, with each path resolved as the kubelet would through the pod's hostPath
// volumes into the test's directory (an unmounted path resolves to nothing, as in the container),
// only etcd and the listening address the testbed's: its audit events reach a collector's
// k8s_audit receiver and become spans in Jaeger, and its audit log is written.
func TestKubeadmClusterConfiguration(t *testing.T) {
	AfterOthers(t) // a second apiserver and collector
	env := Testbed(t)
	t0 := time.Now()
	kubeadm := filepath.Join(env.K8sBin, "kubeadm")
	if _, err := os.Stat(kubeadm); err != nil {
		t.Fatalf("kubeadm: %v (testbed/hack/build-binaries.sh k8s builds it)", err)
	}
	snippetPath := filepath.Join(env.Root, "distribution", "kubeadm", "cluster-configuration.yaml")
	snippet, err := os.ReadFile(snippetPath)
	if err != nil {
		t.Fatal(err)
	}
	checkSnippetAgreesWithTheDocs(t, env.Root, snippet)

	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	rootfs := t.TempDir()
	pod := kubeadmAPIServerPod(t, env, kubeadm, rootfs, snippet, port, false)
	Check(t, "kubeadm's static pod mounts every audit path from a hostPath volume", len(unmountedAuditPaths(pod)) == 0,
		"%v", unmountedAuditPaths(pod))
	// The check can fail: the flags alone, as the docs said before, leave all three unmounted.
	bare := kubeadmAPIServerPod(t, env, kubeadm, t.TempDir(), snippet, port, true)
	Check(t, "without the snippet's extraVolumes every audit path is unmounted", len(unmountedAuditPaths(bare)) == len(auditPathFlags),
		"%v", unmountedAuditPaths(bare))
	// The kubeconfig of the chart's certManager and existingSecret modes names its certificates
	// under /etc/kubernetes/pki: kubeadm's own mount of the certificates directory.
	for _, f := range kubeconfigFiles(t, filepath.Join(env.Root, "distribution", "audit-webhook-kubeconfig.yaml")) {
		_, _, ok := resolveInPod(pod, f)
		Check(t, "the webhook kubeconfig's "+filepath.Base(f)+" is mounted", ok, "%s is in no volume of %v", f, podMounts(pod))
	}

	// The files the docs put on the node, in the test's root: the policy, the webhook
	// kubeconfig (to a collector of the test's), and the testbed's certificates under kubeadm's
	// names; the audit log directory is DirectoryOrCreate, which the kubelet creates.
	coll := startKubeadmCollector(t, env)
	put := func(path string, b []byte, mode os.FileMode) {
		t.Helper()
		p := filepath.Join(rootfs, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, mode); err != nil {
			t.Fatal(err)
		}
	}
	policy, err := os.ReadFile(filepath.Join(env.Root, "distribution", "audit-policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	put("/etc/kubernetes/audit-policy.yaml", policy, 0o644)
	put("/etc/kubernetes/kubetrail-audit-webhook.yaml", fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: kubetrail
  cluster: {server: %s/audit/%s}
users:
- name: kube-apiserver
  user: {}
contexts:
- name: default
  context: {cluster: kubetrail, user: kube-apiserver}
current-context: default
`, coll.AuditURL, kubeadmCluster), 0o600)
	pki := filepath.Join(env.StateDir, "pki")
	for kubeadmName, testbedName := range map[string]string{
		"ca.crt": "ca.crt", "apiserver.crt": "apiserver.crt", "apiserver.key": "apiserver.key",
		"sa.pub": "sa.pub", "sa.key": "sa.key",
		// The front proxy and the kubelet client: the testbed has neither; any client pair it
		// signed serves, since nothing calls through them here.
		"front-proxy-ca.crt": "ca.crt", "front-proxy-client.crt": "admin.crt", "front-proxy-client.key": "admin.key",
		"apiserver-kubelet-client.crt": "admin.crt", "apiserver-kubelet-client.key": "admin.key",
	} {
		b, err := os.ReadFile(filepath.Join(pki, testbedName))
		if err != nil {
			t.Fatal(err)
		}
		put("/etc/kubernetes/pki/"+kubeadmName, b, 0o600)
	}
	for _, v := range pod.Spec.Volumes {
		if hp := v.HostPath; hp != nil && hp.Type != nil && *hp.Type == corev1.HostPathDirectoryOrCreate {
			if err := os.MkdirAll(filepath.Join(rootfs, hp.Path), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}

	args, generated := kubeadmAPIServerArgs(t, env, pod, rootfs)
	var audit []string
	for _, a := range generated {
		if strings.HasPrefix(a, "--audit-") {
			audit = append(audit, a)
		}
	}
	t.Logf("kubeadm's audit flags: %s", strings.Join(audit, " "))
	logPath := filepath.Join(env.OutDir, "apiserver-kubeadm.log")
	proc, err := StartProcess("apiserver-kubeadm", logPath, env.pidDir, nil, filepath.Join(env.K8sBin, "kube-apiserver"), args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proc.Stop(15 * time.Second) })
	server := fmt.Sprintf("https://127.0.0.1:%d", port)
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := exec.Command(env.Kubectl, "--kubeconfig", env.Kubeconfig, "--server", server, "get", "--raw", "/readyz").CombinedOutput()
		if err == nil && strings.TrimSpace(string(out)) == "ok" {
			break
		}
		if done, werr := proc.Exited(); done || time.Now().After(deadline) {
			t.Fatalf("the apiserver on kubeadm's command line is not ready (exited %v %v): %s\n%s", done, werr, out, proc.LogTail(30))
		}
		time.Sleep(300 * time.Millisecond)
	}
	ready := time.Since(t0)

	start := time.Now()
	ns := "kubeadm-e2e"
	kubectlVia(t, env, server, "create", "namespace", ns)
	t.Cleanup(func() { _, _ = env.RunKubectl("delete", "namespace", ns, "--wait=false") })
	kubectlVia(t, env, server, "create", "configmap", "through-kubeadm", "-n", ns, "--from-literal=k=v")
	env.WaitSpans(t, Window{Start: start.Add(-time.Second), End: time.Now().Add(time.Minute)}, 30*time.Second, func(ss Spans) error {
		if len(clusterSpans(ss, kubeadmCluster).ForObject("ConfigMap", ns, "through-kubeadm").OfType(model.SpanTypeAudit)) == 0 {
			return fmt.Errorf("no audit span of ConfigMap %s/through-kubeadm (cluster %s) from the apiserver kubeadm configured", ns, kubeadmCluster)
		}
		return nil
	})
	auditLog, err := os.ReadFile(filepath.Join(rootfs, "var", "log", "kubernetes", "audit", "audit.log"))
	Check(t, "the apiserver writes its audit log into the mounted directory", err == nil && bytes.Contains(auditLog, []byte(`"name":"through-kubeadm"`)),
		"%v; %d bytes", err, len(auditLog))
	t.Logf("kubeadm's apiserver ready %.1f s after the test began; the test took %.1f s", ready.Seconds(), time.Since(t0).Seconds())
}

// kubeadmAPIServerPod runs `kubeadm init phase control-plane apiserver` chrooted into rootfs
// (--rootfs: kubeadm chroots before it reads anything, so its /etc/kubernetes is rootfs's) on the
// snippet with what a cluster of the testbed adds: kubernetesVersion (the testbed's, which is
// kubeadm's own), the service range, and an InitConfiguration with the local endpoint (a
// documentation address: kubeadm refuses 127.0.0.1 unless the loopback interface has a global
// address; the apiserver is told to advertise 127.0.0.1 instead, kubeadmAPIServerArgs). With
// bare, the snippet's extraVolumes are removed: its flags alone. It returns the static pod.
func kubeadmAPIServerPod(t *testing.T, env *Env, kubeadm, rootfs string, snippet []byte, port int, bare bool) *corev1.Pod {
	t.Helper()
	var cluster map[string]any
	if err := yaml.Unmarshal(snippet, &cluster); err != nil {
		t.Fatalf("distribution/kubeadm/cluster-configuration.yaml: %v", err)
	}
	version := ""
	for _, kv := range env.ClusterEnv {
		if v, ok := strings.CutPrefix(kv, "KUBETRAIL_K8S_VERSION="); ok {
			version = v
		}
	}
	if version == "" {
		t.Fatal("the testbed's env names no KUBETRAIL_K8S_VERSION")
	}
	cluster["kubernetesVersion"] = version
	cluster["networking"] = map[string]any{"serviceSubnet": "10.96.0.0/16"}
	if bare {
		delete(cluster["apiServer"].(map[string]any), "extraVolumes")
	}
	cb, err := yaml.Marshal(cluster)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint: {advertiseAddress: 192.0.2.10, bindPort: %d}
nodeRegistration: {name: kubeadm-e2e, criSocket: "unix:///var/run/containerd/containerd.sock"}
---
%s`, port, cb)
	if err := os.WriteFile(filepath.Join(rootfs, "kubeadm.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(kubeadm, "init", "phase", "control-plane", "apiserver", "--config", "/kubeadm.yaml", "--rootfs", rootfs)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubeadm init phase control-plane apiserver --rootfs %s: %v\n%s\nconfig:\n%s", rootfs, err, out, cfg)
	}
	b, err := os.ReadFile(filepath.Join(rootfs, "etc", "kubernetes", "manifests", "kube-apiserver.yaml"))
	if err != nil {
		t.Fatalf("kubeadm wrote no manifest into %s: %v\n%s", rootfs, err, out)
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(b, &pod); err != nil {
		t.Fatalf("kube-apiserver.yaml: %v", err)
	}
	if len(pod.Spec.Containers) != 1 || len(pod.Spec.Containers[0].Command) < 2 {
		t.Fatalf("kube-apiserver.yaml: want one container with a command:\n%s", b)
	}
	return &pod
}

// resolveInPod returns the host path behind a path of the apiserver container: through the
// volumeMount whose mountPath is the longest prefix of it, of a hostPath volume. ok is false for a
// path in no such mount: in the container it is not there.
func resolveInPod(pod *corev1.Pod, path string) (host string, mount corev1.VolumeMount, ok bool) {
	best := -1
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		mp := strings.TrimSuffix(m.MountPath, "/")
		if (path == mp || strings.HasPrefix(path, mp+"/")) && len(mp) > best {
			for _, v := range pod.Spec.Volumes {
				if v.Name == m.Name && v.HostPath != nil {
					best, mount, host = len(mp), m, v.HostPath.Path+strings.TrimPrefix(path, mp)
				}
			}
		}
	}
	return host, mount, best >= 0
}

// podMounts lists the container's mounts, for messages.
func podMounts(pod *corev1.Pod) []string {
	var out []string
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		out = append(out, fmt.Sprintf("%s (ro=%v)", m.MountPath, m.ReadOnly))
	}
	return out
}

// podFlags returns the container command's --name=value flags.
func podFlags(pod *corev1.Pod) map[string]string {
	flags := map[string]string{}
	for _, a := range pod.Spec.Containers[0].Command[1:] {
		name, value, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		flags[name] = value
	}
	return flags
}

// unmountedAuditPaths lists the audit flags whose path the container cannot open: in no hostPath
// mount, or for the audit log in a read-only one. A flag missing from the command counts too.
func unmountedAuditPaths(pod *corev1.Pod) []string {
	flags := podFlags(pod)
	var bad []string
	for flag, writes := range auditPathFlags {
		p, ok := flags[flag]
		if !ok {
			bad = append(bad, "--"+flag+" missing")
			continue
		}
		if _, m, ok := resolveInPod(pod, p); !ok || (writes && m.ReadOnly) {
			bad = append(bad, fmt.Sprintf("--%s=%s (mounts: %v)", flag, p, podMounts(pod)))
		}
	}
	sort.Strings(bad)
	return bad
}

// kubeadmAPIServerArgs turns the static pod's command into one for the testbed: every absolute
// path resolved through the pod's hostPath volumes into rootfs (a path in no volume into a
// directory that does not exist: the apiserver cannot open it, as in the container); etcd is the
// testbed's (plain http on loopback, so kubeadm's etcd client certificate flags go) and the
// apiserver binds and advertises loopback only, without endpoint reconciling (a second apiserver
// of the testbed). Every other flag is kubeadm's as generated. It returns the args and the generated
// command's flags.
func kubeadmAPIServerArgs(t *testing.T, env *Env, pod *corev1.Pod, rootfs string) (args, generated []string) {
	t.Helper()
	if env.Etcd == "" {
		t.Fatal("the control plane's env has no KUBETRAIL_ETCD")
	}
	drop := []string{"etcd-cafile", "etcd-certfile", "etcd-keyfile"}
	generated = pod.Spec.Containers[0].Command[1:]
	for _, a := range generated {
		name, value, found := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		switch {
		case slices.Contains(drop, name):
			continue
		case name == "etcd-servers":
			value = env.Etcd
		case name == "advertise-address":
			value = "127.0.0.1"
		case found && strings.HasPrefix(value, "/"):
			if host, _, ok := resolveInPod(pod, value); ok {
				value = filepath.Join(rootfs, host)
			} else {
				value = filepath.Join(rootfs, "not-in-the-pod", value)
			}
		}
		args = append(args, "--"+name+"="+value)
	}
	return append(args, "--bind-address=127.0.0.1", "--endpoint-reconciler-type=none", "--profiling=false"), generated
}

// startKubeadmCollector starts a collector whose k8s_audit receiver the kubeadm apiserver posts
// to: the harness's pipeline without the Events receiver (the testbed collector has it).
func startKubeadmCollector(t *testing.T, env *Env) *Collector {
	t.Helper()
	requireComponent(t, env, "receivers", "k8s_audit")
	cfg := env.CollectorConfig()
	cfg.Delete("receivers.k8s_event_spans")
	cfg.SetPipeline("receivers", "k8s_audit")
	return env.StartExtraCollector(t, "kubeadm", cfg)
}

// kubeconfigFiles lists the files a kubeconfig names (certificate-authority, client-certificate,
// client-key).
func kubeconfigFiles(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, m := range regexp.MustCompile(`(?m)^\s*(?:certificate-authority|client-certificate|client-key):\s*(\S+)`).FindAllSubmatch(b, -1) {
		files = append(files, string(m[1]))
	}
	if len(files) == 0 {
		t.Fatalf("%s names no certificate file", path)
	}
	return files
}

// checkSnippetAgreesWithTheDocs checks the snippet's audit flags against their one list,
// distribution/apiserver-flags.md (its code blocks' --audit-* lines), and its webhook kubeconfig
// path against the one the chart's notes tell users to write.
func checkSnippetAgreesWithTheDocs(t *testing.T, root string, snippet []byte) {
	t.Helper()
	var cfg struct {
		APIServer struct {
			ExtraArgs []struct{ Name, Value string } `json:"extraArgs"`
		} `json:"apiServer"`
	}
	if err := yaml.Unmarshal(snippet, &cfg); err != nil {
		t.Fatal(err)
	}
	var inSnippet []string
	for _, a := range cfg.APIServer.ExtraArgs {
		inSnippet = append(inSnippet, "--"+a.Name+"="+a.Value)
	}
	doc, err := os.ReadFile(filepath.Join(root, "distribution", "apiserver-flags.md"))
	if err != nil {
		t.Fatal(err)
	}
	var inDoc []string
	for _, block := range regexp.MustCompile("(?s)```\n(.*?)```").FindAllSubmatch(doc, -1) {
		for _, line := range strings.Split(string(block[1]), "\n") {
			if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "--audit-") {
				inDoc = append(inDoc, f[0])
			}
		}
	}
	sort.Strings(inSnippet)
	sort.Strings(inDoc)
	Check(t, "the snippet's flags are apiserver-flags.md's", slices.Equal(inSnippet, inDoc), "snippet %q\ndoc     %q", inSnippet, inDoc)
	notes, err := os.ReadFile(filepath.Join(root, "distribution", "helm", "kubetrail", "templates", "NOTES.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.APIServer.ExtraArgs {
		if a.Name == "audit-webhook-config-file" {
			Check(t, "the snippet's webhook kubeconfig is the file the chart's notes write", bytes.Contains(notes, []byte(`$kubeconfig := "`+a.Value+`"`)),
				"%s not in NOTES.txt", a.Value)
		}
	}
}
