package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/kubetrail/kubetrail/cmd/kubetrail/internal/trail"
	"github.com/kubetrail/kubetrail/internal/model"
)

// defaultSince is the range of a backend query without --since: the last hour.
const defaultSince = time.Hour

// now is the clock that durations ago, clock times and dates are read against (its time zone is
// theirs); tests fix it.
var now = time.Now

type traceFlags struct {
	kube                 kubeFlags
	cluster, uid, source string
	since, until         string
	window               time.Duration
	output, out, only    string
	depth                int
	generation           int64
	verbosity            int
}

// outputs are the values of -o.
var outputs = []string{"tree", "timeline", "json", "html"}

// traceCommand is trace's command line; cmd is the command as the user typed it ("kubectl
// trail", "kubetrail trace"), for the help.
func traceCommand(cmd string, f *traceFlags) *command {
	c := newCommand(cmd,
		"Show one object's whole story from the traces the kubetrail collector wrote: its windows merged, the objects\nit owns, every write and Event, and why it was slow, as a tree, a timeline, JSON or an HTML page.",
		`When the kubeconfig reaches the cluster, the object's UID and its owners are read from it and the trace IDs of
its windows are computed (with --cluster, the collector's cluster name); otherwise, or when the object is gone,
the backend is searched by name. TYPE is a resource, kind or short name (deploy, po, sts, cm, no, ...), with
or without its group (deployments.apps).`,
		fmt.Sprintf(`  # A Deployment of the current context's namespace, read from Jaeger
  %[1]s deploy/web --cluster prod-eu-1 --source jaeger=http://localhost:16686

  # A Pod of another namespace over the last two hours, as a timeline
  %[1]s pod web-7d4b9c6f5-x2x8k -n shop --since 2h -o timeline

  # Only the failed requests and Warning Events of a node
  %[1]s no/worker-3 --only errors

  # The rollout to generation 3, as a self-contained HTML page
  %[1]s deploy/web --generation 3 -o html --out web.html

  # From the collector's file exporter, a deleted object by its UID
  %[1]s deploy/demo --source file=traces.jsonl --uid 1a8e24cf-7024-43fb-9ae8-16151a19b473
`, cmd),
		"(TYPE/NAME | TYPE NAME) [--source jaeger=URL|file=PATH] [options]")
	c.group("Cluster (read for the object's UID and owners; the backend is searched when it cannot be)", func(fs *pflag.FlagSet) {
		f.kube.add(fs, "The object's namespace (default: the kubeconfig context's, then \"default\"; ignored for cluster-scoped kinds such as nodes, namespaces or clusterroles).")
	})
	c.group("Object", func(fs *pflag.FlagSet) {
		fs.StringVar(&f.cluster, "cluster", "", "The collector's cluster setting (k8s.cluster.name; default $KUBETRAIL_CLUSTER, then the config file's for the context: kubetrail config view shows which is in effect, and from where). The trace IDs are computed from it and the UID, so without it the backend is searched (any cluster matches); the kubeconfig does not know it.")
		fs.StringVar(&f.uid, "uid", "", "The object's UID: the windows' trace IDs are computed from it (with --cluster) and the cluster is not asked; also picks one of several objects that had the name (a recreated Pod).")
	})
	c.group("Backend", func(fs *pflag.FlagSet) {
		fs.StringVar(&f.source, "source", "", "Where the traces are: jaeger=URL (Jaeger's query service, e.g. http://localhost:16686) or file=PATH (OTLP JSON lines, as the collector's file exporter writes them). Default $KUBETRAIL_SOURCE, then the config file's for the context (kubetrail config view shows which is in effect, and from where).")
		fs.DurationVar(&f.window, "window", model.DefaultWindow, "The collector's window (k8s_object_link's window setting): the computed trace IDs depend on it. Default: the config file's for the context, else 30m.")
	})
	c.group("Range", func(fs *pflag.FlagSet) {
		fs.StringVar(&f.since, "since", "", "Start of the range: a duration ago (30m, 2h), a local clock time (14:00, today or else yesterday), a date (2026-11-21) or an RFC 3339 time. Default 1h for jaeger, everything for file.")
		fs.StringVar(&f.until, "until", "", "End of the range, in the same forms as --since. Default now.")
		fs.Int64Var(&f.generation, "generation", 0, "Show the rollout to this metadata.generation of the object: from the first write that carried it until the next generation's (0: every generation).")
	})
	c.group("Output", func(fs *pflag.FlagSet) {
		fs.StringVarP(&f.output, "output", "o", "tree", "Output format: tree, timeline, json or html.")
		fs.StringVar(&f.out, "out", "", "Write the output to this file instead of stdout (the usual way for html).")
		fs.IntVar(&f.depth, "depth", -1, "Levels of owned objects to show (0: the object alone); -1 all, at most 16 (the owner-chain bound).")
		fs.StringVar(&f.only, "only", "", "Show only errors (failed requests, Warning Events), writes or events.")
		fs.IntVarP(&f.verbosity, "v", "v", 0, "Log level: 1 says on stderr which defaults came from the config file and how the object was found (its UID from the cluster or the backend, the traces fetched and how).")
	})
	return c
}

// runTrace is `kubetrail trace`; prog is the program as the user typed it ("kubectl trail"), cmd
// the command ("kubectl trail", "kubetrail trace").
func runTrace(ctx context.Context, prog, cmd string, args []string, stdout, stderr io.Writer) error {
	var f traceFlags
	c := traceCommand(cmd, &f)
	pos, err := c.parse(args, stdout)
	if err != nil {
		return err
	}
	kindArg, name, err := objectArg(pos, cmd)
	if err != nil {
		return err
	}
	r, err := resolveDefaults(&f.kube, c.fs, &f.source, &f.cluster, &f.window)
	if err != nil {
		return err
	}
	errw := stderr // the progress line's writer while the backend answers
	say := func(format string, a ...any) {
		fmt.Fprint(errw, trail.Escape(prog+": "+fmt.Sprintf(format, a...))+"\n")
	}
	logf := func(format string, a ...any) {
		if f.verbosity > 0 {
			say(format, a...)
		}
	}
	if !slices.Contains(outputs, f.output) {
		return usagef("--output %q: want tree, timeline, json or html", f.output)
	}
	if f.only != "" && !slices.Contains(trail.ValidOnly, f.only) {
		return usagef("--only %q: want errors, writes or events", f.only)
	}
	if line := r.describe(); line != "" {
		logf("%s", line)
	}
	src, err := f.openSource(prog, r, stderr)
	if err != nil {
		return err
	}
	since, until, err := f.timeRange(src, now())
	if err != nil {
		return err
	}
	target, err := f.target(ctx, kindArg, name, say, logf)
	if err != nil {
		return err
	}
	pw := startProgress(stderr, progressLabel(f.source), f.output != "json" && terminal(stderr), realClock)
	errw = pw
	v, err := readView(ctx, src, target, viewOptions{Since: since, Until: until, Window: f.window, Depth: f.depth, Only: f.only, Generation: f.generation}, pw, logf)
	pw.stop()
	errw = stderr
	if err != nil {
		if errors.Is(err, trail.ErrUnreachable) {
			return r.sourceError(err)
		}
		return err
	}
	root, h := v.root, v.header
	w := stdout
	if f.out != "" {
		file, err := os.Create(f.out)
		if err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		defer file.Close()
		w = file
	}
	switch f.output {
	case "tree":
		trail.WriteTree(w, root, h)
	case "timeline":
		trail.WriteTimeline(w, root, h)
	case "json":
		err = trail.WriteJSON(w, root, h)
	case "html":
		err = trail.WriteHTML(w, root, h)
	}
	if err != nil {
		return err
	}
	if f.out != "" {
		fmt.Fprintf(stderr, "wrote %s\n", f.out)
	}
	return nil
}

// openSource checks --window and --source and opens the source (a file source's skipped lines
// are warned about on stderr): what every command that reads the backend does first.
func (f *traceFlags) openSource(prog string, r resolved, stderr io.Writer) (trail.Source, error) {
	if f.window < time.Second {
		return nil, usagef("--window %s: want the collector's window, e.g. 30m", f.window)
	}
	if f.source == "" {
		return nil, usagef("--source is required: jaeger=URL (e.g. jaeger=http://localhost:16686) or file=PATH (the file exporter's OTLP JSON lines); or keep the context's with %s config set source jaeger=URL", prog)
	}
	src, err := trail.OpenSource(f.source)
	if err != nil {
		if r.source.fromFile() {
			return nil, r.sourceError(err)
		}
		return nil, usageError{err}
	}
	if file, ok := src.(*trail.File); ok && file.Skipped > 0 {
		// A file exporter killed mid-write leaves its last line cut short: show the rest.
		fmt.Fprintf(stderr, "warning: %s: skipped %d of %d lines that are not OTLP JSON trace data, first line %d (%s); showing the spans of the others\n",
			file.Path, file.Skipped, file.Lines, file.FirstSkipped, trail.Escape(fmt.Sprint(file.SkipErr)))
	}
	return src, nil
}

// timeRange reads --since and --until against t0; without --since a backend is asked for the
// last defaultSince, a file for everything.
func (f *traceFlags) timeRange(src trail.Source, t0 time.Time) (since, until time.Time, err error) {
	if f.since != "" {
		if since, err = parseTime(f.since, t0); err != nil {
			return since, until, usagef("--since: %v", err)
		}
	} else if _, isFile := src.(*trail.File); !isFile {
		since = t0.Add(-defaultSince)
	}
	if f.until != "" {
		if until, err = parseTime(f.until, t0); err != nil {
			return since, until, usagef("--until: %v", err)
		}
	}
	if !since.IsZero() && !until.IsZero() && !until.After(since) {
		return since, until, usagef("--until %s is not after --since %s", until.Format(time.RFC3339), since.Format(time.RFC3339))
	}
	return since, until, nil
}

// viewOptions are what trace (and apply's report) read of an object: the range, the collector's
// window and the filters.
type viewOptions struct {
	Since, Until time.Time
	Window       time.Duration
	Depth        int
	Only         string
	Generation   int64
}

// view is one object's story as trace shows it: the merged tree and its header.
type view struct {
	root   *trail.Node
	header trail.Header
}

// readView finds target's traces in src and merges them into the tree trace prints: one code
// path for `trace` and for what `apply` prints after its --wait. Warnings about what the source
// left out go to stderr, -v's lines to logf.
func readView(ctx context.Context, src trail.Source, target trail.Target, o viewOptions, stderr io.Writer, logf func(string, ...any)) (view, error) {
	since, until := o.Since, o.Until
	found, err := trail.Find(ctx, src, trail.Query{Target: target, Since: since, Until: until, Window: o.Window})
	if err != nil {
		return view{}, err
	}
	logFound(found, logf)
	if u, ok := src.(trail.Unreader); ok && u.Unread().Spans > 0 {
		// A window written across an upgrade holds spans of both models: show what can be read.
		un := u.Unread()
		fmt.Fprintf(stderr, "warning: %s: left out %d spans of a span model this kubetrail does not read (%s)\n", src, un.Spans, trail.Escape(fmt.Sprint(un.Err)))
	}
	filter := trail.Filter{Since: since, Until: until, Depth: o.Depth, Only: o.Only}
	var gen *trail.Generation
	var rollout *trail.Summary
	if o.Generation != 0 {
		// The generations are the root's, whatever --only and --depth keep.
		all, err := trail.Merge(found.Spans, target, found.UID, trail.Filter{Since: since, Until: until, Depth: -1})
		if err != nil {
			return view{}, err
		}
		g, err := trail.FindGeneration(trail.Generations(all), o.Generation, target.String())
		if err != nil {
			return view{}, err
		}
		gen, filter = &g, g.Filter(filter)
		if _, sums := trail.SummarizeGenerations(all, []trail.Generation{g}); len(sums) == 1 {
			rollout = &sums[0]
		}
	}
	root, err := trail.Merge(found.Spans, target, found.UID, filter)
	if errors.Is(err, trail.ErrNoSpans) {
		what := "activity"
		if o.Only != "" {
			what = "activity matching --only " + o.Only
		}
		return view{}, fmt.Errorf("%w: %s has object spans in %s but no %s between %s and %s: widen --since/--until or drop --only",
			trail.ErrNoSpans, target, src, what, rangeEnd(since, "the beginning"), rangeEnd(until, "now"))
	}
	if err != nil {
		return view{}, err
	}
	return view{root: root, header: trail.Header{Traces: found.Traces, Others: found.Others, Generation: gen, Rollout: rollout}}, nil
}

// target is the object asked for, with its UID and root owner from the cluster when the cluster
// can tell them: the kubeconfig loads, the kind maps and a GET answers. Otherwise, and when the
// object is gone, the target is what the command line and the built-in kinds tell, and Find
// searches the backend: that is not an error, say tells it in one line (nothing when there is
// no kubeconfig at all). --uid wins and the cluster is not asked.
func (f *traceFlags) target(ctx context.Context, kindArg, name string, say, logf func(string, ...any)) (trail.Target, error) {
	k := trail.ResolveKind(kindArg)
	t := trail.Target{Kind: k.Kind, Group: k.Group, Resource: k.Resource, Name: name, Cluster: f.cluster, UID: f.uid}
	cl, err := connect(&f.kube, nil)
	switch {
	case err != nil && f.kube.explicit():
		return t, err // a kubeconfig or context the user named must load
	case errors.Is(err, errNoKubeconfig):
		cl = nil
	case err != nil:
		say("%v; searching the backend", err)
		cl = nil
	}
	t.Namespace = f.kube.namespaceFor(k.Namespaced, cl)
	if f.uid != "" {
		logf("%s: uid %s given, the cluster is not asked", t, f.uid)
		return t, nil
	}
	if cl == nil {
		logf("%s: no kubeconfig, searching the backend", t)
		return t, nil
	}
	m, err := cl.resolve(kindArg)
	switch {
	case meta.IsNoMatchError(err):
		say("the cluster (context %s) serves no %q; searching the backend for kind %s", cl.context, kindArg, t.Kind)
		return t, nil
	case err != nil:
		say("cluster unreachable (context %s: %v); searching the backend", cl.context, err)
		return t, nil
	}
	t.Kind, t.Group, t.Resource = m.kind, m.gvr.Group, m.gvr.Resource
	t.Namespace = f.kube.namespaceFor(m.namespaced, cl)
	id, err := cl.identify(ctx, m, t.Namespace, name)
	switch {
	case apierrors.IsNotFound(err):
		say("%s is not in the cluster (context %s); searching the backend", t, cl.context)
		return t, nil
	case err != nil:
		say("reading %s from the cluster (context %s): %v; searching the backend", t, cl.context, err)
		return t, nil
	}
	t.UID, t.RootUID = id.uid, id.root()
	chain := make([]string, 0, len(id.owners))
	for _, o := range id.owners {
		chain = append(chain, fmt.Sprintf("%s %s (uid %s)", o.kind, o.name, o.uid))
	}
	owners := "no controlling owner"
	if len(chain) > 0 {
		owners = "owners " + strings.Join(chain, " → ")
	}
	if t.Cluster == "" {
		logf("%s: uid %s from the cluster (context %s), %s; no --cluster, so its trace IDs cannot be computed: searching the backend by uid", t, t.UID, cl.context, owners)
	} else {
		logf("%s: uid %s from the cluster (context %s), %s; computing the trace IDs of its windows", t, t.UID, cl.context, owners)
	}
	return t, nil
}

// logFound says how the traces were found (-v 1).
func logFound(found *trail.Found, logf func(string, ...any)) {
	via := map[string]int{}
	var order []string
	for _, t := range found.Traces {
		if via[t.Via] == 0 {
			order = append(order, t.Via)
		}
		via[t.Via]++
	}
	var parts []string
	for _, v := range order {
		parts = append(parts, fmt.Sprintf("%s %d", v, via[v]))
	}
	search := "no tag search"
	if found.Searched {
		search = "tag search made"
	}
	noun := "traces"
	if len(found.Traces) == 1 {
		noun = "trace"
	}
	logf("fetched %d %s (%s); %s; uid %s", len(found.Traces), noun, strings.Join(parts, ", "), search, found.UID)
}

func rangeEnd(t time.Time, zero string) string {
	if t.IsZero() {
		return zero
	}
	return t.UTC().Format(time.RFC3339)
}

// parseTime is trail.ParseTime: the commands and the viewer read times alike.
var parseTime = trail.ParseTime
