package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/kubetrail/kubetrail/cmd/kubetrail/internal/trail"
	"github.com/kubetrail/kubetrail/internal/model"
)

// defaultSince is the range of a backend query without --since: the last hour.
const defaultSince = time.Hour

// now is the clock that durations ago, clock times and dates are read against (its time zone is
// theirs); tests fix it.
var now = time.Now

type traceFlags struct {
	namespace, cluster, uid, source string
	since, until                    string
	window                          time.Duration
	output, out, only               string
	depth                           int
	generation                      int64
}

// parseObjectArg parses the flags and the one KIND/NAME argument of a subcommand. An empty kind
// and a nil error mean help was asked for (and printed).
func parseObjectArg(fs *flag.FlagSet, args []string, cmd string) (kind, name string, err error) {
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return "", "", nil
		}
		return "", "", usageError{err}
	}
	if len(pos) != 1 {
		return "", "", usagef("%s takes one KIND/NAME, e.g. deployment/web (got %d arguments)", cmd, len(pos))
	}
	kind, name, ok := strings.Cut(pos[0], "/")
	if !ok || kind == "" || name == "" {
		return "", "", usagef("%q: want KIND/NAME, e.g. deployment/web", pos[0])
	}
	return kind, name, nil
}

// parseInterleaved parses flags that may come before or after the positional arguments, as
// kubectl users expect (`trace deploy/web -n shop` and `trace -n shop deploy/web`).
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// runTrace is `kubetrail trace`; cmd is the command as the user typed it, for the usage text.
func runTrace(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) error {
	var f traceFlags
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.namespace, "n", "", "namespace of the object (empty for cluster-scoped objects)")
	fs.StringVar(&f.namespace, "namespace", "", "same as -n")
	fs.StringVar(&f.cluster, "cluster", "", "the collector's `cluster` (k8s.cluster.name); empty matches any")
	fs.StringVar(&f.uid, "uid", "", "the object's UID: the windows' trace IDs are computed from it instead of searched")
	fs.StringVar(&f.source, "source", os.Getenv("KUBETRAIL_SOURCE"), "jaeger=URL (Jaeger query service) or file=PATH (OTLP JSON lines); default $KUBETRAIL_SOURCE")
	fs.StringVar(&f.since, "since", "", "start of the range: a duration ago (30m, 2h), a local clock time (14:00, today or else yesterday), a date (2026-11-21) or an RFC 3339 time; default 1h for jaeger, everything for file")
	fs.StringVar(&f.until, "until", "", "end of the range, in the same forms as --since; default now")
	fs.DurationVar(&f.window, "window", model.DefaultWindow, "the collector's window (k8s_object_link `window`)")
	fs.StringVar(&f.output, "o", "tree", "output: tree, timeline, json or html")
	fs.StringVar(&f.out, "out", "", "write the output to this file instead of stdout")
	fs.IntVar(&f.depth, "depth", -1, "levels of owned objects to show (0: the object alone); -1 all, at most 16 (the owner-chain bound)")
	fs.StringVar(&f.only, "only", "", "show only errors, writes or events")
	fs.Int64Var(&f.generation, "generation", 0, "show the rollout to this metadata.generation of the object: from the first write that carried it until the next generation's (0: every generation)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: "+cmd+" KIND/NAME -n NAMESPACE --cluster CLUSTER --source jaeger=URL|file=PATH [flags]")
		fs.PrintDefaults()
	}
	kindArg, name, err := parseObjectArg(fs, args, "trace")
	if err != nil || kindArg == "" {
		return err
	}
	if !slices.Contains([]string{"tree", "timeline", "json", "html"}, f.output) {
		return usagef("-o %q: want tree, timeline, json or html", f.output)
	}
	if f.only != "" && !slices.Contains(trail.ValidOnly, f.only) {
		return usagef("--only %q: want errors, writes or events", f.only)
	}
	if f.window < time.Second {
		return usagef("--window %s: want the collector's window, e.g. 30m", f.window)
	}
	if f.source == "" {
		return usagef("--source is required: jaeger=URL (e.g. jaeger=http://localhost:16686) or file=PATH (the file exporter's OTLP JSON lines)")
	}
	src, err := trail.OpenSource(f.source)
	if err != nil {
		return usageError{err}
	}
	if file, ok := src.(*trail.File); ok && file.Skipped > 0 {
		// A file exporter killed mid-write leaves its last line cut short: show the rest.
		fmt.Fprintf(stderr, "warning: %s: skipped %d of %d lines that are not OTLP JSON trace data, first line %d (%s); showing the spans of the others\n",
			file.Path, file.Skipped, file.Lines, file.FirstSkipped, trail.Escape(fmt.Sprint(file.SkipErr)))
	}
	t0 := now()
	var since, until time.Time
	if f.since != "" {
		if since, err = parseTime(f.since, t0); err != nil {
			return usagef("--since: %v", err)
		}
	} else if _, isFile := src.(*trail.File); !isFile {
		since = t0.Add(-defaultSince)
	}
	if f.until != "" {
		if until, err = parseTime(f.until, t0); err != nil {
			return usagef("--until: %v", err)
		}
	}
	if !since.IsZero() && !until.IsZero() && !until.After(since) {
		return usagef("--until %s is not after --since %s", until.Format(time.RFC3339), since.Format(time.RFC3339))
	}
	kind, group, resource := trail.ResolveKind(kindArg)
	target := trail.Target{Kind: kind, Group: group, Resource: resource, Namespace: f.namespace, Name: name, Cluster: f.cluster, UID: f.uid}
	found, err := trail.Find(ctx, src, trail.Query{Target: target, Since: since, Until: until, Window: f.window})
	if err != nil {
		return err
	}
	if u, ok := src.(trail.Unreader); ok && u.Unread().Spans > 0 {
		// A window written across an upgrade holds spans of both models: show what can be read.
		un := u.Unread()
		fmt.Fprintf(stderr, "warning: %s: left out %d spans of a span model this kubetrail does not read (%s)\n", src, un.Spans, trail.Escape(fmt.Sprint(un.Err)))
	}
	filter := trail.Filter{Since: since, Until: until, Depth: f.depth, Only: f.only}
	var gen *trail.Generation
	var rollout *trail.Summary
	if f.generation != 0 {
		// The generations are the root's, whatever --only and --depth keep.
		all, err := trail.Merge(found.Spans, target, found.UID, trail.Filter{Since: since, Until: until, Depth: -1})
		if err != nil {
			return err
		}
		g, err := trail.FindGeneration(trail.Generations(all), f.generation, target.String())
		if err != nil {
			return err
		}
		gen, filter = &g, g.Filter(filter)
		if _, sums := trail.SummarizeGenerations(all, []trail.Generation{g}); len(sums) == 1 {
			rollout = &sums[0]
		}
	}
	root, err := trail.Merge(found.Spans, target, found.UID, filter)
	if errors.Is(err, trail.ErrNoSpans) {
		what := "activity"
		if f.only != "" {
			what = "activity matching --only " + f.only
		}
		return fmt.Errorf("%w: %s has object spans in %s but no %s between %s and %s: widen --since/--until or drop --only",
			trail.ErrNoSpans, target, src, what, rangeEnd(since, "the beginning"), rangeEnd(until, "now"))
	}
	if err != nil {
		return err
	}
	w := stdout
	if f.out != "" {
		file, err := os.Create(f.out)
		if err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		defer file.Close()
		w = file
	}
	h := trail.Header{Traces: found.Traces, Others: found.Others, Generation: gen, Rollout: rollout}
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

func rangeEnd(t time.Time, zero string) string {
	if t.IsZero() {
		return zero
	}
	return t.UTC().Format(time.RFC3339)
}

// parseTime reads a --since or --until value against the clock now: a duration ago (30m), an
// RFC 3339 time, a date (2026-11-21, midnight), or a clock time (14:00, 14:00:30) of today, or of
// yesterday when today's is still to come. Dates and clock times are in now's time zone (the
// local one, as time.Now gives it).
func parseTime(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("%q: a duration ago must be positive", s)
		}
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	loc := now.Location()
	if t, err := time.ParseInLocation(time.DateOnly, s, loc); err == nil {
		return t, nil
	}
	for _, layout := range []string{"15:04", "15:04:05"} {
		c, err := time.Parse(layout, s)
		if err != nil {
			continue
		}
		y, m, d := now.Date()
		t := time.Date(y, m, d, c.Hour(), c.Minute(), c.Second(), 0, loc)
		if t.After(now) {
			t = t.AddDate(0, 0, -1) // 23:30 asked at 00:10 is last night's
		}
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%q: want a duration ago (30m), a clock time (14:00 or 14:00:30, today or else yesterday), a date (2026-11-21) or an RFC 3339 time (2026-11-21T14:00:00Z)", s)
}
