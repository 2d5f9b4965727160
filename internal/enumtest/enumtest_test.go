package enumtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// recorder is a testing.TB that keeps the errors it is given.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatal(args ...any)                 { panic(fmt.Sprint(args...)) }
func (r *recorder) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

func write(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const testYAML = `
type: example
attributes:
  drop_reason:
    name_override: reason
    type: string
    enum: [duplicate, too_old]
  source:
    type: string
    enum: [memory, redis]
  plain:
    type: string
`

func TestCheck(t *testing.T) {
	yml := write(t, t.TempDir(), "metadata.yaml", testYAML)
	for _, tc := range []struct {
		name string
		used map[string][]string
		want []string // substrings of the errors, in order
	}{
		{"same", map[string][]string{"drop_reason": {"too_old", "duplicate"}, "source": {"memory", "redis"}}, nil},
		{"value not in the enum", map[string][]string{"drop_reason": {"duplicate", "too_old", "shutdown"}, "source": {"memory", "redis"}},
			[]string{`records "shutdown" for attribute drop_reason`}},
		{"enum value never recorded", map[string][]string{"drop_reason": {"duplicate"}, "source": {"memory", "redis"}},
			[]string{`drop_reason lists "too_old"`}},
		{"attribute not in the test", map[string][]string{"drop_reason": {"duplicate", "too_old"}},
			[]string{"attribute source has enum"}},
		{"attribute without an enum", map[string][]string{"drop_reason": {"duplicate", "too_old"}, "source": {"memory", "redis"}, "plain": {"x"}},
			[]string{"for attribute plain, which has no enum"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{TB: t}
			Check(r, yml, tc.used)
			matchErrors(t, r.errs, tc.want)
		})
	}
}

func TestDeclaredAndNoLiterals(t *testing.T) {
	dir := t.TempDir()
	goFile := write(t, dir, "telemetry.go", `package example

const attrReason = "reason"

const (
	reasonDuplicate = "duplicate"
	reasonTooOld    = "too_old"
	reasonShutdown  = "shutdown"
	other           = 3
)
`)
	write(t, dir, "use.go", `package example

import "go.opentelemetry.io/otel/attribute"

func use() {
	_ = attribute.String(attrReason, reasonDuplicate)
	_ = attribute.String(attrReason, "too_old")
	_ = attribute.String("k8s.pod.name", "fine")
	withReason("shutdown")
}

func withReason(string) {}
`)
	write(t, dir, "use_test.go", `package example

func usedInTests() { withReason("anything") }
`)
	used := map[string][]string{"drop_reason": {"duplicate", "too_old"}}

	r := &recorder{TB: t}
	Declared(r, goFile, func(name string) bool { return strings.HasPrefix(name, "reason") }, used)
	matchErrors(t, r.errs, []string{`constant reasonShutdown = "shutdown"`})

	r = &recorder{TB: t}
	NoLiterals(r, dir, Call{Func: "String", Arg: 1, Key: "attrReason"}, Call{Func: "withReason"})
	matchErrors(t, r.errs, []string{`use.go:7:35: String records the literal "too_old"`, `withReason records the literal "shutdown"`})
}

func matchErrors(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("errors %q, want %d matching %q", got, len(want), want)
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			t.Errorf("error %q, want it to contain %q", got[i], want[i])
		}
	}
}
