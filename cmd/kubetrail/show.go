package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"github.com/kubetrail/kubetrail/cmd/kubetrail/internal/trail"
	"github.com/kubetrail/kubetrail/internal/model"
)

// showOutputs are the values of show's -o: yaml and json for --at, text and json for --diff.
var showOutputs = []string{"yaml", "text", "json"}

// showSince is how far before --at (or the --diff range's start) show reads a backend without
// --since: the object's create must be in range for its manifest to be known.
const showSince = 24 * time.Hour

type showFlags struct {
	traceFlags
	at   string
	diff bool
}

func showCommand(cmd string, f *showFlags) *command {
	c := newCommand(cmd,
		"Print an object as it stood at a time, rebuilt from the bodies and diffs its spans carry, or what changed\nbetween two times, write by write.",
		`--at TIME prints the object after the last write at or before TIME (stderr names that write): the body of its
create (or delete) with every later diff applied, redacted as the spans are, without metadata.managedFields.
Where the spans cannot tell (the audit level gave no body, a diff was not computed or was cut), it says so and
when the state was last known, instead of guessing. --diff T1 T2 prints the writes after T1 until T2, each
with every path it changed.`,
		fmt.Sprintf(`  # The Deployment as it was at 10:14 today
  %[1]s deploy/web -n shop --at 10:14

  # As JSON, from the collector's file exporter
  %[1]s deploy/demo --source file=traces.jsonl --at 2026-11-21T10:45:55Z -o json

  # What changed between 10:14 and 10:20, write by write
  %[1]s deploy/web -n shop --diff 10:14 10:20
`, cmd),
		"(TYPE/NAME | TYPE NAME) (--at TIME | --diff T1 T2) [--source jaeger=URL|file=PATH] [options]")
	c.group("Cluster (read for the object's UID and owners; the backend is searched when it cannot be)", func(fs *pflag.FlagSet) {
		f.kube.add(fs, "The object's namespace (default: the kubeconfig context's, then \"default\"; ignored for cluster-scoped kinds).")
	})
	c.group("Object", func(fs *pflag.FlagSet) {
		fs.StringVar(&f.cluster, "cluster", "", "The collector's cluster setting (k8s.cluster.name; default $KUBETRAIL_CLUSTER, then the config file's for the context).")
		fs.StringVar(&f.uid, "uid", "", "The object's UID (picks one of several objects that had the name).")
	})
	c.group("Backend", func(fs *pflag.FlagSet) {
		fs.StringVar(&f.source, "source", "", "Where the traces are: jaeger=URL or file=PATH, as for trace. Default $KUBETRAIL_SOURCE, then the config file's for the context.")
		fs.DurationVar(&f.window, "window", model.DefaultWindow, "The collector's window (k8s_object_link's window setting). Default: the config file's for the context, else 30m.")
	})
	c.group("Time", func(fs *pflag.FlagSet) {
		fs.StringVar(&f.at, "at", "", "The time to show the object at, in --since's forms (a duration ago, a clock time, a date, RFC 3339). Default now.")
		fs.BoolVar(&f.diff, "diff", false, "Print the writes between the two times that follow the object (T1 T2), with every path each changed.")
		fs.StringVar(&f.since, "since", "", "How far back to read: the object's create must be in range. Default 24h before --at (or T1) for jaeger, everything for file.")
	})
	c.group("Output", func(fs *pflag.FlagSet) {
		fs.StringVarP(&f.output, "output", "o", "", "Output format: yaml (the default of --at), text (the default of --diff) or json.")
		fs.IntVarP(&f.verbosity, "v", "v", 0, "Log level: 1 says on stderr which defaults came from the config file and how the object was found.")
	})
	return c
}

// runShow is `kubetrail show`.
func runShow(ctx context.Context, prog, cmd string, args []string, stdout, stderr io.Writer) error {
	var f showFlags
	c := showCommand(cmd, &f)
	pos, err := c.parse(args, stdout)
	if err != nil {
		return err
	}
	var times []string
	if f.diff {
		if len(pos) < 3 {
			return usagef("--diff takes two times after the object: %s TYPE/NAME --diff T1 T2", cmd)
		}
		times, pos = pos[len(pos)-2:], pos[:len(pos)-2]
		if f.at != "" {
			return usagef("--at and --diff: choose one")
		}
	}
	kindArg, name, err := objectArg(pos, cmd)
	if err != nil {
		return err
	}
	outs := []string{"yaml", "json"}
	if f.diff {
		outs = []string{"text", "json"}
	}
	if f.output == "" {
		f.output = outs[0]
	}
	if f.output != outs[0] && f.output != outs[1] {
		return usagef("--output %q: want %s or %s", f.output, outs[0], outs[1])
	}
	t0 := now()
	from, to := t0, t0
	if f.diff {
		if from, err = parseTime(times[0], t0); err != nil {
			return usagef("--diff T1: %v", err)
		}
		if to, err = parseTime(times[1], t0); err != nil {
			return usagef("--diff T2: %v", err)
		}
		if !to.After(from) {
			return usagef("--diff %s %s: T2 is not after T1", times[0], times[1])
		}
	} else if f.at != "" {
		if to, err = parseTime(f.at, t0); err != nil {
			return usagef("--at: %v", err)
		}
		from = to
	}
	r, err := resolveDefaults(&f.kube, c.fs, &f.source, &f.cluster, &f.window)
	if err != nil {
		return err
	}
	say := func(format string, a ...any) {
		fmt.Fprint(stderr, trail.Escape(prog+": "+fmt.Sprintf(format, a...))+"\n")
	}
	logf := func(format string, a ...any) {
		if f.verbosity > 0 {
			say(format, a...)
		}
	}
	if line := r.describe(); line != "" {
		logf("%s", line)
	}
	src, err := f.openSource(prog, r, stderr)
	if err != nil {
		return err
	}
	var since time.Time
	if f.since != "" {
		if since, err = parseTime(f.since, t0); err != nil {
			return usagef("--since: %v", err)
		}
		if !since.Before(from) {
			return usagef("--since %s is not before %s", since.Format(time.RFC3339), from.Format(time.RFC3339))
		}
	} else if _, isFile := src.(*trail.File); !isFile {
		since = from.Add(-showSince)
	}
	target, err := f.target(ctx, kindArg, name, say, logf)
	if err != nil {
		return err
	}
	pw := startProgress(stderr, progressLabel(f.source), f.output != "json" && terminal(stderr), realClock)
	// An hour past the time asked for: an object created just after it is found, and the
	// answer says it did not exist yet rather than that it is unknown.
	until := to.Add(time.Hour)
	if until.After(t0) {
		until = time.Time{}
	}
	found, err := trail.Find(ctx, src, trail.Query{Target: target, Since: since, Until: until, Window: f.window})
	pw.stop()
	if err != nil {
		if errors.Is(err, trail.ErrUnreachable) {
			return r.sourceError(err)
		}
		return err
	}
	logFound(found, logf)
	if f.diff {
		ws := trail.ObjectWrites(found.Spans, found.UID, from, to)
		if f.output == "json" {
			if ws == nil {
				ws = []trail.Write{}
			}
			return writeJSON(stdout, struct {
				Object string        `json:"object"`
				UID    string        `json:"uid"`
				From   time.Time     `json:"from"`
				To     time.Time     `json:"to"`
				Writes []trail.Write `json:"writes"`
			}{target.String(), found.UID, from.UTC(), to.UTC(), ws})
		}
		trail.WriteDiff(stdout, target.String(), ws, from, to)
		return nil
	}
	m, err := trail.ManifestAt(found.Spans, found.UID, to)
	if err != nil {
		return fmt.Errorf("%s: %w", target, err)
	}
	note := fmt.Sprintf("%s at %s: as %s left it (resourceVersion %s)", target, to.UTC().Format("2006-01-02 15:04:05.000 UTC"),
		trail.DescribeWrite(m.After), m.ResourceVersion)
	if m.Deleted != nil {
		note += fmt.Sprintf("; deleted by %s", trail.DescribeWrite(m.Deleted))
	}
	say("%s", note)
	if f.output == "json" {
		return writeJSON(stdout, m.Object)
	}
	b, err := yaml.Marshal(m.Object)
	if err != nil {
		return err
	}
	_, err = stdout.Write(b)
	return err
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
