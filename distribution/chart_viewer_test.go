//go:build dist

package distribution_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// viewerSets are the values that switch the viewer on.
var viewerSets = []string{"viewer.enabled=true", "viewer.jaegerURL=http://jaeger-query.observability.svc:16686"}

// TestChartViewerIsOffByDefault: without viewer.enabled nothing of the viewer is rendered.
func TestChartViewerIsOffByDefault(t *testing.T) {
	for k := range renderChart(t, "clusterName=chart-test", controlPlaneCIDRs) {
		if strings.Contains(k, "viewer") {
			t.Errorf("%s rendered without viewer.enabled", k)
		}
	}
}

// TestChartViewer renders viewer.enabled: a Deployment of the release's image running
// /kubetrail serve against viewer.jaegerURL, with no Kubernetes token, the container hardened as
// the collector's; a ClusterIP Service; a NetworkPolicy that admits no pod by default and the
// peers of viewer.networkPolicy.from when given. No selector of the collector's takes the
// viewer's pods, nor the viewer's the collector's, in every mode that has them.
func TestChartViewer(t *testing.T) {
	objs := renderChart(t, append([]string{"clusterName=chart-test", controlPlaneCIDRs, "viewer.jaegerUI=https://jaeger.example.com", "metrics.podMonitor.enabled=true"}, viewerSets...)...)
	dep := objs["Deployment/kt-kubetrail-viewer"]
	if dep == nil {
		t.Fatalf("no Deployment kt-kubetrail-viewer among %v", keys(objs))
	}
	pod := dig(dep, "spec", "template", "spec")
	c := dig(pod, "containers", 0)
	if got, want := dig(c, "image"), dig(objs["StatefulSet/kt-kubetrail"], "spec", "template", "spec", "containers", 0, "image"); got != want {
		t.Errorf("viewer image %v, the collector's %v: one image holds both", got, want)
	}
	if got := dig(c, "command"); !reflect.DeepEqual(got, []any{"/kubetrail"}) {
		t.Errorf("command %v", got)
	}
	wantArgs := []any{"serve", "--listen=:7474", "--source=jaeger=http://jaeger-query.observability.svc:16686", "--cluster=chart-test", "--window=30m", "--jaeger-ui=https://jaeger.example.com"}
	if got := dig(c, "args"); !reflect.DeepEqual(got, wantArgs) {
		t.Errorf("args %v, want %v", got, wantArgs)
	}
	if dig(pod, "automountServiceAccountToken") != false {
		t.Errorf("the viewer's pods mount a Kubernetes token: it reads only Jaeger")
	}
	if got, want := dig(c, "securityContext"), dig(objs["StatefulSet/kt-kubetrail"], "spec", "template", "spec", "containers", 0, "securityContext"); !reflect.DeepEqual(got, want) || dig(c, "securityContext", "readOnlyRootFilesystem") != true {
		t.Errorf("viewer securityContext %v, the collector's %v", got, want)
	}
	if dig(pod, "securityContext", "runAsNonRoot") != true {
		t.Errorf("pod securityContext %v", dig(pod, "securityContext"))
	}
	if p := dig(c, "readinessProbe", "httpGet", "path"); p != "/healthz" {
		t.Errorf("readiness probe %v", dig(c, "readinessProbe"))
	}
	if dig(c, "resources", "limits", "memory") == nil {
		t.Errorf("no memory limit: %v", dig(c, "resources"))
	}
	svc := objs["Service/kt-kubetrail-viewer"]
	if dig(svc, "spec", "type") != "ClusterIP" || dig(svc, "spec", "ports", 0, "port") != float64(7474) || dig(svc, "spec", "ports", 0, "targetPort") != "http" {
		t.Errorf("viewer Service %v", dig(svc, "spec"))
	}
	if ports := namedPorts(t, dig(c, "ports"), "containerPort"); ports["http"] != 7474 {
		t.Errorf("container ports %v", ports)
	}
	np := ingressPolicyOf(t, objs, "NetworkPolicy/kt-kubetrail-viewer", dep)
	if ing, ok := dig(np, "spec", "ingress").([]any); !ok || len(ing) != 0 {
		t.Errorf("the default policy admits %v, want no pod (kubectl port-forward needs none)", dig(np, "spec", "ingress"))
	}
	proxy := renderChart(t, append([]string{"clusterName=chart-test", controlPlaneCIDRs, "viewer.networkPolicy.from[0].podSelector.matchLabels.app=oauth2-proxy"}, viewerSets...)...)
	rule := dig(proxy["NetworkPolicy/kt-kubetrail-viewer"], "spec", "ingress", 0)
	if !reflect.DeepEqual(dig(rule, "from"), []any{map[string]any{"podSelector": map[string]any{"matchLabels": map[string]any{"app": "oauth2-proxy"}}}}) || dig(rule, "ports", 0, "port") != "http" {
		t.Errorf("with viewer.networkPolicy.from the policy admits %v", rule)
	}
	if _, ok := renderChart(t, append([]string{"clusterName=chart-test", controlPlaneCIDRs, "viewer.networkPolicy.enabled=false"}, viewerSets...)...)["NetworkPolicy/kt-kubetrail-viewer"]; ok {
		t.Error("viewer.networkPolicy.enabled=false still renders the policy")
	}

	for mode, objs := range map[string]map[string]map[string]any{
		"gateway": objs,
		"kafka":   renderChart(t, append([]string{"clusterName=chart-test", controlPlaneCIDRs, "mode=kafka", kafkaBrokers, "metrics.serviceMonitor.enabled=true"}, viewerSets...)...),
	} {
		viewerPods := podLabels(objs["Deployment/kt-kubetrail-viewer"])
		var others []map[string]any // the pods of every other workload
		for k, o := range objs {
			if l := podLabels(o); l != nil && !strings.HasSuffix(k, "-viewer") {
				others = append(others, l)
			}
		}
		for k, o := range objs {
			for _, sel := range selectorsOf(o) {
				mine := strings.HasSuffix(k, "-viewer")
				if selects(sel, viewerPods) != mine {
					t.Errorf("mode %s: %s's selector %v selects the viewer's pods: %v", mode, k, sel, !mine)
				}
				for _, l := range others {
					if mine && selects(sel, l) {
						t.Errorf("mode %s: %s's selector %v selects pods %v", mode, k, sel, l)
					}
				}
			}
		}
	}
}

// selectorsOf are the label selectors of a rendered object: a workload's, a Service's, a PDB's,
// a monitor's, a NetworkPolicy's pods and its peers.
func selectorsOf(o map[string]any) []map[string]any {
	var out []map[string]any
	add := func(v any) {
		if m, ok := v.(map[string]any); ok && len(m) > 0 {
			out = append(out, m)
		}
	}
	switch o["kind"] {
	case "Service":
		add(dig(o, "spec", "selector"))
	case "NetworkPolicy":
		add(dig(o, "spec", "podSelector", "matchLabels"))
		rules, _ := dig(o, "spec", "ingress").([]any)
		for _, r := range rules {
			peers, _ := dig(r, "from").([]any)
			for _, p := range peers {
				add(dig(p, "podSelector", "matchLabels"))
			}
		}
	default:
		add(dig(o, "spec", "selector", "matchLabels"))
	}
	return out
}

// TestChartViewerNotes: the notes say how to open the viewer, through a port-forward of its
// Service, and say nothing of it while it is off.
func TestChartViewerNotes(t *testing.T) {
	notes := renderNotes(t, "", append([]string{controlPlaneCIDRs}, viewerSets...)...)
	if !strings.Contains(notes, "port-forward svc/kt-kubetrail-viewer 7474:7474") || !strings.Contains(notes, "http://jaeger-query.observability.svc:16686") {
		t.Errorf("the notes do not say how to open the viewer:\n%s", notes)
	}
	if off := renderNotes(t, "", controlPlaneCIDRs); strings.Contains(off, "viewer") {
		t.Errorf("the notes speak of a viewer that is off:\n%s", off)
	}
}

func TestChartViewerRefusesBadValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		sets []string
		want string
	}{
		{"no Jaeger URL", []string{"clusterName=c", controlPlaneCIDRs, "viewer.enabled=true"}, "viewer.jaegerURL is required"},
		{"a Jaeger URL without a scheme", []string{"clusterName=c", controlPlaneCIDRs, "viewer.enabled=true", "viewer.jaegerURL=jaeger-query:16686"}, "viewer/jaegerURL"},
		{"a UI URL that is a script", []string{"clusterName=c", controlPlaneCIDRs, "viewer.enabled=true", "viewer.jaegerURL=http://jaeger:16686", "viewer.jaegerUI=javascript:alert(1)"}, "viewer/jaegerUI"},
		{"a misspelled key", []string{"clusterName=c", controlPlaneCIDRs, "viewer.enabeld=true"}, "additional properties 'enabeld' not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) { requireRenderingRefused(t, tc.sets, tc.want) })
	}
	// Without the schema (--skip-schema-validation, tools that render without it) the chart's
	// own check still says what to give.
	_, stderr, err := helm(t, "template", "kt", chartDir, "--skip-schema-validation", "--set", backend, "--set", "clusterName=c", "--set", controlPlaneCIDRs, "--set", "viewer.enabled=true", "--set", "viewer.jaegerURL=jaeger:16686")
	if err == nil || !strings.Contains(stderr, "viewer.jaegerURL is required") {
		t.Errorf("without the schema: %v\n%s", err, stderr)
	}
}

// TestChartViewerRunsAsRendered runs the rendered container's command, arguments and environment
// with bin/kubetrail (the image's /kubetrail, TestImageRunsTheViewer) against a Jaeger query API
// at the rendered viewer.jaegerURL: the probe's path answers, and a search page is built from
// what that Jaeger says. Only the listen address is changed, to a free loopback port.
func TestChartViewerRunsAsRendered(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	jaeger := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"data":[]}`)
	}))
	defer jaeger.Close()
	objs := renderChart(t, "clusterName=chart-test", controlPlaneCIDRs, "viewer.enabled=true", "viewer.jaegerURL="+jaeger.URL)
	c := dig(objs["Deployment/kt-kubetrail-viewer"], "spec", "template", "spec", "containers", 0)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	var args []string
	for _, a := range dig(c, "args").([]any) {
		if a == "--listen=:7474" {
			a = "--listen=" + addr
		}
		args = append(args, a.(string))
	}
	if got := dig(c, "command", 0); got != "/kubetrail" {
		t.Fatalf("command %v", dig(c, "command"))
	}
	cmd := exec.Command(filepath.Join(root, "bin", "kubetrail"), args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")} // no HOME: a container may have none
	envs, _ := dig(c, "env").([]any)
	for _, e := range envs {
		cmd.Env = append(cmd.Env, dig(e, "name").(string)+"="+dig(e, "value").(string))
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	get := func(path string) (int, string, error) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	probe := dig(c, "readinessProbe", "httpGet", "path").(string)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		code, _, err := get(probe)
		if err == nil && code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the probe's %s: %d %v; the viewer said:\n%s", probe, code, err, stderr.String())
		}
	}
	code, body, err := get("/?namespace=default")
	if err != nil || code != http.StatusOK || !strings.Contains(body, `name="namespace" value="default"`) {
		t.Fatalf("the search page: %d %v\n%s\nthe viewer said:\n%s", code, err, body, stderr.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(asked, "/api/services") {
		t.Errorf("the search did not read the rendered viewer.jaegerURL: it asked %v", asked)
	}
}
