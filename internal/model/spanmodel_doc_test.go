package model

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
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
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !modelName(name.Name) || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				v, _ := strconv.Unquote(lit.Value)
				if strings.HasPrefix(v, "k8s.") || strings.HasPrefix(v, "kubetrail.") || strings.HasPrefix(name.Name, "LinkType") {
					out[name.Name] = v
				}
			}
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
