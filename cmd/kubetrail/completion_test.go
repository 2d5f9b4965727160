package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// completionScript is `kubetrail completion <shell>`, written to a file.
func completionScript(t *testing.T, shell string) string {
	t.Helper()
	code, out, errOut := kubetrail(t, "completion", shell)
	if code != 0 {
		t.Fatalf("completion %s: exit %d: %s", shell, code, errOut)
	}
	path := filepath.Join(t.TempDir(), "kubetrail."+shell)
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// The scripts hold every flag of the commands (they come from the flag sets), and bash and zsh
// accept them.
func TestCompletionScriptsParseAndHoldEveryFlag(t *testing.T) {
	w := vocabulary()
	for _, shell := range []string{"bash", "zsh"} {
		path := completionScript(t, shell)
		b, _ := os.ReadFile(path)
		for _, f := range append(append([]string{"--generation", "--kubeconfig", "--context", "-n", "--namespace", "-o", "--output", "--uid", "--cluster",
			"--since", "--until", "--window", "--out", "--depth", "--only", "--source", "deploy", "sts", "netpol", "tree timeline json html"}, w.traceFlags...), w.annotateFlags...) {
			if !strings.Contains(string(b), f) {
				t.Errorf("the %s script lacks %q", shell, f)
			}
		}
		if strings.Contains(string(b), "@") {
			t.Errorf("the %s script has a placeholder left: %s", shell, string(b)[strings.Index(string(b), "@"):][:20])
		}
		sh, err := exec.LookPath(shell)
		if err != nil {
			t.Logf("%s not installed: the script's syntax is not checked", shell)
			continue
		}
		if out, err := exec.Command(sh, "-n", path).CombinedOutput(); err != nil {
			t.Errorf("%s -n refuses the script: %v\n%s", shell, err, out)
		}
	}
	if code, _, errOut := kubetrail(t, "completion", "fish"); code != 2 || !strings.Contains(errOut, `"fish": want bash or zsh`) {
		t.Errorf("completion fish: exit %d: %s", code, errOut)
	}
}

// The bash script completes as the user expects: run by bash with the words of a command line,
// as bash's programmable completion calls it.
func TestBashCompletionCompletesSubcommandsFlagsAndValues(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Fatal("bash not installed")
	}
	path := completionScript(t, "bash")
	tests := []struct {
		words []string // the last is the word being completed
		want  []string
	}{
		{[]string{"kubetrail", ""}, []string{"trace", "changes", "show", "serve", "annotate", "apply", "completion", "config"}},
		{[]string{"kubetrail", "serve", "--l"}, []string{"--listen"}},
		{[]string{"kubetrail", "changes", "--fi"}, []string{"--field"}},
		{[]string{"kubetrail", "changes", "-o", ""}, []string{"text", "json"}},
		{[]string{"kubetrail", "show", "deploy/web", "-o", ""}, []string{"yaml", "text", "json"}},
		{[]string{"kubetrail", "show", "--a"}, []string{"--at"}},
		{[]string{"kubetrail", "show", "dep"}, []string{"deploy", "deployments"}},
		{[]string{"kubetrail", "config", ""}, []string{"view", "get", "set", "unset", "path"}},
		{[]string{"kubetrail", "config", "set", ""}, []string{"source", "cluster", "window"}},
		{[]string{"kubetrail", "config", "--d"}, []string{"--default"}},
		{[]string{"kubetrail", "apply", "--fi"}, []string{"--filename", "--field-manager"}},
		{[]string{"kubetrail", "apply", "-f", "deploy.yaml", "--w"}, []string{"--wait", "--window"}},
		{[]string{"kubetrail", "trace", "--gen"}, []string{"--generation"}},
		{[]string{"kubetrail", "trace", "deploy/web", "-o", ""}, []string{"tree", "timeline", "json", "html"}},
		{[]string{"kubetrail", "trace", "deploy/web", "--output", "=", "j"}, []string{"json"}},
		{[]string{"kubetrail", "trace", "deploy/web", "--only", "e"}, []string{"errors", "events"}},
		{[]string{"kubetrail", "trace", "st"}, []string{"statefulsets", "storageclasses", "sts"}},
		{[]string{"kubetrail", "trace", "-n", "shop", "st"}, []string{"statefulsets", "storageclasses", "sts"}},
		{[]string{"kubetrail", "trace", "deploy", "we"}, nil}, // a name: not a kind
		{[]string{"kubetrail", "annotate", "--c"}, []string{"--context"}},
		{[]string{"kubetrail", "completion", ""}, []string{"bash", "zsh"}},
		{[]string{"kubetrail", "-"}, []string{"--help", "-h"}},
		// As kubectl-trail, trace is the default: kinds and trace's flags at once.
		{[]string{"kubectl-trail", "dep"}, []string{"deploy", "deployments"}},
		{[]string{"kubectl-trail", "deploy/web", "--o"}, []string{"--output", "--out", "--only"}},
		{[]string{"/usr/local/bin/kubectl-trail", "--w"}, []string{"--window"}},
	}
	for _, tc := range tests {
		script := `source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _kubetrail; printf '%s\n' "${COMPREPLY[@]}"`
		out, err := exec.Command("bash", append([]string{"-c", script, "bash", path}, tc.words...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", tc.words, err, out)
		}
		got := strings.Fields(string(out))
		slices.Sort(got)
		want := slices.Clone(tc.want)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%q completes to %q, want %q", tc.words, got, want)
		}
	}
}

// kubectl (1.26 and later) completes `kubectl trail …` by running kubectl_complete-trail with
// the words after "trail": candidates a line, then cobra's directive.
func TestKubectlPluginCompletionAnswersCobrasProtocol(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"dep"}, "deploy\ndeployments\n:4\n"},
		{[]string{"an"}, "annotate\n:4\n"},
		{[]string{"deploy/web", "-o", ""}, "tree\ntimeline\njson\nhtml\n:4\n"},
		{[]string{"deploy/web", "--output=j"}, "--output=json\n:4\n"},
		{[]string{"deploy/web", "--source", ""}, "jaeger=\nfile=\n:6\n"},
		{[]string{"deploy/web", "--kubeconfig", ""}, ":0\n"},
		{[]string{"deploy/web", "--gen"}, "--generation\n:4\n"},
		{[]string{"annotate", "--c"}, "--context\n:4\n"},
		{[]string{"ap"}, "apply\n:4\n"},
		{[]string{"apply", "--force"}, "--force-conflicts\n:4\n"},
		{[]string{"apply", "-f", ""}, ":0\n"},
		{[]string{"apply", "--filename", ""}, ":0\n"},
		{[]string{"apply", "-f", "x.yaml", ""}, ":4\n"},
		{[]string{"deploy", "we"}, ":4\n"},
		{[]string{"completion", ""}, "bash\nzsh\n:4\n"},
		{[]string{"config", "u"}, "unset\n:4\n"},
		{[]string{"config", "get", "c"}, "cluster\n:4\n"},
		{[]string{"config", "--con"}, "--context\n:4\n"},
	}
	for _, tc := range tests {
		code, out, errOut := invoke(t, "/home/u/.krew/bin/kubectl_complete-trail", tc.args...)
		if code != 0 || out != tc.want {
			t.Errorf("kubectl_complete-trail %q: exit %d, %q, want %q %s", tc.args, code, out, tc.want, errOut)
		}
		// The same answer from the binary itself, for a kubectl_complete-trail that is a script.
		if _, out2, _ := invoke(t, "kubectl-trail", append([]string{"__complete"}, tc.args...)...); out2 != out {
			t.Errorf("kubectl-trail __complete %q: %q, want %q", tc.args, out2, out)
		}
	}
}
