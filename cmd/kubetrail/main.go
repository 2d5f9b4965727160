// Command kubetrail reads kubetrail's traces back: `kubetrail trace deployment/web -n shop`
// prints one object's whole story, its windows merged, as a terminal tree, a timeline, JSON or a
// self-contained HTML page; `kubetrail annotate` starts a trace context on an object before a
// change; `kubetrail apply -f FILE --wait` applies objects inside a trace and follows their
// rollout. Installed as kubectl-trail it is also `kubectl trail …`. Usage: docs/cli.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"github.com/kubetrail/kubetrail/cmd/kubetrail/internal/trail"
)

// usage is the command's help; prog is how it was invoked: "kubetrail", or "kubectl trail" as a
// kubectl plugin, where trace is the default subcommand.
func usage(prog string, plugin bool) string {
	trace, traceDesc := prog+" trace", "Show one object's whole story from its traces"
	object := ""
	if plugin {
		trace, traceDesc = prog, "Show one object's whole story from its traces (the default: "+prog+" TYPE/NAME)"
		object = "  " + prog + " (TYPE/NAME | TYPE NAME) [options]\n"
	}
	return fmt.Sprintf(`%[1]s reads the traces of Kubernetes objects that the kubetrail collector components wrote.

Examples:
  # A Deployment of the current context's namespace, from Jaeger
  %[2]s deploy/web --cluster prod-eu-1 --source jaeger=http://localhost:16686

  # What changed in namespace shop in the last hour, and who did it
  %[1]s changes -n shop

  # The Deployment as it stood at 10:14
  %[1]s show deploy/web -n shop --at 10:14

  # Start a trace before a change, and keep its ID
  id=$(%[1]s annotate deploy/web)

  # Apply inside the CI step's trace ($TRACEPARENT), wait for the rollout
  %[1]s apply -f deploy.yaml --wait

  # Shell completion
  source <(%[1]s completion bash)

Available Commands:
  trace        %[3]s
  changes      List the writes across objects, newest first: who changed what, and when
  show         Print an object as it stood at a time (--at), or what changed between two times (--diff)
  serve        Serve a read-only web viewer: the change feed, each object's story, diffs and manifests
  annotate     Write a fresh trace context annotation on an object and print its trace ID
  apply        Apply objects server-side inside a trace, and with --wait follow their rollout
  completion   Output shell completion code for bash or zsh
  config       Show and set the defaults of --source, --cluster and --window per kubeconfig context
  version      Print the version, commit, build date and Go version (also --version)

Usage:
%[4]s  %[1]s [command] [options]

Use "%[1]s <command> --help" for more information about a given command (docs/cli.md).
`, prog, trace, traceDesc, object)
}

var quietClientGo sync.Once

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args, os.Stdout, os.Stderr))
}

// progName is how the command was invoked, from argv[0]: "kubetrail", or for a kubectl plugin
// binary (kubectl-trail) the command the user typed, "kubectl trail".
func progName(argv0 string) (prog string, plugin bool) {
	name := strings.TrimSuffix(filepath.Base(argv0), ".exe")
	if strings.HasPrefix(name, "kubectl_complete-") {
		return completeProg, true
	}
	if rest, ok := strings.CutPrefix(name, "kubectl-"); ok && rest != "" {
		// kubectl maps "kubectl foo bar" to kubectl-foo-bar, and "foo-bar" to kubectl-foo_bar.
		return "kubectl " + strings.ReplaceAll(strings.ReplaceAll(rest, "-", " "), "_", "-"), true
	}
	if name == "" || name == "." {
		name = "kubetrail"
	}
	return name, false
}

// run is the whole command, argv as os.Args (argv[0] the program); it returns the exit code: 0
// done, 1 an error, 2 a usage error.
func run(ctx context.Context, argv []string, stdout, stderr io.Writer) int {
	var argv0 string
	if len(argv) > 0 {
		argv0, argv = argv[0], argv[1:]
	}
	prog, plugin := progName(argv0)
	quietClientGo.Do(func() {
		// client-go's discovery also logs (klog, to stderr) the failures it returns: a cluster
		// that does not answer is reported once, by the command, and trace goes on without it.
		utilruntime.ErrorHandlers = nil
	})
	if prog == completeProg {
		// kubectl's own completion asks kubectl_complete-trail for `kubectl trail …`.
		return complete(argv, stdout)
	}
	if len(argv) == 0 {
		fmt.Fprint(stderr, usage(prog, plugin))
		return 2
	}
	var err error
	cmd := prog + " " + argv[0]
	switch argv[0] {
	case "trace":
		err = runTrace(ctx, prog, cmd, argv[1:], stdout, stderr)
	case "changes":
		err = runChanges(ctx, prog, cmd, argv[1:], stdout, stderr)
	case "show":
		err = runShow(ctx, prog, cmd, argv[1:], stdout, stderr)
	case "serve":
		err = runServe(ctx, prog, cmd, argv[1:], stdout, stderr)
	case "annotate":
		err = runAnnotate(ctx, cmd, argv[1:], stdout, stderr)
	case "apply":
		traceCmd := prog + " trace"
		if plugin {
			traceCmd = prog
		}
		err = runApply(ctx, prog, cmd, traceCmd, argv[1:], stdout, stderr)
	case "completion":
		err = runCompletion(prog, cmd, argv[1:], stdout)
	case "config":
		err = runConfig(cmd, argv[1:], stdout, stderr)
	case "version":
		err = runVersion(prog, cmd, argv[1:], stdout)
	case "--version":
		if len(argv) > 1 {
			fmt.Fprintf(stderr, "%s: --version takes no arguments; for JSON: %s version -o json\n", prog, prog)
			return 2
		}
		fmt.Fprint(stdout, buildVersion().text(prog))
		return 0
	case "__complete":
		return complete(argv[1:], stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage(prog, plugin))
		return 0
	default:
		// As a kubectl plugin, trace is the default: `kubectl trail deploy/web -n shop` and
		// `kubectl trail -n shop deploy/web` both trace.
		if plugin {
			cmd = prog
			err = runTrace(ctx, prog, cmd, argv, stdout, stderr)
			break
		}
		fmt.Fprintf(stderr, "%s: unknown command %q\n\n%s", prog, argv[0], usage(prog, plugin))
		return 2
	}
	var ue usageError
	switch {
	case err == nil, errors.Is(err, errHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "%s: %s\n%s", prog, trail.Escape(err.Error()), hint(cmd))
		return 2
	default:
		// An error may quote what a backend or the cluster answered, or what a file held.
		fmt.Fprintf(stderr, "%s: %s\n", prog, trail.Escape(err.Error()))
		return 1
	}
}
