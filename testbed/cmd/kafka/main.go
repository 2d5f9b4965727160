// Command kafka runs a Kafka broker on loopback for the testbed: franz-go's kfake, an in-process
// fake that speaks the Kafka protocol (produce, fetch, consumer groups, committed offsets), so the
// collector's kafka receiver and exporter are tested end to end without a JVM. It listens on
// 127.0.0.1 only, creates the topics it is given, prints the bootstrap address (host:port, comma
// separated with several brokers) on stdout once it accepts connections, and stops on SIGTERM or
// SIGINT.
//
//	kafka [-ports 0] [-topic kube-audit:4 ...] [-data-dir DIR] [-log-level none]
//
// -ports 0 (the default) is one broker on a port the kernel picks; -ports 9092,9093 are two
// brokers on those ports. Without -data-dir the broker keeps everything in memory and forgets it
// when it stops.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "kafka:", err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

// config is what the flags ask for.
type config struct {
	ports    []int
	topics   []topic
	dataDir  string
	logLevel kfake.LogLevel
}

type topic struct {
	name       string
	partitions int32
}

// parseFlags reads the command line; an invalid one is an error wrapping errUsage that names
// the flag.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	var (
		cfg      config
		ports    string
		logLevel string
	)
	fs := flag.NewFlagSet("kafka", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&ports, "ports", "0", "comma-separated ports on 127.0.0.1, one broker each; 0 picks a free port")
	fs.Func("topic", "topic to create, as name or name:partitions (default 1 partition); repeatable", func(s string) error {
		name, parts, hasParts := strings.Cut(s, ":")
		t := topic{name: name, partitions: 1}
		if name == "" {
			return errors.New("empty topic name")
		}
		if hasParts {
			n, err := strconv.ParseInt(parts, 10, 32)
			if err != nil || n < 1 {
				return fmt.Errorf("partitions of %q: want a positive number, got %q", name, parts)
			}
			t.partitions = int32(n)
		}
		cfg.topics = append(cfg.topics, t)
		return nil
	})
	fs.StringVar(&cfg.dataDir, "data-dir", "", "keep topics, offsets and groups in this directory across restarts (default: memory only)")
	fs.StringVar(&logLevel, "log-level", "none", "broker log on stderr: none, error, warn, info or debug")
	if err := fs.Parse(args); err != nil {
		return cfg, fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	for _, p := range strings.Split(ports, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 0 || n > 65535 {
			return cfg, fmt.Errorf("%w: -ports: %q is not a port", errUsage, p)
		}
		cfg.ports = append(cfg.ports, n)
	}
	levels := map[string]kfake.LogLevel{"none": kfake.LogLevelNone, "error": kfake.LogLevelError,
		"warn": kfake.LogLevelWarn, "info": kfake.LogLevelInfo, "debug": kfake.LogLevelDebug}
	lvl, ok := levels[logLevel]
	if !ok {
		return cfg, fmt.Errorf("%w: -log-level: %q is not none, error, warn, info or debug", errUsage, logLevel)
	}
	cfg.logLevel = lvl
	return cfg, nil
}

// startBroker starts the brokers and creates the topics; the caller closes the cluster.
func startBroker(cfg config, logs io.Writer) (*kfake.Cluster, error) {
	opts := []kfake.Opt{kfake.Ports(cfg.ports...), kfake.WithLogger(kfake.BasicLogger(logs, cfg.logLevel))}
	if cfg.dataDir != "" {
		opts = append(opts, kfake.DataDir(cfg.dataDir))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("start broker: %w", err)
	}
	for _, t := range cfg.topics {
		// With -data-dir a topic may come back from the last run: keep it, and its records.
		if c.TopicInfo(t.name) != nil {
			continue
		}
		if err := c.CreateTopic(t.name, t.partitions, nil); err != nil {
			c.Close()
			return nil, fmt.Errorf("create topic %s: %w", t.name, err)
		}
	}
	return c, nil
}

// run starts the broker, prints its bootstrap address on stdout and serves until ctx ends.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	c, err := startBroker(cfg, stderr)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := fmt.Fprintln(stdout, strings.Join(c.ListenAddrs(), ",")); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}
