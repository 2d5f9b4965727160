// Command kubetrail reads kubetrail's traces back: `kubetrail trace deployment/web -n shop`
// prints one object's whole story, its windows merged, as a terminal tree, a timeline, JSON or a
// self-contained HTML page; `kubetrail annotate` starts a trace context on an object before a
// change. Installed as kubectl-trail it is also `kubectl trail …`. Usage: docs/cli.md.
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
)

const usage = `kubetrail reads the traces of Kubernetes objects that the kubetrail collector components wrote.

Usage:
  kubetrail trace KIND/NAME -n NAMESPACE --cluster CLUSTER --source jaeger=URL|file=PATH [flags]
  kubetrail annotate KIND/NAME -n NAMESPACE [--kubeconfig FILE] [--context NAME]

Run "kubetrail trace -h" or "kubetrail annotate -h" for the flags; docs/cli.md has examples.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole command; it returns the exit code: 0 done, 1 an error, 2 a usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	name := filepath.Base(os.Args[0])
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "trace":
		err = runTrace(ctx, args[1:], stdout, stderr)
	case "annotate":
		err = runAnnotate(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		// As a kubectl plugin, `kubectl trail deployment/web` means trace.
		if strings.HasPrefix(name, "kubectl-") && strings.Contains(args[0], "/") {
			err = runTrace(ctx, args, stdout, stderr)
			break
		}
		fmt.Fprintf(stderr, "kubetrail: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "kubetrail: %v\n", err)
		return 2
	default:
		fmt.Fprintf(stderr, "kubetrail: %v\n", err)
		return 1
	}
}

// usageError is a mistake in the command line.
type usageError struct{ error }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }
