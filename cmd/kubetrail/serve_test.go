package main

import (
	"bytes"
	"context"
	"fmt"
	"image/color"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/golden"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/kubetrail/kubetrail/internal/model"
)

// hostile are span values an attacker who can write to the apiserver (or post to a door) chooses:
// a user name, an annotation, a field value.
const (
	hostileUser       = `<script>alert(1)</script>`
	hostileValue      = `<img src=x onerror=alert(2)>`
	hostileAnnotation = `<img src=x onerror=alert(3)>`
)

// hostileTraces is the recorded deployment scenario with the scale to 4 made by hostileUser to
// hostileValue replicas, and the Deployment created with an annotation holding hostileAnnotation.
func hostileTraces(t *testing.T) ptrace.Traces {
	t.Helper()
	td, err := golden.ReadTraces(filepath.Join(recorded, "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var scaled, annotated bool
	for _, rs := range td.ResourceSpans().All() {
		kind, _ := rs.Resource().Attributes().Get(model.AttrObjectKind)
		if kind.Str() != "Deployment" {
			continue
		}
		for _, ss := range rs.ScopeSpans().All() {
			for _, s := range ss.Spans().All() {
				verb, _ := s.Attributes().Get(model.AttrAuditVerb)
				sub, _ := s.Attributes().Get(model.AttrAuditSubresource)
				for _, e := range s.Events().All() {
					switch {
					case e.Name() == model.EventObjectDiff && verb.Str() == "patch" && sub.Str() == "scale" && !scaled:
						news, _ := e.Attributes().Get("k8s.object.diff.new")
						if news.Slice().At(0).Str() != "4" {
							continue
						}
						news.Slice().At(0).SetStr(fmt.Sprintf("%q", hostileValue))
						s.Attributes().PutStr(model.AttrUserName, hostileUser)
						scaled = true
					case e.Name() == model.EventObjectDiff:
						// The controller's first annotation: the hostile one was there before it.
						paths, _ := e.Attributes().Get("k8s.object.diff.paths")
						olds, _ := e.Attributes().Get("k8s.object.diff.old")
						news, _ := e.Attributes().Get("k8s.object.diff.new")
						for i := 0; i < paths.Slice().Len(); i++ {
							if paths.Slice().At(i).Str() == "metadata.annotations" && olds.Slice().At(i).Str() == "" {
								evil := fmt.Sprintf(`"evil":%q`, hostileAnnotation)
								olds.Slice().At(i).SetStr("{" + evil + "}")
								news.Slice().At(i).SetStr(strings.TrimSuffix(news.Slice().At(i).Str(), "}") + "," + evil + "}")
							}
						}
					case e.Name() == model.EventObjectSnapshot && verb.Str() == "create":
						body, _ := e.Attributes().Get("k8s.object.body")
						b := strings.Replace(body.Str(), `"metadata":{`, fmt.Sprintf(`"metadata":{"annotations":{"evil":%q},`, hostileAnnotation), 1)
						e.Attributes().PutStr("k8s.object.body", b)
						annotated = true
					}
				}
			}
		}
	}
	if !scaled || !annotated {
		t.Fatalf("the recorded deployment scenario changed: scale found %v, create body found %v", scaled, annotated)
	}
	return td
}

// startServe runs `kubetrail serve` on a free loopback port until the test ends, and returns its
// base URL.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	addr := closedPort(t)
	ctx, cancel := context.WithCancel(context.Background())
	var errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"kubetrail", "serve", "--listen", addr}, args...), &bytes.Buffer{}, &errOut)
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("kubetrail serve exited %d: %s", code, errOut.String())
		}
	})
	base := "http://" + addr
	for i := 0; i < 100; i++ {
		if resp, err := http.Get(base + "/static/viewer.css"); err == nil {
			resp.Body.Close()
			return base
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("kubetrail serve did not answer on %s", addr)
	return ""
}

// browser loads pages in headless Chromium, as a user's browser would: the page's script runs
// under its Content-Security-Policy, and what is checked is the DOM it built.
type browser struct {
	t      *testing.T
	bin    string
	common []string
}

func newBrowser(t *testing.T) *browser {
	dir := t.TempDir()
	return &browser{t: t, bin: chromium(t), common: []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--disable-background-networking", "--user-data-dir=" + filepath.Join(dir, "profile"), "--window-size=1280,1400", "--virtual-time-budget=5000"}}
}

func (b *browser) dom(url string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, b.bin, append(b.common, "--dump-dom", url)...).Output()
	if err != nil {
		b.t.Fatalf("chromium --dump-dom %s: %v", url, err)
	}
	if !strings.Contains(string(out), `data-rendered="true"`) {
		b.t.Fatalf("%s: the page's script did not run (blocked, or the page failed):\n%s", url, head(string(out), 30))
	}
	return string(out)
}

func (b *browser) screenshot(url, path string) []byte {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, b.bin, append(b.common, "--screenshot="+path, url)...).CombinedOutput(); err != nil {
		b.t.Fatalf("chromium --screenshot: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		b.t.Fatal(err)
	}
	return raw
}

var objectLink = regexp.MustCompile(`href="(/object\?[^"]+)"`)

// link is the first link to an object page in a DOM whose anchor text, or line, holds marker.
func link(t *testing.T, dom, marker string) string {
	t.Helper()
	for _, line := range strings.Split(dom, "\n") {
		if !strings.Contains(line, marker) {
			continue
		}
		if m := objectLink.FindStringSubmatch(line); m != nil {
			return strings.ReplaceAll(m[1], "&amp;", "&")
		}
	}
	t.Fatalf("no object link on a line holding %q", marker)
	return ""
}

// TestViewerInChromiumSearchObjectDiffManifest walks the viewer as a user would, in a real
// browser, on the recorded deployment scenario with hostile span values: the search page's feed,
// a row's link to its object at that write (the write's diff, the manifest it left), and from
// the tree the manifest after the create. Every hostile value shows as text; the DOM holds no
// element made from span data (no img, no script but the viewer's own).
func TestViewerInChromiumSearchObjectDiffManifest(t *testing.T) {
	b := newBrowser(t)
	base := startServe(t, "--source", "file="+writeJSONL(t, hostileTraces(t)), "--cluster", "testbed")
	noElementsFromSpans := func(what, dom string) {
		t.Helper()
		if n := strings.Count(dom, "<img"); n != 0 {
			t.Errorf("%s: the DOM holds %d img elements: span data became markup", what, n)
		}
		if n := strings.Count(dom, "<script"); n != 1 || !strings.Contains(dom, `<script src="/static/viewer.js"`) {
			t.Errorf("%s: the DOM holds %d script elements, want the viewer's own only", what, n)
		}
	}

	search := b.dom(base + "/?namespace=default&object=deployments&field=spec.replicas")
	noElementsFromSpans("search", search)
	if !strings.Contains(search, "&lt;script&gt;alert(1)&lt;/script&gt;") || !strings.Contains(search, "&lt;img src=x onerror=alert(2)&gt;") {
		t.Fatalf("the feed does not show the hostile user and value as text:\n%s", search)
	}

	// The row of the hostile scale: its object at that write.
	at := b.dom(base + link(t, search, "alert(2)"))
	noElementsFromSpans("object at the scale", at)
	for _, want := range []string{
		`<h1 id="title">Deployment default/demo</h1>`,
		`<td>spec.replicas</td><td class="old">2</td><td class="new">"&lt;img src=x onerror=alert(2)&gt;"</td>`, // the write's diff
		`  replicas: &lt;img src=x onerror=alert(2)&gt;`,                                                        // the manifest it left
		`    evil: &lt;img src=x onerror=alert(3)&gt;`,                                                          // the annotation, as text
		`data-object="Pod default/demo-`,                                                                        // the tree
		`id="timeline"`,
	} {
		if !strings.Contains(at, want) {
			t.Errorf("the object page at the scale lacks %s", want)
		}
	}

	// From the tree, the manifest after the create: 2 replicas of nginx 1.27.
	created := b.dom(base + link(t, at, "kubernetes-admin</span> <span class=\"verb\">create"))
	noElementsFromSpans("object at the create", created)
	if !strings.Contains(created, "\n  replicas: 2\n") || !strings.Contains(created, "image: registry.k8s.io/nginx:1.27") {
		t.Errorf("the manifest after the create is not 2 replicas of nginx 1.27:\n%s", created)
	}

	// The picture in the README: the feed of the recorded scenario's Deployments, as is.
	plain := startServe(t, "--source", "file="+recordedFile(t, "deployment"), "--cluster", "testbed")
	shot := b.screenshot(plain+"/?namespace=default&object=deployments", filepath.Join(t.TempDir(), "serve.png"))
	for _, p := range feedScreenshotProblems(shot, 1280, 1400) {
		t.Error(p)
	}
	if dst := os.Getenv("KUBETRAIL_SERVE_SCREENSHOT"); dst != "" { // docs: keep the screenshot
		_ = os.WriteFile(dst, shot, 0o644)
	}
}

// feedScreenshotProblems says what is wrong with a screenshot of the feed: it must be the
// window's size, a white page of antialiased text, with refused writes (the 409s) highlighted.
func feedScreenshotProblems(raw []byte, width, height int) (problems []string) {
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		return []string{fmt.Sprintf("the screenshot is not a PNG: %v", err)}
	}
	b := img.Bounds()
	if b.Dx() != width || b.Dy() != height {
		return []string{fmt.Sprintf("screenshot %dx%d, want the window's %dx%d", b.Dx(), b.Dy(), width, height)}
	}
	colours := map[color.RGBA]int{}
	errorRows := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		highlighted := 0
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, a := img.At(x, y).RGBA()
			c := color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8), uint8(a >> 8)}
			colours[c]++
			if c == errorRowFill {
				highlighted++
			}
		}
		if highlighted > width/4 {
			errorRows++
		}
	}
	if colours[pageBackground] < width*height/2 || len(colours) < 32 {
		problems = append(problems, fmt.Sprintf("not a white page of text: %d white pixels of %d, %d colours", colours[pageBackground], width*height, len(colours)))
	}
	if errorRows < 20 { // the 409s of the deployment controller, each a highlighted row
		problems = append(problems, fmt.Sprintf("%d pixel rows of the refused writes' highlight, want at least 20", errorRows))
	}
	return problems
}
