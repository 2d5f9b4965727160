package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
)

// testBinary builds testdata/linked, a real Go binary with build information: it links the
// standard library, goleak (MIT), pflag (BSD-3-Clause) and this repository's own module, which the
// report leaves out. (A test binary records no dependencies, so it cannot stand in.)
func testBinary(t *testing.T) Binary {
	t.Helper()
	file := filepath.Join(t.TempDir(), "linked")
	if out, err := exec.Command("go", "build", "-o", file, "./testdata/linked").CombinedOutput(); err != nil {
		t.Fatalf("go build ./testdata/linked: %v\n%s", err, out)
	}
	return Binary{Name: "linked", File: file}
}

func TestTheModulesOfARealBinaryAreFoundWithTheirLicences(t *testing.T) {
	mods, err := Linked([]Binary{testBinary(t)})
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]*Module{}
	for _, m := range mods {
		byPath[m.Path] = m
		if m.Path == "github.com/kubetrail/kubetrail" {
			t.Errorf("kubetrail's own module is listed: %+v", m)
		}
	}
	if mods[0].Path != stdPath || !slices.Equal(mods[0].Licences, []string{"BSD-3-Clause"}) || mods[0].LicenceFiles[0].Ref != "GOROOT/LICENSE" {
		t.Errorf("first row: got %s %v %v, want the standard library, BSD-3-Clause, GOROOT/LICENSE", mods[0].Path, mods[0].Licences, refs(mods[0].LicenceFiles))
	}
	g := byPath["go.uber.org/goleak"]
	if g == nil {
		t.Fatalf("goleak not found among %d modules", len(mods))
	}
	if !slices.Equal(g.Licences, []string{"MIT"}) || len(g.LicenceFiles) != 1 || g.LicenceFiles[0].Ref != "go.uber.org/goleak@"+g.Version+"/LICENSE" {
		t.Errorf("goleak: got %v from %v", g.Licences, refs(g.LicenceFiles))
	}
	if !slices.Equal(g.In, []string{"linked"}) {
		t.Errorf("goleak linked into %v", g.In)
	}
	if p := byPath["github.com/spf13/pflag"]; p == nil || !slices.Equal(p.Licences, []string{"BSD-3-Clause"}) {
		t.Errorf("pflag: %+v", p)
	}
	if len(mods) != 3 {
		t.Errorf("%d modules, want std, goleak and pflag", len(mods))
	}
	if problems, _ := Check(mods, nil); len(problems) > 0 {
		t.Errorf("problems: %v", problems)
	}
}

func TestTheReportIsTheSameForTheSameBinaries(t *testing.T) {
	bin := testBinary(t)
	bins := []Binary{bin, {Name: "again", File: bin.File}}
	render := func() (string, string) {
		mods, err := Linked(bins)
		if err != nil {
			t.Fatal(err)
		}
		_, reviewed := Check(mods, nil)
		return Report(bins, mods, reviewed), Notice(mods)
	}
	r1, n1 := render()
	r2, n2 := render()
	if r1 != r2 || n1 != n2 {
		t.Error("two renderings differ")
	}
	for _, want := range []string{
		"| go.uber.org/goleak | ",
		" | MIT | go.uber.org/goleak@",
		"| linked, again |",
		"### BSD-3-Clause\n\n1 module: std (GOROOT/LICENSE).\n\n```text\nCopyright 2009 The Go Authors.",
	} {
		if !strings.Contains(r1, want) {
			t.Errorf("report lacks %q:\n%s", want, r1)
		}
	}
	if !strings.HasPrefix(n1, "kubetrail\nCopyright 2026 The kubetrail Authors\n") {
		t.Errorf("NOTICE starts %q", n1[:min(len(n1), 80)])
	}
}

// module makes a module as Linked would, from a licence text.
func module(path string, in string, texts ...string) *Module {
	m := &Module{Path: path, Version: "v1.0.0", In: []string{in}}
	for i, text := range texts {
		m.LicenceFiles = append(m.LicenceFiles, File{Ref: path + "@v1.0.0/LICENSE" + strings.Repeat("-x", i), Text: text})
	}
	m.classify()
	return m
}

func fixture(t *testing.T, name string) string {
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCheckFailsOnGNUUnknownAndMissingLicencesUnlessReviewed(t *testing.T) {
	apache := moduleFile(t, "go.opentelemetry.io/collector/component", "LICENSE")
	mods := []*Module{
		module("example.com/apache", "collector", apache),
		module("example.com/gpl", "collector", fixture(t, "gpl-3.0-notice.txt")),
		module("example.com/dual", "kubetrail", fixture(t, "mit-or-gpl-2.0.txt")),
		module("example.com/secret", "kubetrail", fixture(t, "proprietary.txt")),
		module("example.com/bare", "kubetrail"),
		module("example.com/mixed", "collector", apache, fixture(t, "agpl-3.0-notice.txt")),
	}
	problems, reviewed := Check(mods, nil)
	if len(reviewed) != 0 {
		t.Errorf("reviewed without an allowlist: %v", reviewed)
	}
	want := []string{
		"example.com/gpl@v1.0.0 (linked into collector): licence GPL-3.0 in example.com/gpl@v1.0.0/LICENSE: not a licence kubetrail may link without review",
		"example.com/dual@v1.0.0 (linked into kubetrail): licence GPL-2.0 AND MIT in example.com/dual@v1.0.0/LICENSE: not a licence kubetrail may link without review",
		"example.com/secret@v1.0.0 (linked into kubetrail): licence unknown in example.com/secret@v1.0.0/LICENSE: no rule recognises it",
		"example.com/bare@v1.0.0 (linked into kubetrail): licence none found: no LICENSE, LICENCE or COPYING file at the module's root",
		"example.com/mixed@v1.0.0 (linked into collector): licence AGPL-3.0 AND Apache-2.0 in example.com/mixed@v1.0.0/LICENSE, example.com/mixed@v1.0.0/LICENSE-x: not a licence kubetrail may link without review",
	}
	if !slices.Equal(problems, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(problems, "\n"), strings.Join(want, "\n"))
	}

	allow, err := ReadAllowlist(strings.NewReader(`
# reviewed
example.com/dual   | GPL-2.0 AND MIT | dual-licensed: kubetrail takes it under MIT
example.com/secret | unknown         | the author's written consent is on file
example.com/bare   | none found      | the repository's README grants MIT
example.com/mixed  | Apache-2.0      | reviewed when it was Apache only
example.com/gone   | MIT             | was linked once
`))
	if err != nil {
		t.Fatal(err)
	}
	problems, reviewed = Check(mods, allow)
	if got := slices.Sorted(func(yield func(string) bool) {
		for p := range reviewed {
			if !yield(p) {
				return
			}
		}
	}); !slices.Equal(got, []string{"example.com/bare", "example.com/dual", "example.com/secret"}) {
		t.Errorf("reviewed: %v", got)
	}
	want = []string{
		"example.com/gpl@v1.0.0 (linked into collector): licence GPL-3.0 in example.com/gpl@v1.0.0/LICENSE: not a licence kubetrail may link without review",
		`example.com/mixed@v1.0.0 (linked into collector): licence AGPL-3.0 AND Apache-2.0 in example.com/mixed@v1.0.0/LICENSE, example.com/mixed@v1.0.0/LICENSE-x: not a licence kubetrail may link without review (the allowlist's line 6 reviewed "Apache-2.0")`,
		"allowlist line 7: example.com/gone is not linked with a licence that needs review: remove the line",
	}
	if !slices.Equal(problems, want) {
		t.Errorf("problems with the allowlist:\n%s\nwant:\n%s", strings.Join(problems, "\n"), strings.Join(want, "\n"))
	}
	report := Report([]Binary{{Name: "collector", File: "bin/c"}}, mods, reviewed)
	if !strings.Contains(report, "| example.com/dual | GPL-2.0 AND MIT | dual-licensed: kubetrail takes it under MIT |") {
		t.Errorf("the report does not give the review's reason:\n%s", report)
	}
}

func TestAllowlistLinesNeedAReason(t *testing.T) {
	for _, bad := range []string{
		"example.com/x | MIT",
		"example.com/x | MIT |  ",
		" | MIT | reason",
		"example.com/x | MIT | a\nexample.com/x | BSD-3-Clause | b",
	} {
		if _, err := ReadAllowlist(strings.NewReader(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	list, err := ReadAllowlist(strings.NewReader("# only comments\n\n"))
	if err != nil || len(list) != 0 {
		t.Errorf("comments: %v %v", list, err)
	}
}

// The checked-in allowlist parses.
func TestTheCheckedInAllowlistParses(t *testing.T) {
	f, err := os.Open("allowlist.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := ReadAllowlist(f); err != nil {
		t.Fatal(err)
	}
}

func TestANestedModuleWithoutALicenceTakesItsHolders(t *testing.T) {
	holder := module("example.com/repo", "collector", fixture(t, "mit-or-gpl-2.0.txt"))
	nested := &Module{Path: "example.com/repo/sub", Version: "v0.2.0", In: []string{"collector"}}
	other := &Module{Path: "example.com/repository", Version: "v0.3.0", In: []string{"collector"}}
	inherit([]*Module{holder, nested, other})
	if nested.Inherited != "example.com/repo@v1.0.0" || !slices.Equal(nested.LicenceFiles, holder.LicenceFiles) {
		t.Errorf("nested: inherited %q, files %v", nested.Inherited, refs(nested.LicenceFiles))
	}
	if other.Inherited != "" || other.LicenceFiles != nil {
		t.Errorf("a module whose path only starts with the holder's took its licence: %+v", other)
	}
}

func TestFirstDifferenceNamesTheLine(t *testing.T) {
	if d := firstDifference("a\nb\n", "a\nb\n"); d != "" {
		t.Errorf("equal: %q", d)
	}
	if d := firstDifference("a\nb\n", "a\nc\n"); d != `line 2 is "b", a regeneration has "c"` {
		t.Errorf("changed: %q", d)
	}
	if d := firstDifference("a\n", "a\nb\n"); d != `line 2 is "", a regeneration has "b"` {
		t.Errorf("shorter: %q", d)
	}
}

// The dependency lines of the collector's build information, as `go version -m` prints them for
// the binary ocb builds from builder-config.yaml.
func TestLinkedVersionsFollowReplacementsAndLeaveThisRepositoryOut(t *testing.T) {
	for _, tc := range []struct {
		name    string
		dep     debug.Module
		want    string // path@version, "" when left out
		wantErr bool
	}{
		{"a plain dependency", debug.Module{Path: "go.uber.org/zap", Version: "v1.27.1"}, "go.uber.org/zap@v1.27.1", false},
		{"replaced by another version: the replacement is linked", debug.Module{
			Path: "github.com/open-telemetry/opentelemetry-collector-contrib/extension/encoding/otlpencodingextension", Version: "v0.165.1",
			Replace: &debug.Module{Path: "github.com/open-telemetry/opentelemetry-collector-contrib/extension/encoding/otlpencodingextension", Version: "v0.161.0"},
		}, "github.com/open-telemetry/opentelemetry-collector-contrib/extension/encoding/otlpencodingextension@v0.161.0", false},
		{"this repository, replaced by ../..", debug.Module{
			Path: "github.com/kubetrail/kubetrail", Version: "v0.0.0", Replace: &debug.Module{Path: "../..", Version: "(devel)"},
		}, "", false},
		{"a module without a version", debug.Module{Path: "example.com/x", Version: "(devel)"}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.dep
			got, ok, err := linkedVersion(&d)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want one: %v", err, tc.wantErr)
			}
			s := ""
			if ok {
				s = got.Path + "@" + got.Version
			}
			if s != tc.want {
				t.Errorf("got %q, want %q", s, tc.want)
			}
		})
	}
}
