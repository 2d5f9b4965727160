// Command record captures what a real control plane emits during one testbed scenario, in the
// fixture format the components' golden tests read (testbed/fixtures/<scenario>/):
//
//   - audit-webhook/0001.json, …: every audit webhook POST body, byte for byte, in arrival order;
//   - audit.log: the apiserver's audit log lines written during the scenario;
//   - events.jsonl: the events.k8s.io/v1 watch stream, one {"type","object"} line per watch event;
//   - scenario.json: name, Kubernetes version, start/end, counts, notes.
//
// It is an audit webhook sink that only writes while a recording runs, so the cluster's start-up
// noise stays out of the fixtures. testbed/hack/record.sh drives it over HTTP:
//
//	POST /audit, /audit/{cluster}  the apiserver's audit webhook (always answers 200)
//	POST /control/start            start writing; lists Events and starts watching them
//	POST /control/stop             wait until every audit event the log file gained since start has
//	                               also arrived through the webhook, then write the files; answers
//	                               the counts as JSON
//
// The kubeconfig and audit log are only read on /control/start, so the recorder can be started
// before the cluster it records.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	var cfg config
	flag.StringVar(&cfg.listen, "listen", "127.0.0.1:0", "address of the webhook and control endpoints")
	flag.StringVar(&cfg.addrFile, "addr-file", "", "write the bound address (host:port) to this file once listening")
	flag.StringVar(&cfg.out, "out", "", "fixture directory to write (required)")
	flag.StringVar(&cfg.kubeconfig, "kubeconfig", "", "kubeconfig for the Events list-watch (read at /control/start)")
	flag.StringVar(&cfg.auditLog, "audit-log", "", "the apiserver's --audit-log-path (read at /control/start and /control/stop)")
	flag.StringVar(&cfg.scenario, "scenario", "", "scenario name for scenario.json")
	flag.StringVar(&cfg.k8sVersion, "kubernetes-version", "", "Kubernetes version for scenario.json")
	flag.StringVar(&cfg.notes, "notes", "", "free text for scenario.json")
	flag.StringVar(&cfg.auditPolicy, "audit-policy", "", "audit policy file the cluster ran with, for scenario.json")
	flag.DurationVar(&cfg.settleTimeout, "settle-timeout", 30*time.Second, "how long /control/stop waits for the webhook to catch up with the audit log")
	flag.Parse()
	if err := run(cfg); err != nil {
		log.Fatalf("record: %v", err)
	}
}

func run(cfg config) error {
	if cfg.out == "" {
		return errors.New("-out is required")
	}
	rec := newRecorder(cfg)
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.listen, err)
	}
	if cfg.addrFile != "" {
		if err := os.WriteFile(cfg.addrFile, []byte(ln.Addr().String()), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", cfg.addrFile, err)
		}
	}
	srv := &http.Server{Handler: rec.handler(), ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Printf("record: listening on %s, writing to %s", ln.Addr(), cfg.out)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec.close()
	return srv.Shutdown(shutdownCtx)
}
