// Package enumtest keeps the attribute values a component records on its own metrics in step with
// the enums its metadata.yaml lists for those attributes (which mdatagen turns into
// documentation.md). The values are constants in the component's code; a test names, per
// metadata.yaml attribute, the constants the code records for it, and Check compares the two
// both ways. Declared and NoLiterals close the other gaps: a value constant added to the code but
// not to the test's list, and a value written as a literal where it is recorded.
package enumtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// metadata is the part of a metadata.yaml this package reads.
type metadata struct {
	Attributes map[string]struct {
		Enum []string `json:"enum"`
	} `json:"attributes"`
}

// Enums returns the enum of every attribute metadata.yaml declares one for, by the attribute's
// key in the attributes section (not its name_override).
func Enums(tb testing.TB, metadataYAML string) map[string][]string {
	tb.Helper()
	b, err := os.ReadFile(metadataYAML)
	if err != nil {
		tb.Fatal(err)
	}
	var md metadata
	if err := yaml.Unmarshal(b, &md); err != nil {
		tb.Fatalf("%s: %v", metadataYAML, err)
	}
	enums := make(map[string][]string, len(md.Attributes))
	for name, a := range md.Attributes {
		if len(a.Enum) > 0 {
			enums[name] = a.Enum
		}
	}
	return enums
}

// Check fails tb unless used, the values the code records per metadata.yaml attribute, and the
// enums metadata.yaml declares are the same: the same attributes, and for each the same values.
func Check(tb testing.TB, metadataYAML string, used map[string][]string) {
	tb.Helper()
	enums := Enums(tb, metadataYAML)
	for _, attr := range sortedKeys(enums) {
		if _, ok := used[attr]; !ok {
			tb.Errorf("%s: attribute %s has enum %v, but the test does not say which values the code records for it", metadataYAML, attr, enums[attr])
		}
	}
	for _, attr := range sortedKeys(used) {
		enum, ok := enums[attr]
		if !ok {
			tb.Errorf("%s: the code records values %v for attribute %s, which has no enum there", metadataYAML, used[attr], attr)
			continue
		}
		for _, v := range used[attr] {
			if !slices.Contains(enum, v) {
				tb.Errorf("%s: the code records %q for attribute %s; add it to the enum %v", metadataYAML, v, attr, enum)
			}
		}
		for _, v := range enum {
			if !slices.Contains(used[attr], v) {
				tb.Errorf("%s: attribute %s lists %q, which the code never records", metadataYAML, attr, v)
			}
		}
	}
}

// Declared fails tb for every string constant declared at package level in goFile whose name
// satisfies isValue and whose value no attribute in used lists: a value constant added to the
// code must be added to the test's list (and so to metadata.yaml) too.
func Declared(tb testing.TB, goFile string, isValue func(name string) bool, used map[string][]string) {
	tb.Helper()
	consts := StringConsts(tb, goFile)
	for _, name := range sortedKeys(consts) {
		if !isValue(name) {
			continue
		}
		listed := false
		for _, values := range used {
			listed = listed || slices.Contains(values, consts[name])
		}
		if !listed {
			tb.Errorf("%s: constant %s = %q is not among the values the test checks against metadata.yaml", goFile, name, consts[name])
		}
	}
}

// StringConsts returns the string constants declared at package level in goFile, by name.
func StringConsts(tb testing.TB, goFile string) map[string]string {
	tb.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), goFile, nil, parser.SkipObjectResolution)
	if err != nil {
		tb.Fatal(err)
	}
	consts := map[string]string{}
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				if v, err := strconv.Unquote(lit.Value); err == nil {
					consts[name.Name] = v
				}
			}
		}
	}
	return consts
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Call names a call that records an attribute value: the function's name (for a method or a
// package's function, the selector's last part, as String for attribute.String), the index of the
// argument that carries the value and, when Key is set, the identifier its first argument must be
// for the call to count (attribute.String(attrReason, …) but not attribute.String("k8s.pod.name", …)).
type Call struct {
	Func string
	Arg  int
	Key  string
}

// NoLiterals fails tb for every call in the non-test Go files of the package in dir that passes a
// string literal where one of calls carries a value: values are constants, which the test lists.
func NoLiterals(tb testing.TB, dir string, calls ...Call) {
	tb.Helper()
	fset := token.NewFileSet()
	var found []string
	entries, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			tb.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			fn := ""
			switch f := call.Fun.(type) {
			case *ast.Ident:
				fn = f.Name
			case *ast.SelectorExpr:
				fn = f.Sel.Name
			}
			for _, c := range calls {
				if c.Func != fn || c.Arg >= len(call.Args) {
					continue
				}
				if c.Key != "" {
					if id, ok := call.Args[0].(*ast.Ident); !ok || id.Name != c.Key {
						continue
					}
				}
				if lit, ok := call.Args[c.Arg].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					found = append(found, fmt.Sprintf("%s: %s records the literal %s; use a constant the telemetry test lists", fset.Position(lit.Pos()), fn, lit.Value))
				}
			}
			return true
		})
	}
	for _, f := range found {
		tb.Errorf("%s", f)
	}
}
