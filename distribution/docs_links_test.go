//go:build dist

package distribution_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// mdLink matches a Markdown link's target: [text](target) or ![alt](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// headingAnchor turns a Markdown heading into the anchor the repository host gives it.
func headingAnchor(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ' || r == '-':
			b.WriteRune('-')
		case r == '_' || ('a' <= r && r <= 'z') || ('0' <= r && r <= '9') || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchorsOf returns the anchors of a Markdown file's headings.
func anchorsOf(t *testing.T, path string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	inFence := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if !inFence && strings.HasPrefix(line, "#") {
			anchors[headingAnchor(strings.TrimLeft(line, "#"))] = true
		}
	}
	return anchors
}

// Every relative link of every tracked Markdown file names a file or directory of the
// repository, and an anchor names a heading of that file: the README is a front door whose
// doors open.
func TestMarkdownLinksResolve(t *testing.T) {
	out, err := exec.Command("git", "-C", root, "ls-files", "*.md").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	files := strings.Fields(string(out))
	if len(files) < 10 {
		t.Fatalf("only %d Markdown files tracked", len(files))
	}
	checked := 0
	for _, f := range files {
		if strings.HasPrefix(f, "THIRD_PARTY") {
			continue
		}
		path := filepath.Join(root, f)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		text := regexp.MustCompile("(?s)```.*?```").ReplaceAllString(string(data), "")
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			dest := path
			if file != "" {
				dest = filepath.Join(filepath.Dir(path), file)
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %q: no such file", f, target)
					continue
				}
			}
			checked++
			if anchor != "" && strings.HasSuffix(dest, ".md") && !anchorsOf(t, dest)[anchor] {
				t.Errorf("%s: link %q: no heading with anchor #%s in %s", f, target, anchor, dest)
			}
		}
	}
	if checked < 100 {
		t.Fatalf("only %d relative links checked", checked)
	}
}
