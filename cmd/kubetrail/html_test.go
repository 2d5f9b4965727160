package main

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
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
	raw, err = os.ReadFile(shot)
	if err != nil {
		t.Fatal(err)
	}
	if dst := os.Getenv("KUBETRAIL_SCREENSHOT"); dst != "" { // docs: keep the screenshot
		_ = os.WriteFile(dst, raw, 0o644)
	}
	for _, p := range screenshotProblems(raw, 1280, 1600) {
		t.Error(p)
	}
}

// Colours of the page's style sheet that the screenshot of the deployment page must show.
var (
	pageBackground = color.RGBA{0xff, 0xff, 0xff, 0xff}
	summaryFill    = color.RGBA{0xf3, 0xf6, 0xfb, 0xff} // .summary
	errorRowFill   = color.RGBA{0xfd, 0xec, 0xec, 0xff} // li.err: the 409s
)

// screenshotProblems decodes the PNG and says what is wrong with it as a picture of the page: it
// must have the window's size and show a white page with text, the summary box at the top and,
// below it, the tree — many lines of text, among them requests marked as errors.
func screenshotProblems(raw []byte, width, height int) (problems []string) {
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		return []string{fmt.Sprintf("the screenshot is not a PNG: %v", err)}
	}
	b := img.Bounds()
	if b.Dx() != width || b.Dy() != height {
		return []string{fmt.Sprintf("screenshot %dx%d, want the window's %dx%d", b.Dx(), b.Dy(), width, height)}
	}
	rgba := func(x, y int) color.RGBA {
		r, g, bl, a := img.At(x, y).RGBA()
		return color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8), uint8(a >> 8)}
	}
	colours := map[color.RGBA]int{}
	// The rows of the summary box (its fill at the box's left edge, past the border and the
	// rounded corner) and the rows with dark pixels (text) in the left half.
	summaryTop, summaryBottom := -1, -1
	dark := make([]bool, height)
	errorRows := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		errorRow := false
		for x := b.Min.X; x < b.Max.X; x++ {
			c := rgba(x, y)
			colours[c]++
			if x < b.Min.X+width/2 && int(c.R)+int(c.G)+int(c.B) < 3*128 {
				dark[y-b.Min.Y] = true
			}
			errorRow = errorRow || c == errorRowFill
		}
		if rgba(b.Min.X+24, y) == summaryFill {
			if summaryTop < 0 {
				summaryTop = y - b.Min.Y
			}
			summaryBottom = y - b.Min.Y
		}
		if errorRow && summaryBottom >= 0 && y-b.Min.Y > summaryBottom {
			errorRows++
		}
	}
	var top color.RGBA
	for c, n := range colours {
		if n > colours[top] {
			top = c
		}
	}
	if top != pageBackground || colours[top] > width*height*97/100 {
		problems = append(problems, fmt.Sprintf("the page is not white with things on it: most common colour %v, %d of %d pixels", top, colours[top], width*height))
	}
	if len(colours) < 32 { // text is antialiased: a rendered page has many shades
		problems = append(problems, fmt.Sprintf("%d distinct colours: the screenshot is (nearly) blank", len(colours)))
	}
	if summaryTop < 0 || summaryTop > 200 || summaryBottom-summaryTop < 40 {
		return append(problems, fmt.Sprintf("no summary box near the top (rows %d–%d of its fill)", summaryTop, summaryBottom))
	}
	// The tree: one line of text after another below the summary, down to the window's bottom.
	lines := 0
	for y := summaryBottom + 1; y < height; y++ {
		if dark[y] && !dark[y-1] {
			lines++
		}
	}
	if want := (height - summaryBottom) / 30; lines < want {
		problems = append(problems, fmt.Sprintf("%d lines of text below the summary, want at least %d: the tree is not there", lines, want))
	}
	if errorRows < 10 { // a few 409s, each a highlighted line
		problems = append(problems, fmt.Sprintf("%d rows of the error highlight below the summary: the conflicts are not marked", errorRows))
	}
	return problems
}

// The check sees what a picture shows: a blank page, a page with only the summary, a page
// without the error marks, and the wrong size all fail it.
func TestScreenshotCheckRefusesPicturesThatAreNotThePage(t *testing.T) {
	const w, h = 1280, 1600
	encode := func(draw func(img *image.RGBA)) []byte {
		img := image.NewRGBA(image.Rect(0, 0, w, h))
		for i := range img.Pix {
			img.Pix[i] = 0xff
		}
		draw(img)
		var buf bytes.Buffer
		if err := png.Encode(&buf, img); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	fill := func(img *image.RGBA, r image.Rectangle, c color.RGBA) {
		for y := r.Min.Y; y < r.Max.Y; y++ {
			for x := r.Min.X; x < r.Max.X; x++ {
				img.SetRGBA(x, y, c)
			}
		}
	}
	summary := func(img *image.RGBA) { fill(img, image.Rect(12, 60, w-12, 270), summaryFill) }
	text := func(img *image.RGBA, errors bool) {
		for y := 300; y+12 < h; y += 19 {
			if errors && (y/19)%8 == 0 {
				fill(img, image.Rect(30, y-3, w-30, y+16), errorRowFill)
			}
			for x := 40; x < 600; x += 9 { // glyphs in shades of grey
				fill(img, image.Rect(x, y, x+6, y+12), color.RGBA{uint8(x % 97), uint8(x % 89), uint8(y % 83), 0xff})
			}
		}
	}
	for name, tc := range map[string]struct {
		png  []byte
		want string
	}{
		"blank":          {encode(func(*image.RGBA) {}), "blank"},
		"summary only":   {encode(summary), "the tree is not there"},
		"no error marks": {encode(func(img *image.RGBA) { summary(img); text(img, false) }), "the conflicts are not marked"},
		"wrong size": {func() []byte {
			var b bytes.Buffer
			_ = png.Encode(&b, image.NewRGBA(image.Rect(0, 0, 800, 600)))
			return b.Bytes()
		}(), "want the window's 1280x1600"},
		"not a PNG": {[]byte("\x89PNG\r\n\x1a\n" + strings.Repeat("x", 20000)), "not a PNG"},
	} {
		if p := strings.Join(screenshotProblems(tc.png, w, h), "; "); !strings.Contains(p, tc.want) {
			t.Errorf("%s: problems %q, want %q", name, p, tc.want)
		}
	}
	if p := screenshotProblems(encode(func(img *image.RGBA) { summary(img); text(img, true) }), w, h); len(p) != 0 {
		t.Errorf("a picture with the summary, the tree and error marks: %v", p)
	}
}
