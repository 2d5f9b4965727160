// Command loadgen offers a k8s_audit webhook a sustained audit stream made of real recordings:
// the testbed's webhook bodies (testbed/fixtures/<scenario>/audit-webhook/*.json, audit.k8s.io/v1
// EventLists a real kube-apiserver POSTed) replayed over and over, each copy of a scenario a
// fresh set of objects, so neither the receiver's caches nor the processor's duplicate marks see
// a repeat.
//
// Every copy is a Fresh copy of testbed/auditcapture: every auditID, object UID and object name
// rewritten, timestamps shifted so the recording ends now. The batches of one scenario copy go in
// recorded order over one connection, so a copy's later writes diff against its earlier ones as in
// the recording.
//
// It targets 127.0.0.1 only and always stops: after -duration or -max-events, whichever first.
//
//	loadgen -url http://127.0.0.1:9880/audit/loadtest -duration 30s -connections 4 [-rate 1000] [-metadata-only]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/kubetrail/kubetrail/testbed/auditcapture"
)

const maxDuration = time.Hour

func main() {
	var (
		cfg       config
		fixtures  string
		scenarios string
		summary   string
	)
	flag.StringVar(&cfg.url, "url", "http://127.0.0.1:9880/audit/loadtest", "the k8s_audit webhook URL (host must be 127.0.0.1)")
	flag.StringVar(&fixtures, "fixtures", "testbed/fixtures", "directory of recorded scenarios")
	flag.StringVar(&scenarios, "scenarios", "all", "comma-separated scenarios to replay, or all")
	flag.DurationVar(&cfg.duration, "duration", 30*time.Second, "how long to send (at most 1h)")
	flag.Int64Var(&cfg.maxEvents, "max-events", 50_000_000, "stop after this many audit events")
	flag.IntVar(&cfg.connections, "connections", 4, "concurrent connections (one POST in flight each)")
	flag.Float64Var(&cfg.rate, "rate", 0, "target audit events per second; 0 sends as fast as the collector answers")
	flag.BoolVar(&cfg.metadataOnly, "metadata-only", false, "strip requestObject/responseObject: Metadata-level events")
	flag.StringVar(&summary, "summary", "", "also write the results as shell variables to this file")
	flag.Parse()

	if err := cfg.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(2)
	}
	var err error
	if cfg.scenarios, err = loadScenarios(fixtures, scenarios, cfg.metadataOnly); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
	res.print(os.Stdout, cfg)
	if summary != "" {
		if err := os.WriteFile(summary, []byte(res.shellVars()), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "loadgen:", err)
			os.Exit(1)
		}
	}
	if res.accepted == 0 {
		os.Exit(1)
	}
}

func (c *config) validate() error {
	u, err := url.Parse(c.url)
	if err != nil {
		return fmt.Errorf("-url: %w", err)
	}
	if u.Scheme != "http" || u.Hostname() != "127.0.0.1" {
		return fmt.Errorf("-url %q: only http://127.0.0.1 targets are allowed", c.url)
	}
	if c.duration <= 0 || c.duration > maxDuration {
		return fmt.Errorf("-duration %s: must be in (0, %s]", c.duration, maxDuration)
	}
	if c.maxEvents <= 0 {
		return errors.New("-max-events must be positive")
	}
	if c.connections < 1 || c.connections > 256 {
		return errors.New("-connections must be in [1, 256]")
	}
	if c.rate < 0 {
		return errors.New("-rate must not be negative")
	}
	return nil
}

func loadScenarios(fixtures, names string, metadataOnly bool) ([]*auditcapture.Capture, error) {
	var dirs []string
	if names == "all" {
		all, err := filepath.Glob(filepath.Join(fixtures, "*", "audit-webhook"))
		if err != nil {
			return nil, err
		}
		for _, d := range all {
			dirs = append(dirs, filepath.Dir(d))
		}
	} else {
		for _, n := range strings.Split(names, ",") {
			dirs = append(dirs, filepath.Join(fixtures, strings.TrimSpace(n)))
		}
	}
	if len(dirs) == 0 {
		return nil, fmt.Errorf("no recorded scenarios under %s", fixtures)
	}
	var out []*auditcapture.Capture
	for _, d := range dirs {
		s, err := auditcapture.Load(metadataOnly, d)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}
