package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// chromium finds the browser; testbed/hack/ensure-chromium.sh installs it (make unit runs it).
// Its absence fails the test: a page nobody rendered is not tested.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium not found: run testbed/hack/ensure-chromium.sh (make unit does)")
	return ""
}

func TestHTMLPageRendersInChromiumWithTheTreeDiffsAndErrors(t *testing.T) {
	bin := chromium(t)
	dir := t.TempDir()
	page := filepath.Join(dir, "demo.html")
	code, _, errOut := kubetrail(t, "trace", "deployment/demo", "-n", "default", "--source", "file="+recordedFile(t, "deployment"), "-o", "html", "--out", page)
	if code != 0 {
		t.Fatal(errOut)
	}
	raw, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	// Self-contained: nothing the page would fetch.
	for _, ref := range []string{"src=", "href=", "@import", "url(", "http://", "https://"} {
		if bytes.Contains(raw, []byte(ref)) {
			t.Fatalf("the page references something outside itself (%q)", ref)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	common := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--user-data-dir=" + filepath.Join(dir, "profile"), "--window-size=1280,1600"}
	dom, err := exec.CommandContext(ctx, bin, append(common, "--dump-dom", "file://"+page)...).Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v", err)
	}
	s := string(dom)
	for _, want := range []string{
		`data-rendered="true"`, // the inline script ran
		`data-object="Deployment default/demo"`,
		`data-object="ReplicaSet default/demo-`,
		`data-object="Pod default/demo-`,
		`spec.replicas <b>2</b>→4`,              // a diff, visible
		`class="audit err"`,                     // a failed request, marked
		`✗ CONFLICT`,                            // the 409s of the deployment controller
		`Why is it slow:`,                       // the summary
		`<div id="timeline"><div class="row o"`, // the timeline
	} {
		if !strings.Contains(s, want) {
			t.Errorf("rendered DOM lacks %q", want)
		}
	}

	shot := filepath.Join(dir, "demo.png")
	if out, err := exec.CommandContext(ctx, bin, append(common, "--screenshot="+shot, "file://"+page)...).CombinedOutput(); err != nil {
		t.Fatalf("chromium --screenshot: %v\n%s", err, out)
	}
	png, err := os.ReadFile(shot)
	if err != nil {
		t.Fatal(err)
	}
	if len(png) < 10_000 || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("screenshot is not a PNG of a rendered page (%d bytes)", len(png))
	}
	if dst := os.Getenv("KUBETRAIL_SCREENSHOT"); dst != "" { // docs: keep the screenshot
		_ = os.WriteFile(dst, png, 0o644)
	}
}
