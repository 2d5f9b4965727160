package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/kubetrail/kubetrail/internal/model"
)

// withConfig points $KUBETRAIL_CONFIG at a file of the given text (none when text is "") and
// returns its path.
func withConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if text != "" {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("KUBETRAIL_CONFIG", path)
	return path
}

// withKubeconfig points $KUBECONFIG at a kubeconfig of two contexts, gone (current; namespace
// default) and elsewhere (namespace shop), whose cluster does not answer, and returns its path.
func withKubeconfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	config := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: gone
  cluster: {server: "https://%s"}
contexts:
- name: gone
  context: {cluster: gone, user: u, namespace: default}
- name: elsewhere
  context: {cluster: gone, user: u, namespace: shop}
users:
- name: u
  user: {token: t}
current-context: gone
`, closedPort(t))
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", path)
	return path
}

func TestTheConfigFileIsKUBETRAIL_CONFIGThenXDGThenHome(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("KUBETRAIL_CONFIG", "")
	t.Setenv("XDG_CONFIG_HOME", "")
	for _, c := range []struct {
		name, env, xdg, want string
	}{
		{"neither: ~/.config", "", "", filepath.Join(home, ".config", "kubetrail", "config.yaml")},
		{"$XDG_CONFIG_HOME", "", "/xdg", "/xdg/kubetrail/config.yaml"},
		{"a relative $XDG_CONFIG_HOME is ignored, as the spec says", "", "rel", filepath.Join(home, ".config", "kubetrail", "config.yaml")},
		{"$KUBETRAIL_CONFIG wins", "/etc/kt.yaml", "/xdg", "/etc/kt.yaml"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("KUBETRAIL_CONFIG", c.env)
			t.Setenv("XDG_CONFIG_HOME", c.xdg)
			got, err := configPath()
			if err != nil || got != c.want {
				t.Fatalf("configPath() = %q, %v; want %q", got, err, c.want)
			}
			code, out, errOut := kubetrail(t, "config", "path")
			if code != 0 || out != c.want+"\n" {
				t.Fatalf("config path: exit %d, %q %s", code, out, errOut)
			}
		})
	}
}

// Each value is taken from the first that has it: the flag, the environment, the context's
// entry, the file's default, the built-in default.
func TestAValueComesFromTheFlagThenEnvThenContextThenDefaultThenBuiltIn(t *testing.T) {
	file := &configFile{
		settings: settings{Source: "jaeger=http://default:16686", Cluster: "default-cluster", Window: "1h"},
		Contexts: map[string]*settings{
			"prod":    {Source: "jaeger=http://prod:16686", Window: "15m"},
			"staging": {Cluster: "staging-1"},
		},
	}
	cases := []struct {
		name            string
		context         string
		flags           []string
		env             map[string]string
		source, cluster string
		window          time.Duration
		from            [3]string // the kinds of origin of source, cluster, window
	}{
		{"the context's, then the default", "prod", nil, nil,
			"jaeger=http://prod:16686", "default-cluster", 15 * time.Minute, [3]string{"context", "default", "context"}},
		{"another context's", "staging", nil, nil,
			"jaeger=http://default:16686", "staging-1", time.Hour, [3]string{"default", "context", "default"}},
		{"a context the file does not name: the default", "dev", nil, nil,
			"jaeger=http://default:16686", "default-cluster", time.Hour, [3]string{"default", "default", "default"}},
		{"no context (no kubeconfig): the default", "", nil, nil,
			"jaeger=http://default:16686", "default-cluster", time.Hour, [3]string{"default", "default", "default"}},
		{"the environment before the file", "prod", nil, map[string]string{"KUBETRAIL_SOURCE": "file=/env.jsonl", "KUBETRAIL_CLUSTER": "env-cluster"},
			"file=/env.jsonl", "env-cluster", 15 * time.Minute, [3]string{"env", "env", "context"}},
		{"the flags before all", "prod", []string{"--source", "file=/flag.jsonl", "--cluster", "flag-cluster", "--window", "5m"}, map[string]string{"KUBETRAIL_SOURCE": "file=/env.jsonl"},
			"file=/flag.jsonl", "flag-cluster", 5 * time.Minute, [3]string{"flag", "flag", "flag"}},
		{"a flag set to its default value still wins", "prod", []string{"--window", "30m", "--cluster", ""}, nil,
			"jaeger=http://prod:16686", "", 30 * time.Minute, [3]string{"context", "flag", "flag"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("KUBETRAIL_SOURCE", c.env["KUBETRAIL_SOURCE"])
			t.Setenv("KUBETRAIL_CLUSTER", c.env["KUBETRAIL_CLUSTER"])
			var source, cluster string
			var window time.Duration
			fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
			fs.StringVar(&source, "source", "", "")
			fs.StringVar(&cluster, "cluster", "", "")
			fs.DurationVar(&window, "window", model.DefaultWindow, "")
			if err := fs.Parse(c.flags); err != nil {
				t.Fatal(err)
			}
			d := &defaults{path: "/cfg.yaml", context: c.context, file: file}
			r, err := d.apply(fs, &source, &cluster, &window)
			if err != nil {
				t.Fatal(err)
			}
			if source != c.source || cluster != c.cluster || window != c.window {
				t.Fatalf("source %q cluster %q window %s; want %q %q %s", source, cluster, window, c.source, c.cluster, c.window)
			}
			if r.source.kind != c.from[0] || r.cluster.kind != c.from[1] {
				t.Fatalf("source from %q, cluster from %q; want %q, %q", r.source.kind, r.cluster.kind, c.from[0], c.from[1])
			}
			if _, o := d.lookup("window"); !fs.Changed("window") && o.kind != c.from[2] {
				t.Fatalf("window from %q, want %q", o.kind, c.from[2])
			}
		})
	}
	t.Run("nothing anywhere: the built-in window, no source", func(t *testing.T) {
		d := &defaults{path: "/cfg.yaml", context: "prod", file: &configFile{}}
		if v, o := d.lookup("window"); v != "30m" || o.kind != "built-in" {
			t.Fatalf("window %q from %q", v, o.kind)
		}
		if v, o := d.lookup("source"); v != "" || o.kind != "" {
			t.Fatalf("source %q from %q", v, o.kind)
		}
	})
}

// The context is the kubeconfig's, as kubectl picks it, found without reaching the cluster.
func TestTheContextIsTheKubeconfigsCurrentOrContext(t *testing.T) {
	kc := withKubeconfig(t)
	for _, c := range []struct {
		name string
		k    kubeFlags
		want string
	}{
		{"the current context of $KUBECONFIG", kubeFlags{}, "gone"},
		{"--context", kubeFlags{context: "elsewhere"}, "elsewhere"},
		{"--context that the kubeconfig lacks is still the one meant", kubeFlags{context: "nosuch"}, "nosuch"},
		{"--kubeconfig", kubeFlags{kubeconfig: kc}, "gone"},
		{"a --kubeconfig that does not exist: none", kubeFlags{kubeconfig: filepath.Join(t.TempDir(), "none")}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := kubeContext(&c.k); got != c.want {
				t.Fatalf("context %q, want %q", got, c.want)
			}
		})
	}
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	if got := kubeContext(&kubeFlags{}); got != "" {
		t.Fatalf("without a kubeconfig: context %q, want none", got)
	}
}

// The file is read strictly: what it cannot take is an error naming the file and the key.
func TestTheConfigFileIsReadStrictly(t *testing.T) {
	for _, c := range []struct {
		name, text string
		want       []string // in the error; none: no error
	}{
		{"a full file", "source: jaeger=http://localhost:16686\ncluster: c\nwindow: 30m\ncontexts:\n  prod:\n    source: file=/t.jsonl\n    cluster: prod-eu-1\n    window: 1h\n", nil},
		{"empty", "", nil},
		{"comments only", "# nothing yet\n", nil},
		{"an empty context", "contexts:\n  prod:\n", nil},
		{"a context named as EKS names them", "contexts:\n  arn:aws:eks:eu-west-1:123456789012:cluster/prod:\n    cluster: prod\n", nil},
		{"an unknown top-level key", "sorce: jaeger=http://x:16686\n", []string{`unknown key "sorce"`, "want source, cluster, window or contexts"}},
		{"an unknown key of a context", "contexts:\n  prod:\n    windw: 1h\n", []string{`contexts.prod: unknown key "windw"`, "want source, cluster or window"}},
		{"a duplicate key", "source: file=/a\nsource: file=/b\n", []string{"source"}},
		{"a source that is none", "contexts:\n  prod:\n    source: http://jaeger:16686\n", []string{"contexts.prod.source", "want jaeger=URL or file=PATH"}},
		{"a jaeger source without http(s)", "source: jaeger=jaeger:16686\n", []string{"source: --source jaeger=jaeger:16686", "http(s) URL"}},
		{"a window that is not a duration", "window: half an hour\n", []string{"window", `"half an hour"`}},
		{"a window under a second", "contexts:\n  p:\n    window: 10ms\n", []string{"contexts.p.window", "10ms"}},
		{"a number for a string", "cluster: 42\n", []string{"cluster: want a string, got 42"}},
		{"contexts a list", "contexts:\n- prod\n", []string{"contexts: want a mapping"}},
		{"a context a string", "contexts:\n  prod: jaeger\n", []string{"contexts.prod: want a mapping"}},
		{"not a mapping", "- source\n", []string{"want a mapping"}},
		{"not YAML", "source: [\n", []string{"yaml"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := withConfig(t, c.text)
			_, err := loadConfig(path)
			if len(c.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("read without an error")
			}
			for _, w := range append([]string{"the config file " + path + ": "}, c.want...) {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q lacks %q", err, w)
				}
			}
			// Every command that reads it says so, and stops: exit 1.
			code, _, errOut := kubetrail(t, "trace", "deploy/demo", "--source", "file=/nonexistent")
			if code != 1 || !strings.Contains(errOut, "the config file "+path) {
				t.Fatalf("trace with a bad config file: exit %d: %s", code, errOut)
			}
		})
	}
	t.Run("a missing file is an empty one", func(t *testing.T) {
		cfg, err := loadConfig(filepath.Join(t.TempDir(), "none", "config.yaml"))
		if err != nil || !cfg.empty() || cfg.Contexts != nil {
			t.Fatalf("%+v, %v", cfg, err)
		}
	})
	t.Run("a file that cannot be read is an error", func(t *testing.T) {
		if _, err := loadConfig(t.TempDir()); err == nil || !strings.Contains(err.Error(), "the config file") {
			t.Fatalf("reading a directory: %v", err)
		}
	})
}

// The file is written whole through a temporary file and a rename, mode 0600: a reader never
// sees part of it, and the team's backends are not shown to the machine's other users.
func TestTheConfigFileIsWrittenAtomicallyWithMode0600(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "kubetrail")
	path := filepath.Join(dir, "config.yaml")
	cfg := &configFile{settings: settings{Window: "1h"}, Contexts: map[string]*settings{"prod": {Source: "jaeger=http://prod:16686", Cluster: "prod-eu-1"}, "empty": {}}}
	if err := saveConfig(path, cfg); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", fi.Mode().Perm())
	}
	if di, err := os.Stat(dir); err != nil || di.Mode().Perm() != 0o700 {
		t.Fatalf("the directory made: %v, %v; want mode 0700", di, err)
	}
	back, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if back.Window != "1h" || back.Contexts["prod"].Source != "jaeger=http://prod:16686" || back.Contexts["prod"].Cluster != "prod-eu-1" {
		t.Fatalf("read back %+v %+v", back.settings, back.Contexts)
	}
	if _, ok := back.Contexts["empty"]; ok {
		t.Fatal("an empty context was written")
	}

	t.Run("an existing file of mode 0644 becomes 0600", func(t *testing.T) {
		if err := os.Chmod(path, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := saveConfig(path, back); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("after the rewrite: %v, %v; want mode 0600", fi, err)
		}
	})

	t.Run("a reader sees the old file or the new one, never a part", func(t *testing.T) {
		big := &configFile{Contexts: map[string]*settings{}}
		for i := range 500 { // some 40 KB: more than one write to the disk
			big.Contexts[fmt.Sprintf("context-%04d", i)] = &settings{Source: "jaeger=http://jaeger-query.observability.svc:16686", Cluster: fmt.Sprintf("cluster-%d", i)}
		}
		small := &configFile{settings: settings{Cluster: "small"}}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		var readErr error
		reads := 0
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				cfg, err := loadConfig(path)
				if err != nil {
					readErr = err
					return
				}
				// The big one, the small one, or the one before them; an empty or cut file is none.
				whole := len(cfg.Contexts) == 500 || (len(cfg.Contexts) == 0 && cfg.Cluster == "small") || cfg.Contexts["prod"] != nil
				if !whole {
					readErr = fmt.Errorf("read a part: %d contexts, cluster %q", len(cfg.Contexts), cfg.Cluster)
					return
				}
				reads++
			}
		})
		for i := range 40 {
			c := big
			if i%2 == 1 {
				c = small
			}
			if err := saveConfig(path, c); err != nil {
				t.Fatal(err)
			}
		}
		close(stop)
		wg.Wait()
		if readErr != nil {
			t.Fatalf("after %d good reads: %v", reads, readErr)
		}
		if reads == 0 {
			t.Fatal("the reader read nothing")
		}
		left, _ := filepath.Glob(filepath.Join(dir, ".config-*"))
		if len(left) != 0 {
			t.Fatalf("temporary files left: %v", left)
		}
	})

	t.Run("a symbolic link is followed, not replaced", func(t *testing.T) {
		target := filepath.Join(t.TempDir(), "dotfiles-config.yaml")
		if err := os.WriteFile(target, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		if err := saveConfig(link, &configFile{settings: settings{Cluster: "linked"}}); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(link)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("the link was replaced by a file of mode %v", fi.Mode())
		}
		if cfg, err := loadConfig(target); err != nil || cfg.Cluster != "linked" {
			t.Fatalf("the link's target: %+v %v", cfg, err)
		}
	})

	t.Run("a directory that cannot be made is an error, and nothing is written", func(t *testing.T) {
		blocker := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(blocker, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		err := saveConfig(filepath.Join(blocker, "kubetrail", "config.yaml"), back)
		if err == nil || !strings.Contains(err.Error(), "the config file") {
			t.Fatalf("got %v", err)
		}
	})
}

// The config subcommands, as a user types them.
func TestConfigSetGetViewUnset(t *testing.T) {
	withKubeconfig(t)
	path := withConfig(t, "")
	t.Setenv("KUBETRAIL_SOURCE", "")
	t.Setenv("KUBETRAIL_CLUSTER", "")
	ok := func(args ...string) (string, string) {
		t.Helper()
		code, out, errOut := kubetrail(t, append([]string{"config"}, args...)...)
		if code != 0 {
			t.Fatalf("config %s: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
		return out, errOut
	}
	out, _ := ok("view")
	for _, w := range []string{"Context: gone\n", "Config file: " + path + "\n", "source   -      unset\n", "window   30m    built-in\n", "no such file yet"} {
		if !strings.Contains(out, w) {
			t.Fatalf("view without a file lacks %q:\n%s", w, out)
		}
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("view wrote the file")
	}

	_, errOut := ok("set", "source", "jaeger=http://jaeger.prod:16686")
	if errOut != "kubetrail config: source set for context gone in "+path+"\n" {
		t.Fatalf("set said %q", errOut)
	}
	ok("set", "cluster", "prod-eu-1")
	ok("set", "--context", "elsewhere", "cluster", "staging-1")
	ok("set", "--default", "window", "1h")
	dir := t.TempDir()
	t.Chdir(dir)
	ok("set", "--default", "source", "file=traces.jsonl")
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the file set wrote: %v, %v; want mode 0600", fi, err)
	}
	b, _ := os.ReadFile(path)
	want := configHeader + `contexts:
  elsewhere:
    cluster: staging-1
  gone:
    cluster: prod-eu-1
    source: jaeger=http://jaeger.prod:16686
source: file=` + filepath.Join(dir, "traces.jsonl") + `
window: 1h
`
	if string(b) != want {
		t.Fatalf("the file:\n%s\nwant:\n%s", b, want)
	}

	out, _ = ok("view")
	for _, w := range []string{
		"source   jaeger=http://jaeger.prod:16686  config file: context gone\n",
		"cluster  prod-eu-1                        config file: context gone\n",
		"window   1h                               config file: default\n",
		"# " + path + "\n" + want,
	} {
		if !strings.Contains(out, w) {
			t.Fatalf("view lacks %q:\n%s", w, out)
		}
	}
	out, _ = ok("view", "--context", "elsewhere")
	if !strings.Contains(out, "Context: elsewhere\n") || !strings.Contains(out, "cluster  staging-1") || !strings.Contains(out, "source   file="+filepath.Join(dir, "traces.jsonl")+"  config file: default") {
		t.Fatalf("view --context elsewhere:\n%s", out)
	}
	if out, _ = ok("get", "source"); out != "jaeger=http://jaeger.prod:16686\n" {
		t.Fatalf("get source: %q", out)
	}
	t.Setenv("KUBETRAIL_CLUSTER", "from-env")
	if out, _ = ok("get", "cluster"); out != "from-env\n" {
		t.Fatalf("get cluster with $KUBETRAIL_CLUSTER: %q", out)
	}
	if out, _ = ok("get"); !strings.Contains(out, "cluster  from-env                         $KUBETRAIL_CLUSTER\n") {
		t.Fatalf("get:\n%s", out)
	}
	t.Setenv("KUBETRAIL_CLUSTER", "")

	ok("unset", "cluster")
	if _, errOut = ok("unset", "cluster"); !strings.Contains(errOut, "cluster was not set for context gone") {
		t.Fatalf("unset twice: %q", errOut)
	}
	ok("unset", "source")
	ok("unset", "--context", "elsewhere", "cluster")
	if b, _ = os.ReadFile(path); strings.Contains(string(b), "contexts") {
		t.Fatalf("the emptied contexts are still written:\n%s", b)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "takes a subcommand: view, get, set, unset or path"},
		{[]string{"edit"}, `"edit": want view, get, set, unset or path`},
		{[]string{"set", "source"}, "set takes a key and a value (got 1: source)"},
		{[]string{"set", "sorce", "x"}, `"sorce": unknown key; want source, cluster or window`},
		{[]string{"set", "source", "http://jaeger:16686"}, "want jaeger=URL or file=PATH"},
		{[]string{"set", "window", "soon"}, `window: "soon": want the collector's window`},
		{[]string{"set", "cluster", ""}, "to remove it, kubetrail config unset cluster"},
		{[]string{"set", "--default", "--context", "x", "cluster", "c"}, "--default and --context: pick one"},
		{[]string{"view", "--default"}, "--default is for set and unset"},
		{[]string{"get", "a", "b"}, "get takes at most one key"},
	} {
		code, _, errOut := kubetrail(t, append([]string{"config"}, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.want) || !strings.Contains(errOut, "See 'kubetrail config -h'") {
			t.Errorf("config %v: exit %d: %s (want %q)", c.args, code, errOut, c.want)
		}
	}
	t.Run("without a current context, set needs --context or --default", func(t *testing.T) {
		t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
		code, _, errOut := kubetrail(t, "config", "set", "cluster", "c")
		if code != 2 || !strings.Contains(errOut, "no current context") {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		out, _ := ok("view")
		if !strings.Contains(out, "Context: (none") {
			t.Fatalf("view:\n%s", out)
		}
	})
}

// `kubetrail trace` takes --source and --cluster from the file's entry of the kubeconfig's
// current context: the recorded deployment renders as its golden tree without either flag.
func TestTraceTakesTheSourceAndClusterOfTheCurrentContextFromTheConfigFile(t *testing.T) {
	withKubeconfig(t)
	t.Setenv("KUBETRAIL_SOURCE", "")
	t.Setenv("KUBETRAIL_CLUSTER", "")
	recordedSrc := "file=" + recordedFile(t, "deployment")
	path := withConfig(t, fmt.Sprintf(`source: file=/nonexistent/traces.jsonl
contexts:
  gone:
    source: %s
    cluster: testbed
`, recordedSrc))

	code, out, errOut := kubetrail(t, "trace", "deployment/demo", "-v", "1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	compareGolden(t, "deployment.tree.txt", out)
	line := fmt.Sprintf("kubetrail: source %s from the config file %s, context gone; cluster testbed from the config file %s, context gone\n", recordedSrc, path, path)
	if !strings.HasPrefix(errOut, line) {
		t.Fatalf("-v 1 does not say where the defaults came from:\n%s", errOut)
	}
	if code, _, errOut = kubetrail(t, "trace", "deployment/demo"); code != 0 || strings.Contains(errOut, "config file") {
		t.Fatalf("without -v: exit %d, stderr %q", code, errOut)
	}

	// The flag and the environment come first.
	code, _, errOut = kubetrail(t, "trace", "deployment/demo", "--source", "file=/flag/traces.jsonl")
	if code != 2 || !strings.Contains(errOut, "--source file=/flag/traces.jsonl: open /flag/traces.jsonl") || strings.Contains(errOut, "config file") {
		t.Fatalf("--source: exit %d: %s", code, errOut)
	}
	t.Setenv("KUBETRAIL_SOURCE", "file=/env/traces.jsonl")
	code, _, errOut = kubetrail(t, "trace", "deployment/demo")
	if code != 2 || !strings.Contains(errOut, "open /env/traces.jsonl") {
		t.Fatalf("$KUBETRAIL_SOURCE: exit %d: %s", code, errOut)
	}
	t.Setenv("KUBETRAIL_SOURCE", "")

	// Another context has no entry: the file's default, which is named when it fails.
	code, _, errOut = kubetrail(t, "trace", "deployment/demo", "--context", "elsewhere")
	want := "--source came from the config file " + path + ", its default for every context (kubetrail config view)"
	if code != 1 || !strings.Contains(errOut, "open /nonexistent/traces.jsonl") || !strings.Contains(errOut, want) {
		t.Fatalf("--context elsewhere: exit %d: %s", code, errOut)
	}

	// A backend that does not answer names the file too.
	withConfig(t, "contexts:\n  gone:\n    source: jaeger=http://"+closedPort(t)+"\n")
	code, _, errOut = kubetrail(t, "trace", "deployment/demo")
	if code != 1 || !strings.Contains(errOut, "backend unreachable") || !strings.Contains(errOut, "--source came from the config file") || !strings.Contains(errOut, "context gone") {
		t.Fatalf("an unreachable source from the file: exit %d: %s", code, errOut)
	}

	// The help says where to look.
	_, out, _ = kubetrail(t, "trace", "-h")
	if !strings.Contains(out, "kubetrail config view") {
		t.Fatalf("trace -h does not point at config view:\n%s", out)
	}
}
