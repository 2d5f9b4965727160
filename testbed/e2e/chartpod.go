//go:build e2e

package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// A ChartPod is the collector of an installed Helm release run as the release's pod would run it,
// on the testbed's loopback instead of a node:
//
//   - the container's args and env as the workload's pod template has them (read back from the
//     apiserver), the env's references resolved from the installed Secrets and the pod's IP
//     (status.podIP) a loopback address of its own, 127.0.0.N, so its fixed ports do not collide;
//   - every volumeMount laid out under a temp root at the path the pod spec mounts it: the
//     ConfigMap's and Secrets' keys (or their items) as files, emptyDirs and volume claims empty,
//     hostPaths the testbed's directories given. The args and the config refer to those paths
//     re-rooted there (the only change made: a mount path P becomes <root>P);
//   - in-cluster credentials of the pod's ServiceAccount: a TokenRequest token, the apiserver's
//     CA and the namespace at /var/run/secrets/kubernetes.io/serviceaccount (in a mount namespace
//     of its own, unshare(1)), KUBERNETES_SERVICE_HOST/PORT the apiserver's: every call it makes is
//     judged by the release's RBAC;
//   - the Services it dials by DNS name (the bundled Redis) resolved through an /etc/hosts of its
//     own, to the loopback address that Service's pod runs on here.
//
// Its environment is the pod spec's alone: nothing of the test's (no KUBECONFIG).
type ChartPod struct {
	Name    string
	IP      string // its POD_IP
	Root    string // where its mounts are
	LogPath string
	Config  string // the config as it ran (re-rooted paths)
	proc    *Process
}

// podTemplate is the part of a workload's pod template a ChartPod reads.
type podTemplate struct {
	ServiceAccountName string `json:"serviceAccountName"`
	// AutomountServiceAccountToken false: the kubelet mounts no token.
	AutomountServiceAccountToken *bool          `json:"automountServiceAccountToken"`
	Containers                   []podContainer `json:"containers"`
	Volumes                      []podVolume    `json:"volumes"`
}

type podContainer struct {
	Name         string   `json:"name"`
	Command      []string `json:"command"`
	Args         []string `json:"args"`
	Env          []envVar `json:"env"`
	VolumeMounts []struct {
		Name      string `json:"name"`
		MountPath string `json:"mountPath"`
	} `json:"volumeMounts"`
	Ports []struct {
		Name          string `json:"name"`
		ContainerPort int    `json:"containerPort"`
	} `json:"ports"`
}

// envVar is an EnvVar of a container.
type envVar struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	ValueFrom *struct {
		FieldRef *struct {
			FieldPath string `json:"fieldPath"`
		} `json:"fieldRef"`
		SecretKeyRef    *keyRef `json:"secretKeyRef"`
		ConfigMapKeyRef *keyRef `json:"configMapKeyRef"`
	} `json:"valueFrom"`
}

// envValue resolves an EnvVar of the workload's container as the kubelet would: a value, a key
// of a Secret or ConfigMap of ns, or a field of the pod (fields, by fieldPath). Anything else
// fails the test.
func (e *Env) envValue(t *testing.T, ns, workload string, ev envVar, fields map[string]string) string {
	t.Helper()
	switch f := ev.ValueFrom; {
	case f == nil:
		return ev.Value
	case f.SecretKeyRef != nil:
		return string(objectData(t, e, ns, "secret", f.SecretKeyRef.Name)[f.SecretKeyRef.Key])
	case f.ConfigMapKeyRef != nil:
		return string(objectData(t, e, ns, "configmap", f.ConfigMapKeyRef.Name)[f.ConfigMapKeyRef.Key])
	case f.FieldRef != nil:
		if v, ok := fields[f.FieldRef.FieldPath]; ok {
			return v
		}
	}
	t.Fatalf("%s: env %s: a reference the test does not resolve", workload, ev.Name)
	return ""
}

type keyRef struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

type keyPath struct {
	Key  string `json:"key"`
	Path string `json:"path"`
}

type podVolume struct {
	Name      string `json:"name"`
	ConfigMap *struct {
		Name  string    `json:"name"`
		Items []keyPath `json:"items"`
	} `json:"configMap"`
	Secret *struct {
		SecretName string    `json:"secretName"`
		Items      []keyPath `json:"items"`
	} `json:"secret"`
	EmptyDir *struct{} `json:"emptyDir"`
	HostPath *struct {
		Path string `json:"path"`
	} `json:"hostPath"`
	PersistentVolumeClaim *struct {
		ClaimName string `json:"claimName"`
	} `json:"persistentVolumeClaim"`
}

// workloadTemplate reads the pod template of a workload (statefulset/NAME, daemonset/NAME,
// deployment/NAME) and the names of its volume claim templates (a StatefulSet's).
func workloadTemplate(t *testing.T, env *Env, ns, workload string) (podTemplate, []string) {
	t.Helper()
	out, err := exec.Command(env.Kubectl, "--kubeconfig", env.Kubeconfig, "get", workload, "-n", ns, "-o", "json").Output()
	if err != nil {
		t.Fatalf("kubectl get %s -n %s: %v\n%s", workload, ns, err, stderrOf(err))
	}
	var w struct {
		Spec struct {
			Template struct {
				Spec podTemplate `json:"spec"`
			} `json:"template"`
			VolumeClaimTemplates []struct {
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			} `json:"volumeClaimTemplates"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(out, &w); err != nil {
		t.Fatalf("%s: %v", workload, err)
	}
	var claims []string
	for _, c := range w.Spec.VolumeClaimTemplates {
		claims = append(claims, c.Metadata.Name)
	}
	return w.Spec.Template.Spec, claims
}

// objectData is the data of a Secret (decoded) or a ConfigMap of the namespace.
func objectData(t *testing.T, env *Env, ns, kind, name string) map[string][]byte {
	t.Helper()
	out, err := exec.Command(env.Kubectl, "--kubeconfig", env.Kubeconfig, "get", kind, name, "-n", ns, "-o", "json").Output()
	if err != nil {
		t.Fatalf("kubectl get %s %s -n %s: %v\n%s", kind, name, ns, err, stderrOf(err))
	}
	var obj struct {
		Data map[string]string `json:"data"`
	}
	if err := json.Unmarshal(out, &obj); err != nil {
		t.Fatal(err)
	}
	data := map[string][]byte{}
	for k, v := range obj.Data {
		if kind == "secret" {
			b, err := base64.StdEncoding.DecodeString(v)
			if err != nil {
				t.Fatalf("secret %s key %s: %v", name, k, err)
			}
			data[k] = b
		} else {
			data[k] = []byte(v)
		}
	}
	return data
}

// writeVolume lays out the keys of a ConfigMap or Secret volume in dir: every key, or the items.
func writeVolume(t *testing.T, dir string, data map[string][]byte, items []keyPath) {
	t.Helper()
	if len(items) == 0 {
		for k := range data {
			items = append(items, keyPath{Key: k, Path: k})
		}
	}
	for _, it := range items {
		b, ok := data[it.Key]
		if !ok {
			t.Fatalf("volume item %s: no such key (the pod would not start)", it.Key)
		}
		p := filepath.Join(dir, it.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// Rerooter rewrites the mount paths in a text (args, config) to the same paths under a root: a
// mount path counts where it starts a path (after a quote, '=', space, '[' or a line start) and
// ends one ('/', a quote, space, ',', ']', '}' or the end).
type rerooter struct {
	re   *regexp.Regexp
	root string
}

func newRerooter(root string, mountPaths []string) rerooter {
	paths := slices.Clone(mountPaths)
	// Longest first: /etc/otelcol-kubetrail-tls before /etc/otelcol-kubetrail.
	sort.Slice(paths, func(i, j int) bool { return len(paths[i]) > len(paths[j]) })
	alt := make([]string, len(paths))
	for i, p := range paths {
		alt[i] = regexp.QuoteMeta(strings.TrimSuffix(p, "/"))
	}
	re := regexp.MustCompile(`(?m)(^|[\s"'=\[,])(` + strings.Join(alt, "|") + `)(/|$|[\s"',\]\}])`)
	return rerooter{re: re, root: root}
}

func (r rerooter) apply(s string) string {
	// Twice: a match consumes the character after it, which may start the next path.
	for range 2 {
		s = r.re.ReplaceAllString(s, "${1}"+r.root+"${2}${3}")
	}
	return s
}

// StartChartPod runs the collector of the workload (statefulset/NAME or daemonset/NAME) in the
// namespace as its pod would (see ChartPod). hostPaths maps a hostPath volume's path to the
// testbed directory that plays it; hosts maps DNS names to addresses for its /etc/hosts. The pod
// is stopped when the test ends.
func (e *Env) StartChartPod(t *testing.T, name, ns, workload string, ip string, hostPaths, hosts map[string]string) *ChartPod {
	t.Helper()
	tmpl, claims := workloadTemplate(t, e, ns, workload)
	if len(tmpl.Containers) != 1 {
		t.Fatalf("%s: %d containers; a ChartPod runs one", workload, len(tmpl.Containers))
	}
	c := tmpl.Containers[0]
	if len(c.Command) > 0 {
		t.Fatalf("%s: the container sets a command %v; the image's entrypoint is the collector", workload, c.Command)
	}
	root := filepath.Join(e.OutDir, "chartpod-"+name)
	_ = os.RemoveAll(root)
	p := &ChartPod{Name: name, IP: ip, Root: root, LogPath: filepath.Join(e.OutDir, "chartpod-"+name+".log")}

	volumes := map[string]podVolume{}
	for _, v := range tmpl.Volumes {
		volumes[v.Name] = v
	}
	var mounts []string
	for _, m := range c.VolumeMounts {
		dir := filepath.Join(root, m.MountPath)
		mounts = append(mounts, m.MountPath)
		v, ok := volumes[m.Name]
		switch {
		case !ok && slices.Contains(claims, m.Name):
			// A volume claim template: an empty volume of its own.
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		case !ok:
			t.Fatalf("%s: volumeMount %s has no volume", workload, m.Name)
		case v.ConfigMap != nil:
			writeVolume(t, dir, objectData(t, e, ns, "configmap", v.ConfigMap.Name), v.ConfigMap.Items)
		case v.Secret != nil:
			writeVolume(t, dir, objectData(t, e, ns, "secret", v.Secret.SecretName), v.Secret.Items)
		case v.EmptyDir != nil || v.PersistentVolumeClaim != nil:
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		case v.HostPath != nil:
			target, ok := hostPaths[v.HostPath.Path]
			if !ok {
				t.Fatalf("%s: hostPath %s: the test names no testbed directory for it", workload, v.HostPath.Path)
			}
			if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, dir); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("%s: volume %s is of a kind a ChartPod does not lay out", workload, m.Name)
		}
	}
	rr := newRerooter(root, mounts)

	// The config file the args name is rewritten in place (its copy under root).
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		args[i] = rr.apply(a)
		if path, ok := strings.CutPrefix(args[i], "--config="); ok {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%s: the config the args name: %v", workload, err)
			}
			p.Config = rr.apply(string(b))
			if err := os.WriteFile(path, []byte(p.Config), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}

	api, err := url.Parse(e.APIServer)
	if err != nil {
		t.Fatal(err)
	}
	podEnv := []string{"PATH=/usr/local/bin:/usr/bin:/bin",
		"KUBERNETES_SERVICE_HOST=" + api.Hostname(), "KUBERNETES_SERVICE_PORT=" + api.Port()}
	fields := map[string]string{"status.podIP": ip, "metadata.name": name, "metadata.namespace": ns}
	for _, ev := range c.Env {
		podEnv = append(podEnv, ev.Name+"="+e.envValue(t, ns, workload, ev, fields))
	}

	// The ServiceAccount's credentials, as the kubelet projects them; none when the pod spec says
	// so (an empty directory where they would be).
	sa := filepath.Join(root, "serviceaccount")
	if a := tmpl.AutomountServiceAccountToken; a != nil && !*a {
		if err := os.MkdirAll(sa, 0o755); err != nil {
			t.Fatal(err)
		}
	} else {
		e.writeToken(t, sa, ns, tmpl.ServiceAccountName)
	}

	hostsFile := writeHosts(t, filepath.Join(root, "hosts"), hosts)

	bin, wrapped := inMountNamespace(t, hostsFile, sa, e.CollectorBin, args)
	proc, err := StartProcessWithEnv("chartpod-"+name, p.LogPath, e.pidDir, podEnv, bin, wrapped...)
	if err != nil {
		t.Fatal(err)
	}
	p.proc = proc
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Logf("stop %s: %v", name, err)
		}
	})
	// Ready as the kubelet's readiness probe sees it: the health port answers 200.
	health := 0
	for _, port := range c.Ports {
		if port.Name == "health" {
			health = port.ContainerPort
		}
	}
	if health == 0 {
		t.Fatalf("%s: no health port", workload)
	}
	if err := waitHTTP(fmt.Sprintf("http://%s/", net.JoinHostPort(ip, fmt.Sprint(health))), proc, 60*time.Second); err != nil {
		t.Fatalf("%s: %v\n%s", name, err, proc.LogTail(30))
	}
	return p
}

// writeToken writes into dir what the kubelet projects for a pod of ServiceAccount ns/account: a
// TokenRequest token, the apiserver's CA and the namespace.
func (e *Env) writeToken(t *testing.T, dir, ns, account string) {
	t.Helper()
	token, err := exec.Command(e.Kubectl, "--kubeconfig", e.Kubeconfig, "create", "token", account, "-n", ns, "--duration", "2h").Output()
	if err != nil {
		t.Fatalf("TokenRequest for %s/%s: %v\n%s", ns, account, err, stderrOf(err))
	}
	ca, err := os.ReadFile(e.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	writeVolume(t, dir, map[string][]byte{"token": []byte(strings.TrimSpace(string(token))), "ca.crt": ca, "namespace": []byte(ns)}, nil)
}

// Stop stops the pod's collector (SIGTERM, as the kubelet does).
func (p *ChartPod) Stop() error { return p.proc.Stop(30 * time.Second) }

// Log is the collector's whole log.
func (p *ChartPod) Log() string {
	b, _ := os.ReadFile(p.LogPath)
	return string(b)
}

// waitHTTP polls url until it answers 200, p exits or timeout passes.
func waitHTTP(u string, p *Process, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: time.Second}
	for time.Now().Before(deadline) {
		if resp, err := client.Get(u); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if done, err := p.Exited(); done {
			return fmt.Errorf("exited (%v) before %s answered", err, u)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer 200 within %s", u, timeout)
}

// loopbackIP returns an address 127.0.0.N (N ≥ 20) where none of ports is taken: the address a
// ChartPod or a chart's Service plays. Each is handed out once per run.
func loopbackIP(ports ...int) (string, error) {
	loopbackMu.Lock()
	defer loopbackMu.Unlock()
	for n := 20; n < 255; n++ {
		ip := fmt.Sprintf("127.0.0.%d", n)
		if loopbackGiven[ip] {
			continue
		}
		free := true
		for _, port := range ports {
			ln, err := net.Listen("tcp", net.JoinHostPort(ip, fmt.Sprint(port)))
			if err != nil {
				free = false
				break
			}
			ln.Close()
		}
		if free {
			loopbackGiven[ip] = true
			return ip, nil
		}
	}
	return "", fmt.Errorf("no loopback address with ports %v free", ports)
}

var (
	loopbackMu    sync.Mutex
	loopbackGiven = map[string]bool{}
)

// StartChartRedis runs the release's bundled Redis (deployment/NAME) as its pod would: the
// container's args, with $(VAR) expanded from its env as the kubelet does, by the machine's
// redis-server, listening on ip at the container's port. Stopped when the test ends.
func (e *Env) StartChartRedis(t *testing.T, ns, workload, ip string) {
	t.Helper()
	tmpl, _ := workloadTemplate(t, e, ns, workload)
	if len(tmpl.Containers) != 1 || len(tmpl.Containers[0].Ports) == 0 {
		t.Fatalf("%s: want one container with a port", workload)
	}
	c := tmpl.Containers[0]
	vars := map[string]string{}
	for _, ev := range c.Env {
		vars[ev.Name] = e.envValue(t, ns, workload, ev, nil)
	}
	expand := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	var args []string
	for _, a := range c.Args {
		args = append(args, expand.ReplaceAllStringFunc(a, func(m string) string { return vars[m[2:len(m)-1]] }))
	}
	port := c.Ports[0].ContainerPort
	dir := filepath.Join(e.OutDir, "chartredis-"+ip)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server: %v (make test installs it)", err)
	}
	args = append(args, "--bind", ip, "--port", fmt.Sprint(port), "--dir", dir, "--daemonize", "no")
	proc, err := StartProcess("chartredis-"+ip, filepath.Join(dir, "redis.log"), e.pidDir, nil, bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proc.Stop(5 * time.Second) })
	if err := WaitTCP(net.JoinHostPort(ip, fmt.Sprint(port)), proc, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// StartAPIServer starts another kube-apiserver of the testbed's cluster (the same etcd, PKI and
// service-account keys: an HA pair) whose audit webhook is the kubeconfig given, with the audit
// policy given; hosts resolves the webhook's name (as cluster DNS would on a node). It returns the server's URL; stopped when the test ends. Writes made through it
// are audited to that webhook; the controllers keep talking to the first apiserver.
func (e *Env) StartAPIServer(t *testing.T, name, webhookKubeconfig, policy string, hosts map[string]string) string {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	pki := filepath.Join(e.StateDir, "pki")
	bin := filepath.Join(e.K8sBin, "kube-apiserver")
	etcd := e.Etcd
	if etcd == "" {
		t.Fatal("the control plane's env has no KUBETRAIL_ETCD (testbed/hack/cluster-up.sh writes it)")
	}
	args := []string{"--etcd-servers", etcd,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", fmt.Sprint(port),
		"--tls-cert-file", filepath.Join(pki, "apiserver.crt"), "--tls-private-key-file", filepath.Join(pki, "apiserver.key"),
		"--client-ca-file", filepath.Join(pki, "ca.crt"), "--authorization-mode", "Node,RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", filepath.Join(pki, "sa.pub"), "--service-account-signing-key-file", filepath.Join(pki, "sa.key"),
		"--service-cluster-ip-range", "10.96.0.0/16", "--endpoint-reconciler-type", "none",
		"--audit-policy-file", policy,
		"--audit-webhook-config-file", webhookKubeconfig,
		"--audit-webhook-mode", "batch", "--audit-webhook-batch-max-wait", "1s", "--audit-webhook-initial-backoff", "1s",
		"--profiling=false"}
	// The names the webhook's server has are resolved as the node's DNS would (cluster DNS).
	bin, args = inMountNamespace(t, writeHosts(t, filepath.Join(e.OutDir, "apiserver-"+name+".hosts"), hosts), "", bin, args)
	proc, err := StartProcess("apiserver-"+name, filepath.Join(e.OutDir, "apiserver-"+name+".log"), e.pidDir, nil, bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proc.Stop(15 * time.Second) })
	server := fmt.Sprintf("https://127.0.0.1:%d", port)
	deadline := time.Now().Add(90 * time.Second)
	for {
		out, err := exec.Command(e.Kubectl, "--kubeconfig", e.Kubeconfig, "--server", server, "get", "--raw", "/readyz").CombinedOutput()
		if err == nil && strings.TrimSpace(string(out)) == "ok" {
			return server
		}
		if done, werr := proc.Exited(); done || time.Now().After(deadline) {
			t.Fatalf("apiserver %s not ready (exited %v %v): %s\n%s", name, done, werr, out, proc.LogTail(30))
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// writeHosts writes the machine's /etc/hosts plus the names given (name → address) to path.
func writeHosts(t *testing.T, path string, hosts map[string]string) string {
	t.Helper()
	etcHosts, err := os.ReadFile("/etc/hosts")
	if err != nil {
		t.Fatal(err)
	}
	for host, addr := range hosts {
		etcHosts = fmt.Appendf(etcHosts, "%s\t%s\n", addr, host)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, etcHosts, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// inMountNamespace returns the command that runs bin with args in a mount namespace of its own
// (unshare(1)) where /etc/hosts is hostsFile and, when saDir is set, a fresh /run holds the
// ServiceAccount files at /var/run/secrets/kubernetes.io/serviceaccount, the path client-go's
// in-cluster config reads. Nothing of it is visible outside the process.
func inMountNamespace(t *testing.T, hostsFile, saDir, bin string, args []string) (string, []string) {
	t.Helper()
	const script = `set -e
if [ -n "$1" ]; then
  mount -t tmpfs -o size=1m,mode=755 kubetrail-pod /run
  mkdir -p /run/secrets/kubernetes.io/serviceaccount
  mount --bind "$1" /run/secrets/kubernetes.io/serviceaccount
fi
mount --bind "$0" /etc/hosts
shift
exec "$@"`
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatalf("unshare (util-linux): %v", err)
	}
	return unshare, append([]string{"--mount", "--propagation", "private", "/bin/sh", "-c", script, hostsFile, saDir, bin}, args...)
}
