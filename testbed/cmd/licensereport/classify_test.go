package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// moduleFile reads a file of a module this repository depends on, from the module cache (the
// version go.mod selects; `go mod download` fetches it if the cache lacks it).
func moduleFile(t *testing.T, mod, file string) string {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", mod).Output()
	if err != nil {
		t.Fatalf("go mod download %s: %v", mod, err)
	}
	var dl struct{ Dir, Error string }
	if err := json.Unmarshal(out, &dl); err != nil || dl.Error != "" || dl.Dir == "" {
		t.Fatalf("go mod download %s: %s %v", mod, dl.Error, err)
	}
	b, err := os.ReadFile(filepath.Join(dl.Dir, file))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRealLicenceTextsFromTheModuleCacheAreClassified(t *testing.T) {
	for _, tc := range []struct {
		name, module, file string
		want               []string
	}{
		{"the Apache License 2.0", "go.opentelemetry.io/collector/component", "LICENSE", []string{"Apache-2.0"}},
		{"the Apache header alone, as gRPC's NOTICE has it", "google.golang.org/grpc", "NOTICE.txt", []string{"Apache-2.0"}},
		{"MIT", "github.com/stretchr/testify", "LICENSE", []string{"MIT"}},
		{"BSD 3-clause", "github.com/spf13/pflag", "LICENSE", []string{"BSD-3-Clause"}},
		{"BSD 2-clause", "github.com/redis/go-redis/v9", "LICENSE", []string{"BSD-2-Clause"}},
		{"ISC", "github.com/davecgh/go-spew", "LICENSE", []string{"ISC"}},
		{"the MPL 2.0, whose definitions name the GNU licences, is not a GNU licence", "github.com/hashicorp/go-version", "LICENSE", []string{"MPL-2.0"}},
		{"Apache with the Go licence of copied code appended", "go.opentelemetry.io/otel", "LICENSE", []string{"Apache-2.0", "BSD-3-Clause"}},
		{"MIT and Apache in one file", "go.yaml.in/yaml/v3", "LICENSE", []string{"Apache-2.0", "MIT"}},
		{"a libyaml MIT licence beside the main one", "go.yaml.in/yaml/v2", "LICENSE.libyaml", []string{"MIT"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Classify(moduleFile(t, tc.module, tc.file)); !slices.Equal(got, tc.want) {
				t.Errorf("%s/%s: got %v, want %v", tc.module, tc.file, got, tc.want)
			}
		})
	}
}

func TestTheGoStandardLibraryIsBSD3Clause(t *testing.T) {
	goroot, err := goEnv("GOROOT")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(goroot, "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	if got := Classify(string(b)); !slices.Equal(got, []string{"BSD-3-Clause"}) {
		t.Errorf("got %v", got)
	}
}

func TestGNULicencesAreNamedWithTheirVersionAndNotAllowed(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"gpl-3.0-notice.txt", "GPL-3.0"},
		{"lgpl-2.1-notice.txt", "LGPL-2.1"},
		{"agpl-3.0-notice.txt", "AGPL-3.0"},
	} {
		b, err := os.ReadFile(filepath.Join("testdata", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		got := Classify(string(b))
		if !slices.Equal(got, []string{tc.want}) {
			t.Errorf("%s: got %v, want [%s]", tc.file, got, tc.want)
		}
		if Allowed[got[0]] {
			t.Errorf("%s: %s is allowed", tc.file, got[0])
		}
	}
}

func TestAPermissiveTextOfferedAlsoUnderTheGPLCarriesBoth(t *testing.T) {
	b, err := os.ReadFile("testdata/mit-or-gpl-2.0.txt")
	if err != nil {
		t.Fatal(err)
	}
	if got := Classify(string(b)); !slices.Equal(got, []string{"GPL-2.0", "MIT"}) {
		t.Errorf("got %v, want [GPL-2.0 MIT]", got)
	}
}

func TestATextNoRuleKnowsIsUnknown(t *testing.T) {
	b, err := os.ReadFile("testdata/proprietary.txt")
	if err != nil {
		t.Fatal(err)
	}
	if got := Classify(string(b)); !slices.Equal(got, []string{Unknown}) {
		t.Errorf("got %v", got)
	}
	if got := Classify(""); !slices.Equal(got, []string{Unknown}) {
		t.Errorf("empty: got %v", got)
	}
}

// A licence pasted into a source file's comment, re-wrapped and with typographic quotes, is the
// same licence; a phrase cut short is not.
func TestLayoutDoesNotDecideAMatchButWordsDo(t *testing.T) {
	mit := moduleFile(t, "github.com/stretchr/testify", "LICENSE")
	var comment strings.Builder
	for i, w := range strings.Fields(mit) {
		if i%7 == 0 {
			comment.WriteString("\n// ")
		}
		comment.WriteString(strings.NewReplacer(`"`, "“", ",", " ,").Replace(w) + " ")
	}
	if got := Classify(comment.String()); !slices.Equal(got, []string{"MIT"}) {
		t.Errorf("re-wrapped MIT: got %v", got)
	}
	cut := strings.Replace(mit, "free of charge", "for a fee", 1)
	if got := Classify(cut); slices.Contains(got, "MIT") {
		t.Errorf("MIT with its grant changed is still MIT: %v", got)
	}
}

func TestBSDVariantsAreToldApartByTheirClauses(t *testing.T) {
	bsd3 := moduleFile(t, "github.com/spf13/pflag", "LICENSE")
	// The 3-clause licence without its third clause is the 2-clause one.
	i := strings.Index(bsd3, "Neither the name")
	j := strings.Index(bsd3, "THIS SOFTWARE")
	if i < 0 || j < i {
		t.Fatalf("pflag's LICENSE has no endorsement clause where expected:\n%s", bsd3)
	}
	if got := Classify(bsd3[:i] + bsd3[j:]); !slices.Equal(got, []string{"BSD-2-Clause"}) {
		t.Errorf("without the endorsement clause: got %v", got)
	}
	// With an advertising clause it is the 4-clause one, which needs a review.
	bsd4 := bsd3[:i] + "All advertising materials mentioning features or use of this software must display the following acknowledgement.\n" + bsd3[i:]
	got := Classify(bsd4)
	if !slices.Equal(got, []string{"BSD-4-Clause"}) || Allowed[got[0]] {
		t.Errorf("with the advertising clause: got %v (allowed %v)", got, Allowed[got[0]])
	}
}
