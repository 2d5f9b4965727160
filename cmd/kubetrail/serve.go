package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/spf13/pflag"

	"github.com/kubetrail/kubetrail/cmd/kubetrail/internal/trail"
	"github.com/kubetrail/kubetrail/cmd/kubetrail/internal/viewer"
	"github.com/kubetrail/kubetrail/internal/model"
)

// defaultListen is serve's address: loopback, so the viewer is reachable only from this
// machine (or through kubectl port-forward, or an authenticating proxy) unless --listen says
// otherwise.
const defaultListen = "127.0.0.1:7474"

type serveFlags struct {
	traceFlags
	listen   string
	jaegerUI string
}

func serveCommand(cmd string, f *serveFlags) *command {
	c := newCommand(cmd,
		"Serve a read-only web viewer over the traces: the change feed as a search page, each object's story, each\nwrite's diff and the manifest after it.",
		`Every view is a URL: the search page takes the filters of "changes" as query parameters named as its long
flags (?namespace=shop&field=spec.replicas&since=1h), and its rows link to their objects. The pages load
nothing from elsewhere, run no inline script, and escape every string of the spans. It binds to loopback by
default; it has no login of its own: put it behind kubectl port-forward or an authenticating proxy.`,
		fmt.Sprintf(`  # The viewer over Jaeger, on http://127.0.0.1:7474
  %[1]s --source jaeger=http://localhost:16686

  # Over make run's file
  %[1]s --source file=build/run/traces.jsonl --cluster demo
`, cmd),
		"[--source jaeger=URL|file=PATH] [--listen ADDR] [options]")
	c.group("Cluster (its context's defaults of the config file)", func(fs *pflag.FlagSet) {
		f.kube.add(fs, "Not used: the viewer's searches name their namespace.")
	})
	c.group("Backend", func(fs *pflag.FlagSet) {
		fs.StringVar(&f.source, "source", "", "Where the traces are: jaeger=URL or file=PATH, as for trace. Default $KUBETRAIL_SOURCE, then the config file's for the context.")
		fs.StringVar(&f.cluster, "cluster", "", "The collector's cluster setting: the search's default cluster, and the objects' (their trace IDs are computed from it). Default $KUBETRAIL_CLUSTER, then the config file's.")
		fs.DurationVar(&f.window, "window", model.DefaultWindow, "The collector's window (k8s_object_link's window setting). Default: the config file's for the context, else 30m.")
	})
	c.group("Server", func(fs *pflag.FlagSet) {
		fs.StringVar(&f.listen, "listen", defaultListen, "The address to serve on. The default is loopback; an address reachable from elsewhere serves the traces to whoever reaches it.")
		fs.StringVar(&f.jaegerUI, "jaeger-ui", "", "The URL of Jaeger's UI as the reader's browser reaches it, for the links to each window's trace. Default: the jaeger= source's URL (set it when the viewer reaches Jaeger at an address the browser does not, as in a cluster).")
	})
	return c
}

// runServe is `kubetrail serve`: it serves until ctx ends (Ctrl-C).
func runServe(ctx context.Context, prog, cmd string, args []string, stdout, stderr io.Writer) error {
	var f serveFlags
	c := serveCommand(cmd, &f)
	pos, err := c.parse(args, stdout)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("%s takes no arguments (got %q): the objects are chosen in the browser", cmd, pos)
	}
	r, err := resolveDefaults(&f.kube, c.fs, &f.source, &f.cluster, &f.window)
	if err != nil {
		return err
	}
	src, err := f.openSource(prog, r, stderr)
	if err != nil {
		return err
	}
	if _, _, err := net.SplitHostPort(f.listen); err != nil {
		return usagef("--listen %q: want HOST:PORT, e.g. 127.0.0.1:7474", f.listen)
	}
	if f.jaegerUI != "" {
		if u, err := url.Parse(f.jaegerUI); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return usagef("--jaeger-ui %q: want an http or https URL, e.g. https://jaeger.example.com", f.jaegerUI)
		}
	}
	v := &viewer.Server{Source: src, Cluster: f.cluster, Window: f.window, JaegerUI: f.jaegerUI, Log: log.New(stderr, prog+": ", 0)}
	if _, isFile := src.(*trail.File); !isFile {
		v.DefaultSince = defaultSince
	}
	l, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", f.listen, err)
	}
	srv := &http.Server{Handler: v.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	fmt.Fprintf(stderr, "%s: serving http://%s (%s); Ctrl-C stops\n", prog, l.Addr(), trail.Escape(src.String()))
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
