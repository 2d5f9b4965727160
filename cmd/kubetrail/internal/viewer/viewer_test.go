package viewer

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/golden"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.uber.org/goleak"

	"github.com/kubetrail/kubetrail/cmd/kubetrail/internal/trail"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorded serves the recorded deployment scenario (the processor's golden traces, recorded
// from the real control plane) from a file source.
func recorded(t *testing.T) *httptest.Server {
	t.Helper()
	f := &trail.File{Path: "deployment"}
	f.AddSpans(recordedDeployment(t))
	return serve(t, f)
}

// recordedDeployment is the deployment scenario's spans.
func recordedDeployment(tb testing.TB) []*trail.Span {
	tb.Helper()
	td, err := golden.ReadTraces(filepath.Join("../../../../processor/k8sobjectlinkprocessor/testdata/golden", "deployment.yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	return trail.SpansFromTraces(td)
}

func serve(t *testing.T, src trail.Source) *httptest.Server {
	t.Helper()
	s := &Server{Source: src, Cluster: "testbed", Window: 30 * time.Minute}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, srv *httptest.Server, path string) (int, http.Header, string) {
	t.Helper()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// inlineScript finds a script element with content, or a script, style or event attribute in
// the page: what the Content-Security-Policy forbids must not be needed.
var inlineScript = regexp.MustCompile(`<script[^>]*>[^<]|\sstyle=|\son[a-z]+=|<style`)

func TestSearchPageListsTheWritesAndLinksEachToItsObject(t *testing.T) {
	srv := recorded(t)
	code, h, body := get(t, srv, "/?namespace=default&field=spec.replicas&object=deployments")
	if code != http.StatusOK {
		t.Fatalf("%d: %s", code, body)
	}
	if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" {
		t.Errorf("headers %v", h)
	}
	if m := inlineScript.FindString(body); m != "" {
		t.Errorf("the page holds inline script or style: %q", m)
	}
	if !strings.Contains(body, `2 writes from the beginning to now UTC`) ||
		!strings.Contains(body, `spec.replicas <b>4</b>→2`) || !strings.Contains(body, `spec.replicas <b>2</b>→4`) {
		t.Fatalf("the feed lacks the two scales:\n%s", body)
	}
	// The form is filled again with the filters, named as the CLI's flags.
	for _, want := range []string{`name="namespace" value="default"`, `name="field" value="spec.replicas"`, `name="object" value="deployments"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the form lacks %s", want)
		}
	}
	link := regexp.MustCompile(`href="(/object\?[^"]+)"`).FindStringSubmatch(body)
	if link == nil {
		t.Fatal("no row links to its object")
	}
	code, _, obj := get(t, srv, strings.ReplaceAll(link[1], "&amp;", "&"))
	if code != http.StatusOK || !strings.Contains(obj, `<h1 id="title">Deployment default/demo</h1>`) {
		t.Fatalf("the row's link: %d\n%s", code, obj)
	}
	// The newest row is the scale to 2: its link shows that write's diff and the manifest after it.
	if !strings.Contains(obj, `<td>spec.replicas</td><td class="old">4</td><td class="new">2</td>`) || !strings.Contains(obj, "\n  replicas: 2\n") {
		t.Errorf("the object page at the write lacks its diff or manifest:\n%s", obj)
	}
	if m := inlineScript.FindString(obj); m != "" {
		t.Errorf("the object page holds inline script or style: %q", m)
	}
}

func TestObjectPageSaysWhenTheManifestIsNotKnown(t *testing.T) {
	srv := recorded(t)
	code, _, body := get(t, srv, "/object?kind=Deployment&namespace=default&name=demo&at=2026-11-21T10:00:00Z")
	if code != http.StatusOK || !strings.Contains(body, `id="notknown"`) || !strings.Contains(body, "did not exist yet") {
		t.Fatalf("%d: %s", code, body)
	}
}

func TestBadInputAndABackendThatIsDownShowAnErrorPanel(t *testing.T) {
	srv := recorded(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	_ = l.Close()
	down := serve(t, &trail.Jaeger{Base: "http://" + closed, Client: &http.Client{Timeout: 5 * time.Second}})
	for _, tc := range []struct {
		srv  *httptest.Server
		path string
		code int
		want string
	}{
		{srv, "/?since=last+tuesday", http.StatusBadRequest, "since: &#34;last tuesday&#34;"},
		{srv, "/?field=spec..replicas", http.StatusBadRequest, "field: &#34;spec..replicas&#34; at byte 5"},
		{srv, "/?verb=get", http.StatusBadRequest, "verb &#34;get&#34;"},
		{srv, "/?limit=0", http.StatusBadRequest, "limit &#34;0&#34;"},
		{srv, "/?since=2026-11-21T11:00:00Z&until=2026-11-21T10:00:00Z", http.StatusBadRequest, "until is not after since"},
		{srv, "/object?kind=Deployment", http.StatusBadRequest, "kind and name are required"},
		{srv, "/object?kind=Deployment&namespace=default&name=nope", http.StatusNotFound, "unknown object"},
		{down, "/?namespace=shop", http.StatusBadGateway, "backend unreachable"},
		{down, "/object?kind=Deployment&namespace=shop&name=web&since=1h", http.StatusBadGateway, "backend unreachable"},
	} {
		code, _, body := get(t, tc.srv, tc.path)
		if code != tc.code || !strings.Contains(body, `<div class="panel error" id="error">`) || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d, want %d and an error panel saying %q:\n%s", tc.path, code, tc.code, tc.want, body)
		}
	}
}

func TestAssetsAreServedFromTheBinary(t *testing.T) {
	srv := recorded(t)
	for path, typ := range map[string]string{"/static/viewer.css": "text/css", "/static/viewer.js": "text/javascript"} {
		code, h, body := get(t, srv, path)
		if code != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), typ) || len(body) < 100 {
			t.Errorf("%s: %d %s, %d bytes", path, code, h.Get("Content-Type"), len(body))
		}
	}
	if code, _, _ := get(t, srv, "/static/../viewer.go"); code == http.StatusOK {
		t.Error("a path out of the assets was served")
	}
}

// TestTimelineShowsTheStatesTheWritesLeft: the Deployment's available replicas and each Pod's
// phase and Ready, as bands from the write that made each state, read from the rebuilt bodies.
func TestTimelineShowsTheStatesTheWritesLeft(t *testing.T) {
	srv := recorded(t)
	code, _, body := get(t, srv, "/object?kind=Deployment&namespace=default&name=demo")
	if code != http.StatusOK {
		t.Fatalf("%d: %s", code, body)
	}
	// The rollout of the scale to 4: 2 of 4 available, then 3, then 4.
	seq := regexp.MustCompile(`<title>2/4 available</title></rect><rect [^>]*><title>3/4 available</title></rect><rect [^>]*><title>4/4 available</title>`)
	if !seq.MatchString(body) {
		t.Error("the Deployment's bands do not go from 2/4 to 4/4 available")
	}
	if n := strings.Count(body, `class="band ok"><title>Running, ready</title>`); n < 6 {
		t.Errorf("%d Pods running and ready on the timeline, want the scenario's 6 or more", n)
	}
	// Only a binding's few milliseconds are not known: it answers with no Pod body, and the
	// kubelet's next status patch, diffed from the create's body, tells the state again.
	for _, m := range regexp.MustCompile(`class="band unknown"><title>([^<]*)`).FindAllStringSubmatch(body, -1) {
		if !strings.Contains(m[1], "kube-scheduler create binding") {
			t.Errorf("a state the recorded scenario's spans tell is shown as not known: %s", m[1])
		}
	}
}

// slowSource answers searches only once released: a backend that takes its time.
type slowSource struct {
	trail.File
	release chan struct{}
}

func (s *slowSource) Search(ctx context.Context, service string, tags map[string]string, start, end time.Time) ([]pcommon.TraceID, error) {
	select {
	case <-s.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.File.Search(ctx, service, tags, start, end)
}

// TestPagesBeyondTheBoundWaitThenGetA503: with one page at a time, a second request while the
// first waits on the backend gets, after the queue timeout, a 503 with Retry-After and the panel;
// once the backend answers, the first page is served.
func TestPagesBeyondTheBoundWaitThenGetA503(t *testing.T) {
	src := &slowSource{File: trail.File{Path: "slow"}, release: make(chan struct{})}
	s := &Server{Source: src, Window: 30 * time.Minute, MaxConcurrent: 1, QueueTimeout: 200 * time.Millisecond}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	first := make(chan int, 1)
	go func() {
		resp, err := http.Get(srv.URL + "/?object=deployments")
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	time.Sleep(100 * time.Millisecond) // the first request holds the slot
	code, h, body := get(t, srv, "/?object=pods")
	if code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" || !strings.Contains(body, `id="error"`) {
		t.Errorf("the second page: %d, Retry-After %q:\n%s", code, h.Get("Retry-After"), body)
	}
	close(src.release)
	if code := <-first; code != http.StatusOK {
		t.Errorf("the first page: %d", code)
	}
}

// TestWindowLinksGoToTheJaegerUIAndHealthzAsksNoBackend: with JaegerUI set (the chart's
// viewer.jaegerUI, the browser's address of Jaeger), each window links there, not to the address
// the viewer reads; /healthz answers without reading the source, so a Jaeger outage does not
// restart the viewer's pod.
func TestWindowLinksGoToTheJaegerUIAndHealthzAsksNoBackend(t *testing.T) {
	f := &trail.File{Path: "deployment"}
	f.AddSpans(recordedDeployment(t))
	s := &Server{Source: f, Cluster: "testbed", Window: 30 * time.Minute, JaegerUI: "https://jaeger.example.com/"}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	code, _, body := get(t, srv, "/object?kind=Deployment&namespace=default&name=demo")
	links := regexp.MustCompile(`href="https://jaeger\.example\.com/trace/[0-9a-f]{32}"`).FindAllString(body, -1)
	if code != http.StatusOK || len(links) == 0 {
		t.Fatalf("%d, window links %q:\n%s", code, links, body)
	}
	if _, _, plain := get(t, recorded(t), "/object?kind=Deployment&namespace=default&name=demo"); strings.Contains(plain, "/trace/") {
		t.Error("a file source without JaegerUI links to a trace")
	}

	dsrv := serve(t, &trail.Jaeger{Base: "http://127.0.0.1:1", Client: &http.Client{Timeout: 5 * time.Second}})
	if code, h, body := get(t, dsrv, "/healthz"); code != http.StatusOK || body != "ok\n" || h.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("/healthz with the backend down: %d %q %v", code, body, h)
	}
	if code, _, _ := get(t, dsrv, "/?namespace=shop"); code != http.StatusBadGateway {
		t.Errorf("the search page with the backend down: %d, want 502 (the check must see the outage it ignores)", code)
	}
}
