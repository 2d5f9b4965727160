package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/kubetrail/kubetrail/cmd/kubetrail/internal/trail"
	"github.com/kubetrail/kubetrail/internal/model"
)

// changesOutputs are the values of changes' -o.
var changesOutputs = []string{"text", "json"}

// defaultChangeLimit bounds the change feed unless --limit says otherwise.
const defaultChangeLimit = 200

type changesFlags struct {
	traceFlags
	allNamespaces bool
	user, verb    string
	field         string
	errors        bool
	limit         int
}

func changesCommand(cmd string, f *changesFlags) *command {
	c := newCommand(cmd,
		"List the writes across objects, newest first: who changed what, when, and what the apiserver answered.",
		`Searches the backend for the audit spans of writes (create, update, patch, delete) in the range, of one
kind (TYPE) or of every kind, and prints one line per write: time, cluster, object, user, verb, answer, and the
changed paths with their old → new values, or why the write was refused.`,
		fmt.Sprintf(`  # What changed in namespace shop in the last hour, and who did it
  %[1]s -n shop --source jaeger=http://localhost:16686

  # Who changed the replicas of any Deployment, across namespaces, since 14:00
  %[1]s deployments -A --field spec.replicas --since 14:00

  # The image changes of one Deployment's containers
  %[1]s deploy/web --field 'spec.template.spec.containers[name=app].image'

  # Refused writes of one user, as JSON
  %[1]s -A --errors --user alice -o json
`, cmd),
		"[TYPE[/NAME]] [-n NAMESPACE | -A] [--source jaeger=URL|file=PATH] [options]")
	c.group("Cluster (the kubeconfig context gives the namespace when -n is not set)", func(fs *pflag.FlagSet) {
		f.kube.add(fs, "Only objects of this namespace (default: the kubeconfig context's, then \"default\"); cluster-scoped objects need -A.")
		fs.BoolVarP(&f.allNamespaces, "all-namespaces", "A", false, "Objects of every namespace, and cluster-scoped objects.")
	})
	c.group("Filters", func(fs *pflag.FlagSet) {
		fs.StringVar(&f.cluster, "cluster", "", "Only this cluster (the collector's cluster setting, k8s.cluster.name; default $KUBETRAIL_CLUSTER, then the config file's for the context).")
		fs.StringVar(&f.user, "user", "", "Only writes of this user: the full name (system:serviceaccount:kube-system:deployment-controller) or the short one the output shows (deployment-controller, kubelet/NODE).")
		fs.StringVar(&f.verb, "verb", "", "Only this verb: create, update, patch, delete or deletecollection.")
		fs.StringVar(&f.field, "field", "", "Only writes that changed this field path or a path under it, as the diffs write them: spec.replicas, spec.template.spec.containers[name=app].image, metadata.labels[\"app.kubernetes.io/name\"].")
		fs.BoolVar(&f.errors, "errors", false, "Only refused writes (an HTTP status of 400 or more: denied by admission, invalid, conflicting, forbidden).")
	})
	c.group("Backend", func(fs *pflag.FlagSet) {
		fs.StringVar(&f.source, "source", "", "Where the traces are: jaeger=URL (Jaeger's query service, e.g. http://localhost:16686) or file=PATH (OTLP JSON lines, as the collector's file exporter writes them). Default $KUBETRAIL_SOURCE, then the config file's for the context.")
		fs.DurationVar(&f.window, "window", model.DefaultWindow, "The collector's window (k8s_object_link's window setting). Default: the config file's for the context, else 30m.")
	})
	c.group("Range", func(fs *pflag.FlagSet) {
		fs.StringVar(&f.since, "since", "", "Start of the range: a duration ago (30m, 2h), a local clock time (14:00), a date (2026-11-21) or an RFC 3339 time. Default 1h for jaeger, everything for file.")
		fs.StringVar(&f.until, "until", "", "End of the range, in the same forms as --since. Default now.")
	})
	c.group("Output", func(fs *pflag.FlagSet) {
		fs.StringVarP(&f.output, "output", "o", "text", "Output format: text (one line per write, cut to the terminal's width) or json.")
		fs.IntVar(&f.limit, "limit", defaultChangeLimit, "Show at most this many writes, the newest; a line on stderr says when more matched.")
		fs.IntVarP(&f.verbosity, "v", "v", 0, "Log level: 1 says on stderr which defaults came from the config file, and what was searched.")
	})
	return c
}

// runChanges is `kubetrail changes`.
func runChanges(ctx context.Context, prog, cmd string, args []string, stdout, stderr io.Writer) error {
	var f changesFlags
	c := changesCommand(cmd, &f)
	pos, err := c.parse(args, stdout)
	if err != nil {
		return err
	}
	q := trail.ChangeQuery{User: f.user, Errors: f.errors, Limit: f.limit}
	var kind trail.Kind
	switch len(pos) {
	case 0:
	case 1, 2:
		typ, name, _ := strings.Cut(pos[0], "/")
		if len(pos) == 2 {
			if name != "" {
				return usagef("%q %q: want TYPE, TYPE/NAME or TYPE NAME", pos[0], pos[1])
			}
			name = pos[1]
		}
		if typ == "" || strings.Contains(name, "/") {
			return usagef("%q: want TYPE, TYPE/NAME or TYPE NAME, e.g. deployments or deploy/web", strings.Join(pos, " "))
		}
		kind = trail.ResolveKind(typ)
		q.Kind, q.Name = kind.Kind, name
	default:
		return usagef("%s takes at most one TYPE[/NAME] (got %d arguments: %s)", cmd, len(pos), strings.Join(pos, " "))
	}
	if !slices.Contains(changesOutputs, f.output) {
		return usagef("--output %q: want text or json", f.output)
	}
	if f.verb != "" && !slices.Contains(trail.WriteVerbs, f.verb) {
		return usagef("--verb %q: want one of %s (changes lists writes)", f.verb, strings.Join(trail.WriteVerbs, ", "))
	}
	q.Verb = f.verb
	if f.field != "" {
		if q.Field, err = trail.ParseFieldPath(f.field); err != nil {
			return usagef("--field: %v", err)
		}
	}
	if f.limit < 1 {
		return usagef("--limit %d: want at least 1", f.limit)
	}
	if f.allNamespaces && f.kube.namespaceSet() {
		return usagef("-A and -n %s: choose one", f.kube.namespace)
	}
	r, err := resolveDefaults(&f.kube, c.fs, &f.source, &f.cluster, &f.window)
	if err != nil {
		return err
	}
	logf := func(format string, a ...any) {
		if f.verbosity > 0 {
			fmt.Fprint(stderr, trail.Escape(prog+": "+fmt.Sprintf(format, a...))+"\n")
		}
	}
	if line := r.describe(); line != "" {
		logf("%s", line)
	}
	src, err := f.openSource(prog, r, stderr)
	if err != nil {
		return err
	}
	q.Since, q.Until, err = f.timeRange(src, now())
	if err != nil {
		return err
	}
	q.Cluster, q.Window = f.cluster, f.window
	if !f.allNamespaces && (q.Kind == "" || kind.Namespaced) {
		q.Namespace, err = f.changesNamespace(prog, stderr)
		if err != nil {
			return err
		}
	}
	pw := startProgress(stderr, progressLabel(f.source), f.output != "json" && terminal(stderr), realClock)
	res, err := trail.Changes(ctx, src, q)
	pw.stop()
	if err != nil {
		if errors.Is(err, trail.ErrUnreachable) {
			return r.sourceError(err)
		}
		return err
	}
	logf("searched %d kinds (%s), read %d traces; %d writes matched", len(res.Kinds), strings.Join(res.Kinds, ", "), res.Traces, res.Matched)
	if len(res.SearchCut) > 0 {
		fmt.Fprintf(stderr, "warning: the backend's search answered its bound of %d traces for %s: older writes may be missing; narrow --since/--until or add filters\n",
			trail.SearchLimit, trail.Escape(strings.Join(res.SearchCut, ", ")))
	}
	if res.Unread > 0 {
		fmt.Fprintf(stderr, "warning: the searches found %d traces; %d were left unread (at most %d): writes may be missing; narrow --since/--until, name a TYPE or add filters\n",
			res.Traces+res.Unread, res.Unread, trail.MaxTraces)
	}
	if res.Matched > len(res.Writes) {
		fmt.Fprintf(stderr, "%s: %d writes matched; showing the newest %d (--limit)\n", prog, res.Matched, len(res.Writes))
	}
	if f.output == "json" {
		return trail.WriteChangesJSON(stdout, res, q.Since, q.Until)
	}
	trail.WriteChanges(stdout, res, q.Since, q.Until, termWidth(stdout))
	return nil
}

// changesNamespace is the namespace the feed is about without -A: -n, else the kubeconfig
// context's, else "default", as kubectl takes it. The cluster is not asked.
func (f *changesFlags) changesNamespace(prog string, stderr io.Writer) (string, error) {
	if f.kube.namespaceSet() {
		return f.kube.namespace, nil
	}
	cl, err := connect(&f.kube, nil)
	switch {
	case err != nil && f.kube.explicit():
		return "", err
	case err != nil && !errors.Is(err, errNoKubeconfig):
		fmt.Fprintf(stderr, "%s: %s; namespace default\n", prog, trail.Escape(err.Error()))
	}
	return f.kube.namespaceFor(true, cl), nil
}

// termWidth is the width of the terminal w is, 0 when it is not one (a pipe or a file gets
// whole lines).
var termWidth = func(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return 0
	}
	width, _, err := term.GetSize(int(f.Fd()))
	if err != nil {
		return 0
	}
	return width
}
