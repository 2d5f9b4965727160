package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/kubetrail/kubetrail/cmd/kubetrail/internal/trail"
	"github.com/kubetrail/kubetrail/internal/model"
)

// The config file holds the flags that are the same on every call against one cluster — where
// its collector's traces are, the collector's cluster name and window — keyed by the kubeconfig
// context, with a default for every context. docs/cli.md#the-config-file-kubetrail-config.

// configKeys are the settings the file holds, in the order they are shown.
var configKeys = []string{"source", "cluster", "window"}

// configEnv are the environment variables that stand for a flag, before the file.
var configEnv = map[string]string{"source": "KUBETRAIL_SOURCE", "cluster": "KUBETRAIL_CLUSTER"}

// settings are one context's defaults (or the file's top-level default); "" is unset.
type settings struct {
	Source  string `json:"source,omitempty"`
	Cluster string `json:"cluster,omitempty"`
	Window  string `json:"window,omitempty"`
}

func (s *settings) get(key string) string {
	switch key {
	case "source":
		return s.Source
	case "cluster":
		return s.Cluster
	case "window":
		return s.Window
	}
	return ""
}

func (s *settings) set(key, value string) {
	switch key {
	case "source":
		s.Source = value
	case "cluster":
		s.Cluster = value
	case "window":
		s.Window = value
	}
}

func (s *settings) empty() bool { return *s == settings{} }

// configFile is the file: the top-level keys are the default of every context.
type configFile struct {
	settings
	Contexts map[string]*settings `json:"contexts,omitempty"`
}

// configPath is the file's path: $KUBETRAIL_CONFIG, else $XDG_CONFIG_HOME/kubetrail/config.yaml,
// else ~/.config/kubetrail/config.yaml (on every OS, as kubectl keeps ~/.kube everywhere).
func configPath() (string, error) {
	if p := os.Getenv("KUBETRAIL_CONFIG"); p != "" {
		return p, nil
	}
	if x := os.Getenv("XDG_CONFIG_HOME"); x != "" && filepath.IsAbs(x) { // the spec ignores a relative one
		return filepath.Join(x, "kubetrail", "config.yaml"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("the config file: %w (set $KUBETRAIL_CONFIG)", err)
	}
	return filepath.Join(home, ".config", "kubetrail", "config.yaml"), nil
}

// loadConfig reads the file at path; a missing file is an empty one. Parsing is strict: an
// unknown key (a typo would otherwise be a default silently not taken), a duplicate key or a
// value that is not one is an error naming the file and the key.
func loadConfig(path string) (*configFile, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &configFile{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the config file: %w", err)
	}
	cfg, err := parseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("the config file %s: %w", path, err)
	}
	return cfg, nil
}

func parseConfig(data []byte) (*configFile, error) {
	cfg := &configFile{}
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, err
	}
	if bytes.Equal(bytes.TrimSpace(j), []byte("null")) { // empty, or only comments
		return cfg, nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(j, &top); err != nil {
		return nil, errors.New("want a mapping of source, cluster, window and contexts")
	}
	for _, key := range sortedKeys(top) {
		if key == "contexts" {
			continue
		}
		if err := parseSetting(&cfg.settings, "", key, top[key]); err != nil {
			return nil, err
		}
	}
	if raw, ok := top["contexts"]; ok && string(raw) != "null" {
		var contexts map[string]json.RawMessage
		if err := json.Unmarshal(raw, &contexts); err != nil {
			return nil, errors.New("contexts: want a mapping of kubeconfig context names to their source, cluster and window")
		}
		cfg.Contexts = map[string]*settings{}
		for _, name := range sortedKeys(contexts) {
			s := &settings{}
			var keys map[string]json.RawMessage
			if string(contexts[name]) != "null" {
				if err := json.Unmarshal(contexts[name], &keys); err != nil {
					return nil, fmt.Errorf("contexts.%s: want a mapping of source, cluster and window", name)
				}
			}
			for _, key := range sortedKeys(keys) {
				if err := parseSetting(s, "contexts."+name, key, keys[key]); err != nil {
					return nil, err
				}
			}
			cfg.Contexts[name] = s
		}
	}
	return cfg, nil
}

// parseSetting reads one key of a context (at is where it is, "contexts.NAME", or "" for the
// top level).
func parseSetting(s *settings, at, key string, raw json.RawMessage) error {
	if !slices.Contains(configKeys, key) {
		if at == "" {
			return fmt.Errorf("unknown key %q (want source, cluster, window or contexts)", key)
		}
		return fmt.Errorf("%s: unknown key %q (want source, cluster or window)", at, key)
	}
	if at != "" {
		key = at + "." + key
	}
	var v string
	if string(raw) != "null" {
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("%s: want a string, got %s", key, raw)
		}
	}
	if v == "" {
		return nil
	}
	if err := checkSetting(key[strings.LastIndex(key, ".")+1:], v); err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	key = key[strings.LastIndex(key, ".")+1:]
	s.set(key, v)
	return nil
}

// checkSetting checks a value as the flag would take it, without reaching anything: a source
// that is not jaeger=URL or file=PATH, or a window that is not a duration, is refused when it is
// written and when the file is read, not on the call that uses it.
func checkSetting(key, value string) error {
	switch key {
	case "source":
		kind, arg, ok := strings.Cut(value, "=")
		switch {
		case !ok || arg == "" || (kind != "jaeger" && kind != "file"):
			return fmt.Errorf("%q: want jaeger=URL or file=PATH", value)
		case kind == "jaeger":
			if _, err := trail.OpenSource(value); err != nil { // a jaeger source opens no connection
				return err
			}
		}
	case "window":
		d, err := time.ParseDuration(value)
		if err != nil || d < time.Second {
			return fmt.Errorf("%q: want the collector's window, e.g. 30m", value)
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// configHeader heads the file as written: the file is rewritten whole, so comments are not kept.
const configHeader = "# kubetrail's defaults per kubeconfig context (docs/cli.md#the-config-file-kubetrail-config).\n# Written by `kubetrail config set`; comments are not kept.\n"

// saveConfig writes the file atomically, mode 0600 (it names the team's backends): a temporary
// file in the same directory, synced, then renamed over it, so a reader sees the old file or
// the new one, never a part. A symbolic link (a dotfiles checkout) is followed, not replaced.
func saveConfig(path string, cfg *configFile) error {
	for name, s := range cfg.Contexts {
		if s == nil || s.empty() {
			delete(cfg.Contexts, name)
		}
	}
	body, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	if string(body) == "{}\n" {
		body = nil
	}
	if target, err := filepath.EvalSymlinks(path); err == nil {
		path = target
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("the config file: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".config-*.yaml")
	if err != nil {
		return fmt.Errorf("the config file: %w", err)
	}
	defer os.Remove(tmp.Name()) // gone after the rename; left by a failure
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("the config file: %w", err)
	}
	if _, err := tmp.WriteString(configHeader + string(body)); err != nil {
		tmp.Close()
		return fmt.Errorf("the config file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("the config file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("the config file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("the config file: %w", err)
	}
	return nil
}

// kubeContext is the kubeconfig context a command uses, found as connect finds it but without
// reaching the cluster: --context, else the current context of --kubeconfig, $KUBECONFIG or
// ~/.kube/config; "" without a kubeconfig (the defaults are then the file's top-level ones).
// A kubeconfig that does not load is connect's to report.
func kubeContext(k *kubeFlags) string {
	if k.context != "" {
		return k.context
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.kubeconfig
	raw, err := rules.Load()
	if err != nil || raw == nil {
		return ""
	}
	return raw.CurrentContext
}

// defaults are the file's values for one context.
type defaults struct {
	path    string
	context string // the kubeconfig context, "" for none
	file    *configFile
}

// loadDefaults reads the file for the context the command's kubeconfig flags select.
func loadDefaults(k *kubeFlags) (*defaults, error) {
	path, err := configPath()
	if err != nil {
		return nil, err
	}
	file, err := loadConfig(path)
	if err != nil {
		return nil, err
	}
	return &defaults{path: path, context: kubeContext(k), file: file}, nil
}

// origin is where a value in effect came from, for `config view`, -v and error messages.
type origin struct {
	kind    string // "flag", "env", "context", "default", "built-in"; "" unset
	env     string
	path    string
	context string
}

func (o origin) String() string {
	switch o.kind {
	case "flag":
		return "the command line"
	case "env":
		return "$" + o.env
	case "context":
		return fmt.Sprintf("the config file %s, context %s", o.path, o.context)
	case "default":
		return fmt.Sprintf("the config file %s, its default for every context", o.path)
	case "built-in":
		return "the built-in default"
	}
	return "unset"
}

// short is the origin in `config view`'s table, whose heading names the file.
func (o origin) short() string {
	switch o.kind {
	case "context":
		return "config file: context " + o.context
	case "default":
		return "config file: default"
	case "built-in":
		return "built-in"
	}
	return o.String()
}

// fromFile tells whether the value came from the config file.
func (o origin) fromFile() bool { return o.kind == "context" || o.kind == "default" }

// lookup is the value of key without a flag: $ENV, else the context's, else the file's default,
// else the built-in default.
func (d *defaults) lookup(key string) (string, origin) {
	if env := configEnv[key]; env != "" {
		if v := os.Getenv(env); v != "" {
			return v, origin{kind: "env", env: env}
		}
	}
	if s := d.file.Contexts[d.context]; d.context != "" && s != nil && s.get(key) != "" {
		return s.get(key), origin{kind: "context", path: d.path, context: d.context}
	}
	if v := d.file.get(key); v != "" {
		return v, origin{kind: "default", path: d.path}
	}
	if key == "window" {
		return formatWindow(model.DefaultWindow), origin{kind: "built-in"}
	}
	return "", origin{}
}

// formatWindow writes a window as one would type it: 30m, 1h, 1h30m.
func formatWindow(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// resolved are the backend flags in effect for a command and where they came from.
type resolved struct {
	source, cluster origin
	// fromFile are the values the file gave, for -v: "source jaeger=… from …".
	fromFile []string
}

// resolveDefaults is what trace and apply do before they read a backend: load the defaults of
// the context the kube flags name, and apply them to the flags the command line left unset.
func resolveDefaults(k *kubeFlags, fs *pflag.FlagSet, source, cluster *string, window *time.Duration) (resolved, error) {
	d, err := loadDefaults(k)
	if err != nil {
		return resolved{}, err
	}
	return d.apply(fs, source, cluster, window)
}

// apply sets the flags the command line left unset from the environment and the file, in that
// order (flag > $ENV > context > default > built-in), and says where each came from.
func (d *defaults) apply(fs *pflag.FlagSet, source, cluster *string, window *time.Duration) (resolved, error) {
	var r resolved
	pick := func(key string, dst *string) origin {
		if fs.Changed(key) {
			return origin{kind: "flag"}
		}
		v, o := d.lookup(key)
		*dst = v
		return o
	}
	r.source = pick("source", source)
	r.cluster = pick("cluster", cluster)
	wo := origin{kind: "flag"}
	if !fs.Changed("window") {
		var v string
		if v, wo = d.lookup("window"); wo.fromFile() {
			w, err := time.ParseDuration(v)
			if err != nil { // checked when read: not reached
				return r, fmt.Errorf("%s: window: %w", wo, err)
			}
			*window = w
		}
	}
	for _, x := range []struct {
		key, value string
		o          origin
	}{{"source", *source, r.source}, {"cluster", *cluster, r.cluster}, {"window", formatWindow(*window), wo}} {
		if x.o.fromFile() {
			r.fromFile = append(r.fromFile, fmt.Sprintf("%s %s from %s", x.key, x.value, x.o))
		}
	}
	return r, nil
}

// describe is -v's line for the values the file gave, "" when it gave none.
func (r resolved) describe() string {
	return strings.Join(r.fromFile, "; ")
}

// sourceError names the config file in a failure of a source it gave: the user did not type it.
func (r resolved) sourceError(err error) error {
	if err == nil || !r.source.fromFile() {
		return err
	}
	return fmt.Errorf("%w; --source came from %s (kubetrail config view)", err, r.source)
}

// configFlags are `config`'s flags: the kubeconfig's, to know the current context, and where to
// write.
type configFlags struct {
	kube kubeFlags
	top  bool
}

func configCommand(cmd string, f *configFlags) *command {
	c := newCommand(cmd,
		"Show and change kubetrail's defaults of --source, --cluster and --window per kubeconfig context, so that\n`trace` and `apply` need none of them against a cluster they know.",
		`The file is $KUBETRAIL_CONFIG, else $XDG_CONFIG_HOME/kubetrail/config.yaml, else ~/.config/kubetrail/config.yaml.
A value is taken from the command line, else the environment ($KUBETRAIL_SOURCE, $KUBETRAIL_CLUSTER), else the
file's entry for the kubeconfig context in use (--context, else the current context), else the file's top-level
default, else the built-in default. Keys: source (jaeger=URL or file=PATH), cluster (the collector's
k8s.cluster.name) and window (the collector's window, e.g. 30m).

Subcommands:
  view                 The values in effect for the context and where each came from, then the file
  get [KEY]            The values in effect (with KEY, its value alone, for scripts)
  set KEY VALUE        Set a key for the context (--context, else the current one; --default: every context)
  unset KEY            Remove a key of the context (or of the default with --default)
  path                 The file's path`,
		fmt.Sprintf(`  # The current context's Jaeger and the collector's cluster name
  %[1]s set source jaeger=http://localhost:16686
  %[1]s set cluster prod-eu-1

  # Another context's, and a default for every context
  %[1]s set --context staging source jaeger=https://jaeger.staging.example.com
  %[1]s set --default window 1h

  # What trace would use, and from where
  %[1]s view
`, cmd), "(view | get [KEY] | set KEY VALUE | unset KEY | path) [--context NAME | --default]")
	c.group("Context", func(fs *pflag.FlagSet) {
		fs.StringVar(&f.kube.kubeconfig, "kubeconfig", "", "The kubeconfig whose current context is meant (default: $KUBECONFIG, then ~/.kube/config).")
		fs.StringVar(&f.kube.context, "context", "", "The kubeconfig context whose defaults are meant (default: the current context). It need not exist in the kubeconfig.")
		fs.BoolVar(&f.top, "default", false, "set, unset: the file's top-level default, for every context without its own value.")
	})
	return c
}

// configVerbs are config's subcommands.
var configVerbs = []string{"view", "get", "set", "unset", "path"}

// runConfig is `kubetrail config`.
func runConfig(cmd string, args []string, stdout, stderr io.Writer) error {
	var f configFlags
	c := configCommand(cmd, &f)
	pos, err := c.parse(args, stdout)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("%s takes a subcommand: view, get, set, unset or path", cmd)
	}
	verb, pos := pos[0], pos[1:]
	if !slices.Contains(configVerbs, verb) {
		return usagef("%s %q: want view, get, set, unset or path", cmd, verb)
	}
	nargs := map[string][]int{"view": {0}, "get": {0, 1}, "set": {2}, "unset": {1}, "path": {0}}[verb]
	if !slices.Contains(nargs, len(pos)) {
		want := map[string]string{"view": "no argument", "get": "at most one key", "set": "a key and a value", "unset": "a key", "path": "no argument"}[verb]
		return usagef("%s %s takes %s (got %d: %s)", cmd, verb, want, len(pos), strings.Join(pos, " "))
	}
	if f.top && f.kube.context != "" {
		return usagef("--default and --context: pick one, the file's default or a context's")
	}
	if f.top && verb != "set" && verb != "unset" {
		return usagef("--default is for set and unset")
	}
	if len(pos) > 0 && !slices.Contains(configKeys, pos[0]) {
		return usagef("%s %s %q: unknown key; want source, cluster or window", cmd, verb, pos[0])
	}
	path, err := configPath()
	if err != nil {
		return err
	}
	if verb == "path" {
		fmt.Fprintln(stdout, path)
		return nil
	}
	d, err := loadDefaults(&f.kube)
	if err != nil {
		return err
	}
	switch verb {
	case "view":
		writeInEffect(stdout, d)
		fmt.Fprintln(stdout)
		data, err := os.ReadFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			fmt.Fprintf(stdout, "# %s: no such file yet (`%s set` writes it)\n", path, cmd)
		case err != nil:
			return fmt.Errorf("the config file: %w", err)
		default:
			fmt.Fprintf(stdout, "# %s\n", path)
			for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
				fmt.Fprintln(stdout, trail.Escape(line))
			}
		}
	case "get":
		if len(pos) == 1 {
			v, _ := d.lookup(pos[0])
			fmt.Fprintln(stdout, trail.Escape(v))
			return nil
		}
		writeInEffect(stdout, d)
	case "set", "unset":
		target, where := &d.file.settings, "the default"
		if !f.top {
			if d.context == "" {
				return usagef("no current context (no kubeconfig, or none is current): name one with --context, or set the default for every context with --default")
			}
			if d.file.Contexts == nil {
				d.file.Contexts = map[string]*settings{}
			}
			if d.file.Contexts[d.context] == nil {
				d.file.Contexts[d.context] = &settings{}
			}
			target, where = d.file.Contexts[d.context], "context "+d.context
		}
		key, value := pos[0], ""
		if verb == "set" {
			value = pos[1]
			if value == "" {
				return usagef("%s set %s \"\": to remove it, %s unset %s", cmd, key, cmd, key)
			}
			if err := checkSetting(key, value); err != nil {
				return usagef("%s: %v", key, err)
			}
			if k, p, _ := strings.Cut(value, "="); key == "source" && k == "file" && !filepath.IsAbs(p) {
				// The file is read from every directory: a relative path would mean another file.
				abs, err := filepath.Abs(p)
				if err != nil {
					return err
				}
				value = "file=" + abs
			}
		} else if target.get(key) == "" {
			fmt.Fprintf(stderr, "%s: %s was not set for %s\n", cmd, key, where)
			return nil
		}
		target.set(key, value)
		if err := saveConfig(path, d.file); err != nil {
			return err
		}
		if verb == "set" {
			fmt.Fprintf(stderr, "%s: %s set for %s in %s\n", cmd, key, trail.Escape(where), path)
		} else {
			fmt.Fprintf(stderr, "%s: %s unset for %s in %s\n", cmd, key, trail.Escape(where), path)
		}
	}
	return nil
}

// writeInEffect writes the values trace would take for d's context without flags, and where
// each came from.
func writeInEffect(w io.Writer, d *defaults) {
	ctx := d.context
	if ctx == "" {
		ctx = "(none: no kubeconfig, or no current context)"
	}
	fmt.Fprintf(w, "Context: %s\nConfig file: %s\n", trail.Escape(ctx), d.path)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tVALUE\tFROM")
	for _, key := range configKeys {
		v, o := d.lookup(key)
		if v == "" {
			v = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", key, trail.Escape(v), trail.Escape(o.short()))
	}
	_ = tw.Flush()
}
