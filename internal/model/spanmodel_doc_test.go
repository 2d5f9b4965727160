package model

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubetrail/kubetrail/internal/enumtest"
)

// TestSpanModelDocNamesEveryAttribute: docs/span-model.md is the contract, so every attribute,
// span event and link type a component writes (a string constant named Attr…, attr…, Event…,
// event… or LinkType… in the packages that build spans) is in it.
func TestSpanModelDocNamesEveryAttribute(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "span-model.md"))
	if err != nil {
		t.Fatal(err)
	}
	dirs := []string{".", "../auditconv", "../../receiver/k8seventsreceiver", "../../receiver/k8sauditreceiver", "../../processor/k8sobjectlinkprocessor"}
	checked := 0
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			for name, v := range modelConsts(t, path) {
				checked++
				if !strings.Contains(string(doc), "`"+v) {
					t.Errorf("%s: %s = %q is not in docs/span-model.md", path, name, v)
				}
			}
		}
	}
	if checked < 60 {
		t.Fatalf("checked %d names, want every attribute's", checked)
	}
}

// modelConsts returns the span model's names a Go file declares: string constants named Attr…,
// attr…, Event…, event… or LinkType… whose value is a k8s.* or kubetrail.* name, or a link type.
func modelConsts(t *testing.T, path string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, v := range enumtest.StringConsts(t, path) {
		if modelName(name) && (strings.HasPrefix(v, "k8s.") || strings.HasPrefix(v, "kubetrail.") || strings.HasPrefix(name, "LinkType")) {
			out[name] = v
		}
	}
	return out
}

func modelName(n string) bool {
	for _, p := range []string{"Attr", "attr", "Event", "event", "LinkType"} {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	return false
}
