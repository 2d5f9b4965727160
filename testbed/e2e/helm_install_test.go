//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/kubetrail/kubetrail/internal/model"
)

// The tests of this file install the chart with the README's own `helm install` commands into the
// testbed's apiserver (kwok's node takes the pods, which do not run), then run the collector as
// the chart's pod would (ChartPod: the installed ConfigMap and Secrets, the ServiceAccount's
// token and RBAC, nothing of the test's), and check that a scenario's spans reach Jaeger with no
// 401 or 403 in its log. The releases use the README's clusterName (prod-eu-1), so their spans
// never mix with the testbed collector's (cluster testbed); they run after the other tests.

// readmeCluster is the clusterName of the README's install commands.
const readmeCluster = "prod-eu-1"

// installDocs are the pages whose `helm install kubetrail` commands the tests run as written.
var installDocs = []string{"README.md", "distribution/helm/kubetrail/README.md"}

// releasedChart is the chart reference the install commands use: the released chart in its OCI
// registry. The tests install the checkout's chart in its place, after checking that the
// command's --version is the checkout's Chart.yaml version (so the docs name the release that
// holds this chart).
const releasedChart = "oci://ghcr.io/kubetrail/charts/kubetrail"

// readmeInstall returns the docs' `helm install` command for mode, as helm's arguments: the
// fenced sh blocks of installDocs whose command starts with `helm install kubetrail`; a block is
// the daemonset one when it sets mode=daemonset, the managed one when it sets mode=managed, and
// the gateway one otherwise (kafka likewise). One per mode (a repetition must be identical). The
// released chart's reference and its --version become the checkout's chart directory.
func readmeInstall(t *testing.T, root, mode string) []string {
	t.Helper()
	var text strings.Builder
	for _, doc := range installDocs {
		b, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		text.Write(b)
	}
	var found [][]string
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(text.String(), -1) {
		// Join continuation lines, drop comments, split into words.
		text := strings.ReplaceAll(block[1], "\\\n", " ")
		for _, line := range strings.Split(text, "\n") {
			words, err := shellWords(line)
			if err != nil {
				t.Fatalf("README.md: %q: %v", line, err)
			}
			// The install commands of the released chart; a values file's example installs the
			// checkout's chart with -f (distribution/examples_test.go renders those).
			if len(words) < 4 || words[0] != "helm" || words[1] != "install" || words[2] != "kubetrail" || words[3] != releasedChart {
				continue
			}
			m := "gateway"
			for _, w := range words {
				if w == "mode=daemonset" || w == "mode=managed" || w == "mode=kafka" {
					m = strings.TrimPrefix(w, "mode=")
				}
			}
			if m == mode {
				found = append(found, words[1:])
			}
		}
	}
	// The laptop section repeats a command as written: every occurrence must be the same.
	found = slices.CompactFunc(found, slices.Equal)
	if len(found) != 1 {
		t.Fatalf("%v: %d different `helm install kubetrail` commands for mode %s, want 1: %q", installDocs, len(found), mode, found)
	}
	return localChart(t, root, found[0])
}

// localChart replaces the released chart's reference in an install command (helm's arguments
// after "helm") with the checkout's chart, and drops its --version once it is the checkout's.
func localChart(t *testing.T, root string, args []string) []string {
	t.Helper()
	if len(args) < 3 || args[2] != releasedChart {
		return args
	}
	chart, err := os.ReadFile(filepath.Join(root, "distribution/helm/kubetrail/Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^version: *"?([^"\s]+)"?`).FindSubmatch(chart)
	if m == nil {
		t.Fatal("Chart.yaml has no version")
	}
	out := []string{args[0], args[1], "distribution/helm/kubetrail"}
	version := ""
	for i := 3; i < len(args); i++ {
		if args[i] == "--version" && i+1 < len(args) {
			version = args[i+1]
			i++
			continue
		}
		out = append(out, args[i])
	}
	if version != string(m[1]) {
		t.Fatalf("the install command %q installs chart version %q; the checkout's Chart.yaml is %s", args, version, m[1])
	}
	return out
}

// shellWords splits a command line as sh would for the quoting the README uses: blanks separate
// words, '…' and "…" quote, # starts a comment.
func shellWords(line string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'' || c == '"':
			j := strings.IndexByte(line[i+1:], c)
			if j < 0 {
				return nil, fmt.Errorf("unterminated %c", c)
			}
			cur.WriteString(line[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '#' && !inWord:
			i = len(line)
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// chartRelease is a release installed into the testbed by a test.
type chartRelease struct {
	env         *Env
	helm        string
	name, ns    string
	mode        string
	notes       string // what `helm install` printed after NOTES:
	uninstalled bool
}

// installREADME runs the README's install command for mode, from the repository root, against
// the testbed (--kubeconfig), with otlp.endpoint the testbed's Jaeger: the only value added but
// for the test's own sets (kafka.brokers, which only the test can know). The release is
// uninstalled when the test ends, if the test did not.
func installREADME(t *testing.T, env *Env, mode string, sets ...string) *chartRelease {
	t.Helper()
	args := readmeInstall(t, env.Root, mode)
	r := &chartRelease{env: env, helm: helmBinary(t), name: args[1], mode: mode}
	for i, a := range args {
		if (a == "-n" || a == "--namespace") && i+1 < len(args) {
			r.ns = args[i+1]
		}
	}
	if r.ns == "" {
		t.Fatalf("the README's install command names no namespace: %q", args)
	}
	args = append(args, "--kubeconfig", env.Kubeconfig, "--set", "otlp.endpoint="+env.Jaeger.OTLPGRPC)
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	out := r.run(t, args...)
	_, r.notes, _ = strings.Cut(out, "NOTES:\n")
	t.Cleanup(func() {
		if !r.uninstalled {
			_, _ = exec.Command(r.helm, "uninstall", r.name, "-n", r.ns, "--kubeconfig", env.Kubeconfig, "--wait", "--timeout", "60s").CombinedOutput()
		}
		// What uninstall leaves on purpose (the volume claims) is deleted for the next test.
		_, _ = env.RunKubectl("delete", "pvc", "--all", "-n", r.ns, "--wait=false")
	})
	return r
}

// run runs helm from the repository root and returns its output; a failure fails the test.
func (r *chartRelease) run(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(r.helm, args...)
	cmd.Dir = r.env.Root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// secretData returns the data of a Secret of the release's namespace, decoded.
func (r *chartRelease) secretData(t *testing.T, name string) map[string][]byte {
	return objectData(t, r.env, r.ns, "secret", name)
}

// uninstall stops the release's pods as the kubelet would before their RBAC goes (SIGTERM, then
// their whole log is checked for 401/403: shutdown included), then runs helm uninstall.
func (r *chartRelease) uninstall(t *testing.T, pods ...*ChartPod) {
	t.Helper()
	for _, p := range pods {
		if err := p.Stop(); err != nil {
			t.Errorf("stop %s: %v", p.Name, err)
		}
		checkNoAuthErrors(t, p)
	}
	r.run(t, "uninstall", r.name, "-n", r.ns, "--kubeconfig", r.env.Kubeconfig, "--wait", "--timeout", "60s")
	r.uninstalled = true
}

// checkNoAuthErrors checks that the pod's log has no 401 or 403: nothing it called was refused
// by the apiserver (RBAC) or by a peer.
func checkNoAuthErrors(t *testing.T, p *ChartPod) {
	t.Helper()
	var bad []string
	for _, line := range strings.Split(p.Log(), "\n") {
		l := strings.ToLower(line)
		if strings.Contains(l, "forbidden") || strings.Contains(l, "unauthorized") || regexp.MustCompile(`\b(401|403)\b`).MatchString(l) {
			bad = append(bad, truncate(line, 400))
		}
	}
	Check(t, p.Name+" was refused nothing (no 401/403 in its log)", len(bad) == 0, "%d lines:\n%s", len(bad), strings.Join(bad, "\n"))
}

// leftovers lists, after uninstall, every object in the namespace (of every listable kind but
// Events, and but what Kubernetes puts in every namespace) and the cluster-scoped objects that
// carry the release's label.
func (r *chartRelease) leftovers(t *testing.T) []string {
	t.Helper()
	kinds, err := r.env.RunKubectl("api-resources", "--verbs=list", "--namespaced", "-o", "name")
	if err != nil {
		t.Fatalf("kubectl api-resources: %v\n%s", err, kinds)
	}
	var list []string
	for _, k := range strings.Fields(kinds) {
		if k != "events" && k != "events.events.k8s.io" {
			list = append(list, k)
		}
	}
	// stdout only: kubectl warns on stderr about deprecated kinds it lists (v1 Endpoints).
	cmd := exec.Command(r.env.Kubectl, "--kubeconfig", r.env.Kubeconfig, "get", strings.Join(list, ","), "-n", r.ns, "-o", "name")
	b, err := cmd.Output()
	out := string(b)
	if err != nil {
		t.Fatalf("kubectl get all kinds -n %s: %v\n%s", r.ns, err, stderrOf(err))
	}
	var left []string
	for _, o := range strings.Fields(out) {
		if o == "configmap/kube-root-ca.crt" || o == "serviceaccount/default" {
			continue
		}
		left = append(left, o)
	}
	cluster, err := r.env.RunKubectl("get", "clusterroles,clusterrolebindings", "-l", "app.kubernetes.io/instance="+r.name, "-o", "name")
	if err != nil {
		t.Fatalf("kubectl get clusterroles: %v\n%s", err, cluster)
	}
	return append(left, strings.Fields(cluster)...)
}

// checkLeftovers checks that after uninstall only objects whose name starts with keep are left
// ("" for none) and that the notes say so (notesSay is in them).
func (r *chartRelease) checkLeftovers(t *testing.T, keep, notesSay string) {
	t.Helper()
	left := r.leftovers(t)
	var unexpected []string
	for _, o := range left {
		if keep == "" || !strings.HasPrefix(o, keep) {
			unexpected = append(unexpected, o)
		}
	}
	Check(t, "helm uninstall leaves only what the notes say ("+r.mode+")", len(unexpected) == 0, "left: %v", left)
	Check(t, "the notes say what uninstall leaves ("+r.mode+")", strings.Contains(r.notes, notesSay), "no %q in the notes:\n%s", notesSay, r.notes)
}

// notesKubeconfig runs the commands the install notes print to copy the apiserver's webhook
// kubeconfig onto a control-plane node (kubectl … | base64 -d > FILE; chmod 600 FILE), with FILE
// a path of the test's, and returns that path.
func (r *chartRelease) notesKubeconfig(t *testing.T) string {
	t.Helper()
	const nodePath = "/etc/kubernetes/kubetrail-audit-webhook.yaml"
	var cmds []string
	lines := strings.Split(r.notes, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "kubectl ") && !strings.HasPrefix(l, "chmod ") {
			continue // prose, which may name the path too
		}
		for strings.HasSuffix(l, "\\") && i+1 < len(lines) {
			i++
			l = strings.TrimSuffix(l, "\\") + " " + strings.TrimSpace(lines[i])
		}
		if strings.Contains(l, nodePath) {
			cmds = append(cmds, l)
		}
	}
	if len(cmds) != 2 {
		t.Fatalf("want the notes' two commands writing %s (copy, chmod), got %q in:\n%s", nodePath, cmds, r.notes)
	}
	path := filepath.Join(t.TempDir(), "kubetrail-audit-webhook.yaml")
	script := strings.ReplaceAll(strings.Join(cmds, "\n"), nodePath, path)
	cmd := exec.Command("/bin/bash", "-euo", "pipefail", "-c", script)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+r.env.Kubeconfig, "PATH="+filepath.Dir(r.env.Kubectl)+":"+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the notes' commands: %v\n%s\n%s", err, script, out)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the notes' kubeconfig %s: %v %v", path, fi, err)
	}
	return path
}

// kubeconfigServerHost is the host of the (only) cluster's server in a kubeconfig file.
func kubeconfigServerHost(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var kc struct {
		Clusters []struct {
			Cluster struct {
				Server string `json:"server"`
			} `json:"cluster"`
		} `json:"clusters"`
	}
	if err := yaml.Unmarshal(b, &kc); err != nil || len(kc.Clusters) != 1 {
		t.Fatalf("kubeconfig %s: %v", path, err)
	}
	host := regexp.MustCompile(`^https?://([^:/]+)`).FindStringSubmatch(kc.Clusters[0].Cluster.Server)
	if host == nil {
		t.Fatalf("kubeconfig %s: server %q", path, kc.Clusters[0].Cluster.Server)
	}
	return host[1]
}

// kubectlVia runs kubectl as the testbed's admin through the apiserver at server.
func kubectlVia(t *testing.T, env *Env, server string, args ...string) string {
	t.Helper()
	out, err := env.RunKubectl(append([]string{"--server", server}, args...)...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// clusterSpans are the spans of cluster in Jaeger that start in w.
func clusterSpans(ss Spans, cluster string) Spans {
	return ss.WithAttr(model.AttrClusterName, cluster)
}

// TestHelmInstallGateway installs the README's gateway command, runs its StatefulSet's collector
// as the pod would and the bundled Redis as its pod would, starts a kube-apiserver of the
// cluster whose audit webhook is the kubeconfig the notes' commands copy, and checks that writes
// through it become spans over mTLS, Event spans arrive through the elected watcher, owner
// lookups succeed, all under the chart's RBAC; then `helm upgrade` keeps every generated secret
// and the apiserver keeps delivering, and `helm uninstall` leaves only what the notes say.
func TestHelmInstallGateway(t *testing.T) {
	AfterOthers(t)
	env := Testbed(t)
	start := time.Now()
	rel := installREADME(t, env, "gateway")
	full := rel.name // the chart's fullname when the release is named kubetrail

	redisIP, err := loopbackIP(6379)
	if err != nil {
		t.Fatal(err)
	}
	env.StartChartRedis(t, rel.ns, "deployment/"+full+"-redis", redisIP)
	podIP, err := loopbackIP(9880, 13133, 8888)
	if err != nil {
		t.Fatal(err)
	}
	svcHost := fmt.Sprintf("%s.%s.svc", full, rel.ns)
	hosts := map[string]string{fmt.Sprintf("%s-redis.%s.svc", full, rel.ns): redisIP}
	pod := env.StartChartPod(t, "gateway-0", rel.ns, "statefulset/"+full, podIP, nil, hosts)
	Check(t, "the gateway pod's config is the chart's: TLS webhook, Redis ID map, elected Events watcher",
		strings.Contains(pod.Config, "client_ca_file:") && strings.Contains(pod.Config, "backend: redis") && strings.Contains(pod.Config, "leader_election:"),
		"config:\n%s", pod.Config)

	// The apiserver's side: the kubeconfig exactly as the notes' commands copy it. Its server is
	// the Service's DNS name, which the node resolves (as with cluster DNS) to the pod here.
	kubeconfig := rel.notesKubeconfig(t)
	Check(t, "the notes' kubeconfig names the Service", kubeconfigServerHost(t, kubeconfig) == svcHost,
		"server host %q, want %q", kubeconfigServerHost(t, kubeconfig), svcHost)
	api2 := env.StartAPIServer(t, "helm-gateway", kubeconfig, filepath.Join(env.Root, "distribution", "audit-policy.yaml"), map[string]string{svcHost: podIP})

	// Writes through that apiserver: a Deployment (its ReplicaSet and Pods are the controllers',
	// written through the first apiserver and not audited here), then a change to one of its
	// Pods, whose owner (the ReplicaSet) the processor must look up under the RBAC.
	ns := "helm-gateway"
	runChartScenario(t, env, api2, ns, start)
	holder, err := env.RunKubectl("get", "lease", full+"-events", "-n", rel.ns, "-o", "jsonpath={.spec.holderIdentity}")
	Check(t, "the pod holds the chart's Events Lease (leader election under the chart's Role)", err == nil && holder != "",
		"holder %q, err %v", holder, err)

	// helm upgrade with a changed value: every generated secret stays, the apiserver keeps
	// delivering with the kubeconfig it has.
	before := map[string]map[string][]byte{}
	for _, s := range []string{full + "-tls", full + "-apiserver-kubeconfig", full + "-redis"} {
		before[s] = rel.secretData(t, s)
	}
	// The same upgrade switches the viewer on, as the chart's README says, reading the testbed's
	// Jaeger (its query API is where the release's otlp.endpoint delivers).
	upgrade := rel.run(t, "upgrade", rel.name, "distribution/helm/kubetrail", "-n", rel.ns, "--kubeconfig", env.Kubeconfig, "--reuse-values", "--set", "ownerWait=4s",
		"--set", "viewer.enabled=true", "--set", "viewer.jaegerURL="+env.Jaeger.QueryURL)
	_, upgradeNotes, _ := strings.Cut(upgrade, "NOTES:\n")
	for s, data := range before {
		after := rel.secretData(t, s)
		for _, k := range slices.Sorted(maps.Keys(data)) {
			if s == full+"-apiserver-kubeconfig" && k == "audit-webhook-kubeconfig.yaml" {
				// The server may now be the Service's ClusterIP (the notes say so); the
				// credentials in it are client.crt/client.key, compared below, and the CA.
				continue
			}
			Check(t, "helm upgrade keeps "+s+" "+k, bytes.Equal(data[k], after[k]), "changed")
		}
	}
	// The pod restarts on the new config (its checksum annotation changed), as the kubelet would
	// restart it; the apiserver is not touched.
	if err := pod.Stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
	checkNoAuthErrors(t, pod)
	pod = env.StartChartPod(t, "gateway-0-upgraded", rel.ns, "statefulset/"+full, podIP, nil, hosts)
	Check(t, "the upgraded config is running", strings.Contains(pod.Config, "owner_wait: 4s"), "config:\n%s", pod.Config)
	t1 := time.Now()
	kubectlVia(t, env, api2, "create", "configmap", "after-upgrade", "-n", ns, "--from-literal=k=v")
	env.WaitSpans(t, Window{Start: t1, End: time.Now().Add(time.Minute)}, 90*time.Second, func(ss Spans) error {
		if len(clusterSpans(ss, readmeCluster).ForObject("ConfigMap", ns, "after-upgrade").OfType(model.SpanTypeAudit)) == 0 {
			return fmt.Errorf("no audit span of ConfigMap %s/after-upgrade after the upgrade", ns)
		}
		return nil
	})

	checkChartViewer(t, env, rel.ns, "deployment/"+full+"-viewer", ns, upgradeNotes)

	// helm uninstall leaves what the notes say it leaves: the volume claims.
	rel.uninstall(t, pod)
	rel.checkLeftovers(t, "persistentvolumeclaim/state-"+full+"-", "kubectl -n "+rel.ns+" delete pvc -l app.kubernetes.io/instance="+rel.name)
}

// checkChartViewer runs the installed viewer's container as its pod would (the command is the
// image's /kubetrail, i.e. bin/kubetrail; its arguments and environment as installed; only the
// listen address moved to a free loopback port) and reads, through it, the story of the
// Deployment runChartScenario wrote in ns: the search page lists the label patch of its Pod, and
// the Deployment's object page holds its ReplicaSet and Pods. The notes say how to open it.
func checkChartViewer(t *testing.T, env *Env, releaseNS, workload, ns, notes string) {
	t.Helper()
	tmpl, _ := workloadTemplate(t, env, releaseNS, workload)
	if len(tmpl.Containers) != 1 || !slices.Equal(tmpl.Containers[0].Command, []string{"/kubetrail"}) {
		t.Fatalf("%s: containers %+v, want one running /kubetrail", workload, tmpl.Containers)
	}
	Check(t, "the viewer's pods get no Kubernetes token", tmpl.AutomountServiceAccountToken != nil && !*tmpl.AutomountServiceAccountToken, "%v", tmpl.AutomountServiceAccountToken)
	c := tmpl.Containers[0]
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	var args []string
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--listen=") {
			a = fmt.Sprintf("--listen=127.0.0.1:%d", port)
		}
		args = append(args, a)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(env.Root, "bin", "kubetrail"), args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for _, e := range c.Env {
		cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if code, _ := get("/healthz"); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the viewer's /healthz does not answer; it said:\n%s", stderr.String())
		}
	}
	// The label patch: this collector saw no earlier write of the Pod (the controllers' went
	// through the first apiserver), so the row has no diff (base_not_seen), only the write.
	code, feed := get("/?namespace=" + ns + "&object=pods&verb=patch")
	_ = os.WriteFile(filepath.Join(env.OutDir, "helm-viewer-search.html"), []byte(feed), 0o644)
	Check(t, "the installed viewer's search page, read from Jaeger, lists the label patch of the Deployment's Pod",
		code == http.StatusOK && strings.Contains(feed, `">Pod `+ns+`/web-`) && strings.Contains(feed, `<td class="verb">patch</td>`),
		"%d, the viewer said %s; the page is helm-viewer-search.html in the e2e output", code, stderr.String())
	code, obj := get("/object?kind=Deployment&namespace=" + ns + "&name=web")
	Check(t, "its object page: the Deployment's story with its ReplicaSet and Pods",
		code == http.StatusOK && strings.Contains(obj, `data-object="ReplicaSet `+ns+`/web-`) && strings.Contains(obj, `data-object="Pod `+ns+`/web-`), "%d\n%s", code, cliHead(obj))
	Check(t, "the notes say how to open the viewer", strings.Contains(notes, "port-forward svc/"+strings.TrimPrefix(workload, "deployment/")+" 7474:7474"), "%s", notes)
}

// runChartScenario writes, through the apiserver at server, a namespace with a Deployment of two
// replicas, then a label on one of its Pods, and checks the spans of cluster prod-eu-1: the audit
// spans of both writes, the Pod's window span in its Deployment's trace (through its
// ReplicaSet, which the processor looks up when it was not in the stream) and the Events' spans.
func runChartScenario(t *testing.T, env *Env, server, ns string, start time.Time) {
	t.Helper()
	kubectlVia(t, env, server, "create", "namespace", ns)
	t.Cleanup(func() { _, _ = env.RunKubectl("delete", "namespace", ns, "--wait=false") })
	kubectlVia(t, env, server, "create", "deployment", "web", "-n", ns, "--image=registry.example/web:1", "--replicas=2")
	pods := waitPods(t, env, ns, "app=web", 2)
	kubectlVia(t, env, server, "label", "pod", pods[0], "-n", ns, "kubetrail.io/touched=yes")

	w := Window{Start: start, End: time.Now().Add(2 * time.Minute)}
	spans := env.WaitSpans(t, w, 90*time.Second, func(ss Spans) error {
		ss = clusterSpans(ss, readmeCluster)
		if len(ss.ForObject("Deployment", ns, "web").OfType(model.SpanTypeAudit)) == 0 {
			return fmt.Errorf("no audit span of Deployment %s/web", ns)
		}
		if len(ss.ForObject("Pod", ns, pods[0]).OfType(model.SpanTypeAudit)) == 0 {
			return fmt.Errorf("no audit span of Pod %s/%s", ns, pods[0])
		}
		if len(ss.OfType(model.SpanTypeEvent).InNamespace(ns)) == 0 {
			return fmt.Errorf("no Event span in %s", ns)
		}
		return nil
	})
	spans = clusterSpans(spans, readmeCluster)
	dep := spans.ForObject("Deployment", ns, "web").OfType(model.SpanTypeObject)
	pod0 := spans.ForObject("Pod", ns, pods[0]).OfType(model.SpanTypeObject)
	Check(t, ns+": the Pod's window span is in its Deployment's trace (owners looked up under the chart's RBAC)",
		len(dep) > 0 && len(pod0) > 0 && pod0[0].TraceID == dep[0].TraceID,
		"Deployment window spans %v, Pod window spans %v", dep, pod0)
	Check(t, ns+": Event spans arrive (list/watch under the chart's RBAC)",
		len(spans.OfType(model.SpanTypeEvent).InNamespace(ns)) > 0, "none in %s", ns)
}

// waitPods waits for n Pods matching selector in ns and returns their names, sorted.
func waitPods(t *testing.T, env *Env, ns, selector string, n int) []string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := env.RunKubectl("get", "pods", "-n", ns, "-l", selector, "-o", "jsonpath={.items[*].metadata.name}")
		names := strings.Fields(out)
		if err == nil && len(names) >= n {
			sort.Strings(names)
			return names
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d pods %s in %s after 60 s: %v %s", len(names), selector, ns, err, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestHelmInstallDaemonset installs the README's daemonset command and runs its DaemonSet's
// collector as the pod on a control-plane node would: its hostPath for the audit log is the
// directory where the testbed's apiserver writes its own (--audit-log-path), its state hostPath a
// directory of the test's. Writes through the apiserver become spans; uninstall leaves nothing.
func TestHelmInstallDaemonset(t *testing.T) {
	AfterOthers(t)
	env := Testbed(t)
	start := time.Now()
	rel := installREADME(t, env, "daemonset")
	full := rel.name
	redisIP, err := loopbackIP(6379)
	if err != nil {
		t.Fatal(err)
	}
	env.StartChartRedis(t, rel.ns, "deployment/"+full+"-redis", redisIP)
	podIP, err := loopbackIP(13133, 8888)
	if err != nil {
		t.Fatal(err)
	}
	// The apiserver writes <state>/audit.log; the chart reads /var/log/kubernetes/audit/audit.log.
	hostPaths := map[string]string{
		"/var/log/kubernetes/audit":  filepath.Dir(env.AuditLog()), // daemonset.auditLogPath's directory
		"/var/lib/otelcol-kubetrail": t.TempDir(),                  // daemonset.stateHostPath
	}
	hosts := map[string]string{fmt.Sprintf("%s-redis.%s.svc", full, rel.ns): redisIP}
	pod := env.StartChartPod(t, "daemonset", rel.ns, "daemonset/"+full, podIP, hostPaths, hosts)
	Check(t, "the daemonset pod reads the audit log file", strings.Contains(pod.Config, "/var/log/kubernetes/audit/audit.log"), "config:\n%s", pod.Config)

	runChartScenario(t, env, env.APIServer, "helm-daemonset", start)

	rel.uninstall(t, pod)
	rel.checkLeftovers(t, "", "it leaves the read positions and the queue")
}

// TestHelmInstallManaged installs the README's managed command (OTLP logs with a client
// certificate) and runs its collector as the pod would. The shipper is the managed clusters'
// forwarder (distribution/examples/managed/forwarder/eks-cloudwatch.yaml: its otlp_grpc exporter,
// queue and storage as written) in otelcol-kubetrail, its cloud receiver swapped for file_log on
// the testbed's audit log and on a recorded audit event of its own; it sends with the client
// certificate, key and CA the notes' commands copy, and the server name the notes give. The same
// forwarder without the client certificate is refused: its recorded event never becomes a span.
// The forwarder's StatefulSet and NetworkPolicy values are checked against the release.
func TestHelmInstallManaged(t *testing.T) {
	AfterOthers(t)
	env := Testbed(t)
	requireComponent(t, env, "receivers", "file_log")
	start := time.Now()
	rel := installREADME(t, env, "managed")
	full := rel.name
	redisIP, err := loopbackIP(6379)
	if err != nil {
		t.Fatal(err)
	}
	env.StartChartRedis(t, rel.ns, "deployment/"+full+"-redis", redisIP)
	podIP, err := loopbackIP(4317, 4318, 13133, 8888)
	if err != nil {
		t.Fatal(err)
	}
	hosts := map[string]string{fmt.Sprintf("%s-redis.%s.svc", full, rel.ns): redisIP}
	pod := env.StartChartPod(t, "managed-0", rel.ns, "statefulset/"+full, podIP, nil, hosts)

	// The shipper's files, by the notes' own commands, in a directory of the test's.
	dir := t.TempDir()
	var cmds []string
	for _, l := range strings.Split(rel.notes, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "kubectl ") && strings.Contains(l, "base64 -d > ") {
			cmds = append(cmds, l)
		}
	}
	Check(t, "the notes print the three commands that copy the shipper's files", len(cmds) == 3, "%q", cmds)
	cmd := exec.Command("/bin/bash", "-euo", "pipefail", "-c", strings.Join(cmds, "\n"))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig, "PATH="+filepath.Dir(env.Kubectl)+":"+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the notes' commands: %v\n%s", err, out)
	}
	serverName := regexp.MustCompile(`Give it the server name\s+(\S+?),`).FindStringSubmatch(rel.notes)
	if serverName == nil {
		t.Fatalf("the notes name no server name:\n%s", rel.notes)
	}
	// One recorded audit event for each forwarder, of an object only it sends.
	const fwdNS = "helm-managed-forwarded"
	withCert, withoutCert := filepath.Join(dir, "with-cert.log"), filepath.Join(dir, "without-cert.log")
	for path, name := range map[string]string{withCert: "sent-with-cert", withoutCert: "sent-without-cert"} {
		if err := os.WriteFile(path, recordedAuditEvent(t, fwdNS, name, time.Now()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	recorded := func(path string) map[string]any {
		return map[string]any{"include": []any{path}, "start_at": "beginning", "max_log_size": filelogMaxLogSize}
	}
	tlsFiles := forwarderTLS{ca: filepath.Join(dir, "ca.crt"), cert: filepath.Join(dir, "client.crt"), key: filepath.Join(dir, "client.key"), serverName: serverName[1]}
	shipper := env.StartExtraCollector(t, "helm-shipper", forwarderConfig(t, env, "eks-cloudwatch.yaml", podIP+":4317", tlsFiles, map[string]any{
		"file_log":          map[string]any{"include": []any{env.AuditLog()}, "start_at": "end", "max_log_size": filelogMaxLogSize},
		"file_log/recorded": recorded(withCert),
	}))
	noCert := tlsFiles
	noCert.cert, noCert.key = "", ""
	intruder := env.StartExtraCollector(t, "helm-shipper-no-cert", forwarderConfig(t, env, "eks-cloudwatch.yaml", podIP+":4317", noCert, map[string]any{
		"file_log/recorded": recorded(withoutCert),
	}))

	runChartScenario(t, env, env.APIServer, "helm-managed", start)
	spans := env.WaitSpans(t, Window{Start: start, End: time.Now().Add(time.Minute)}, 60*time.Second, func(ss Spans) error {
		if len(clusterSpans(ss, readmeCluster).ForObject("ConfigMap", fwdNS, "sent-with-cert").OfType(model.SpanTypeAudit)) != 1 {
			return fmt.Errorf("no audit span of the forwarder's recorded ConfigMap %s/sent-with-cert", fwdNS)
		}
		return nil
	})
	Check(t, "the shipper was refused nothing", !shipper.LogContains("Unauthenticated") && !shipper.LogContains("certificate"),
		"shipper log:\n%s", shipper.LogTail(20))
	Check(t, "a forwarder without the client certificate puts nothing in Jaeger",
		len(clusterSpans(spans, readmeCluster).ForObject("ConfigMap", fwdNS, "sent-without-cert")) == 0, "%v",
		clusterSpans(spans, readmeCluster).ForObject("ConfigMap", fwdNS, "sent-without-cert"))
	// The server's alert, or, when the server closed the connection before the client read the
	// alert, the handshake's write failing (grpc's createTransport is the TLS handshake).
	refused := regexp.MustCompile(`(?i)certificate required|bad certificate|handshake failure|authentication handshake failed|createTransport failed to connect[^\n]*(broken pipe|connection reset by peer)`)
	intruderLog, _ := os.ReadFile(intruder.LogPath)
	Check(t, "a forwarder without the client certificate is refused in the TLS handshake", refused.Match(intruderLog),
		"its log:\n%s", intruder.LogTail(20))
	checkForwarderManifests(t, env, rel)

	rel.uninstall(t, pod)
	rel.checkLeftovers(t, "persistentvolumeclaim/state-"+full+"-", "kubectl -n "+rel.ns+" delete pvc -l app.kubernetes.io/instance="+rel.name)
}

// TestHelmInstallKafka installs the README's kafka command with the testbed's broker as
// kafka.brokers, creates the topic as the notes' kafka-topics.sh command says (its name and
// partitions, on testbed/cmd/kafka), and runs both tiers as their pods would: the edge's
// StatefulSet (no ServiceAccount token: it calls no API) behind a kube-apiserver whose audit
// webhook is the kubeconfig the notes' commands copy, and the processing Deployment's collector.
// Writes through that apiserver become spans with owners looked up under the chart's RBAC; with
// the processing pod stopped, a write is still answered (the apiserver saw no refusal) and its
// span arrives once a new processing pod starts. Uninstall leaves nothing in the cluster, and the
// notes say what stays in Kafka.
func TestHelmInstallKafka(t *testing.T) {
	AfterOthers(t)
	env := Testbed(t)
	requireComponent(t, env, "receivers", "kafka")
	requireComponent(t, env, "exporters", "kafka")
	start := time.Now()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	broker := fmt.Sprintf("127.0.0.1:%d", port)
	rel := installREADME(t, env, "kafka", "kafka.brokers={"+broker+"}")
	full := rel.name

	// The topic, as the notes' command creates it.
	create := regexp.MustCompile(`kafka-topics\.sh --bootstrap-server (\S+) --create --topic (\S+) \\\s*--partitions (\d+)`).FindStringSubmatch(rel.notes)
	if create == nil {
		t.Fatalf("the notes print no kafka-topics.sh --create command:\n%s", rel.notes)
	}
	Check(t, "the notes' topic command names the release's brokers", create[1] == broker, "bootstrap %q, want %q", create[1], broker)
	partitions, _ := strconv.Atoi(create[3])
	if got := startKafka(t, env, create[2], partitions, "-ports", strconv.Itoa(port)); got != broker {
		t.Fatalf("broker at %s, want %s", got, broker)
	}

	redisIP, err := loopbackIP(6379)
	if err != nil {
		t.Fatal(err)
	}
	env.StartChartRedis(t, rel.ns, "deployment/"+full+"-redis", redisIP)
	hosts := map[string]string{fmt.Sprintf("%s-redis.%s.svc", full, rel.ns): redisIP}
	edgeIP, err := loopbackIP(9880, 13133, 8888)
	if err != nil {
		t.Fatal(err)
	}
	edge := env.StartChartPod(t, "kafka-edge-0", rel.ns, "statefulset/"+full, edgeIP, nil, hosts)
	Check(t, "the edge's config forwards the webhook to Kafka, acknowledged by every in-sync replica",
		strings.Contains(edge.Config, "client_ca_file:") && strings.Contains(edge.Config, "required_acks: all") && !strings.Contains(edge.Config, "redis"),
		"config:\n%s", edge.Config)
	procIP, err := loopbackIP(13133, 8888)
	if err != nil {
		t.Fatal(err)
	}
	proc := env.StartChartPod(t, "kafka-processing-0", rel.ns, "deployment/"+full+"-processing", procIP, nil, hosts)

	svcHost := fmt.Sprintf("%s.%s.svc", full, rel.ns)
	kubeconfig := rel.notesKubeconfig(t)
	api2 := env.StartAPIServer(t, "helm-kafka", kubeconfig, filepath.Join(env.Root, "distribution", "audit-policy.yaml"), map[string]string{svcHost: edgeIP})
	ns := "helm-kafka"
	runChartScenario(t, env, api2, ns, start)

	// The processing tier down: the edge still answers, and Kafka keeps the event until a new
	// processing pod reads it.
	if err := proc.Stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
	checkNoAuthErrors(t, proc)
	refusedBefore := edgeRefusals(t, edgeIP)
	t1 := time.Now()
	kubectlVia(t, env, api2, "create", "configmap", "while-processing-down", "-n", ns, "--from-literal=k=v")
	time.Sleep(3 * time.Second) // the apiserver's batch (--audit-webhook-batch-max-wait=1s) is answered meanwhile
	proc = env.StartChartPod(t, "kafka-processing-1", rel.ns, "deployment/"+full+"-processing", procIP, nil, hosts)
	env.WaitSpans(t, Window{Start: t1, End: time.Now().Add(time.Minute)}, 90*time.Second, func(ss Spans) error {
		if n := len(clusterSpans(ss, readmeCluster).ForObject("ConfigMap", ns, "while-processing-down").OfType(model.SpanTypeAudit)); n != 1 {
			return fmt.Errorf("%d audit spans of ConfigMap %s/while-processing-down, want 1", n, ns)
		}
		return nil
	})
	Check(t, "the edge refused nothing while the processing tier was down", edgeRefusals(t, edgeIP) == refusedBefore,
		"refusals %v before, %v after", refusedBefore, edgeRefusals(t, edgeIP))

	rel.uninstall(t, edge, proc)
	rel.checkLeftovers(t, "", "offsets of the consumer group "+full+"-processing")
}

// edgeRefusals is how many webhook requests the edge answered with an error status so far
// (otelcol_k8s_audit_rejected_requests, every reason), from its metrics port as the chart
// exposes it (POD_IP:8888). A scrape that fails, or shows no k8s_audit metric at all, fails the
// test: it must not read as zero.
func edgeRefusals(t *testing.T, ip string) float64 {
	t.Helper()
	sum, body, err := scrapeSum(net.JoinHostPort(ip, "8888"), "otelcol_k8s_audit_rejected_requests", "")
	if err != nil || !strings.Contains(body, "otelcol_k8s_audit_") {
		t.Fatalf("edge metrics: %v: no k8s_audit metrics in\n%s", err, truncate(body, 2000))
	}
	return sum
}
