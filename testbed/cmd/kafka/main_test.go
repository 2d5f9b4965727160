package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startRun runs the command in-process with args and returns the bootstrap address it printed
// and a function that stops it (as SIGTERM would) and returns run's error.
func startRun(t *testing.T, args ...string) (bootstrap string, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, args, pw, io.Discard)
		pw.CloseWithError(errors.Join(err, io.EOF))
		done <- err
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		cancel()
		t.Fatalf("no bootstrap address printed: %v (run: %v)", err, <-done)
	}
	// Drain anything else run prints, so it never blocks on the pipe.
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}
	t.Cleanup(func() { _ = stop() })
	return strings.TrimSpace(line), stop
}

func newClient(t *testing.T, bootstrap string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(strings.Split(bootstrap, ",")...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// consumeOne reads the first record of topic from the earliest offset.
func consumeOne(t *testing.T, bootstrap, topic string) *kgo.Record {
	t.Helper()
	cl := newClient(t, bootstrap, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		fetches := cl.PollRecords(ctx, 1)
		if err := ctx.Err(); err != nil {
			t.Fatalf("no record on %s: %v", topic, err)
		}
		fetches.EachError(func(topic string, p int32, err error) { t.Logf("fetch %s/%d: %v", topic, p, err) })
		if recs := fetches.Records(); len(recs) > 0 {
			return recs[0]
		}
	}
}

func TestTheBrokerTakesARecordAndGivesItBack(t *testing.T) {
	bootstrap, stop := startRun(t, "-topic", "kube-audit:3")
	if !strings.HasPrefix(bootstrap, "127.0.0.1:") || strings.Contains(bootstrap, ",") {
		t.Fatalf("bootstrap %q: want one broker on 127.0.0.1", bootstrap)
	}
	producer := newClient(t, bootstrap)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := producer.ProduceSync(ctx, &kgo.Record{Topic: "kube-audit", Value: []byte(`{"auditID":"a1"}`)}).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	rec := consumeOne(t, bootstrap, "kube-audit")
	if string(rec.Value) != `{"auditID":"a1"}` {
		t.Errorf("consumed %q", rec.Value)
	}
	if err := stop(); err != nil {
		t.Errorf("run after stop: %v", err)
	}
}

func TestTheTopicsAreCreatedWithTheirPartitions(t *testing.T) {
	cfg, err := parseFlags([]string{"-topic", "a:4", "-topic", "b"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c, err := startBroker(cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for name, want := range map[string]int{"a": 4, "b": 1} {
		if got := len(c.PartitionInfos(name)); got != want {
			t.Errorf("topic %s: %d partitions, want %d", name, got, want)
		}
	}
}

func TestADataDirKeepsRecordsAcrossARestart(t *testing.T) {
	dir := t.TempDir()
	bootstrap, stop := startRun(t, "-topic", "kept", "-data-dir", dir)
	producer := newClient(t, bootstrap)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := producer.ProduceSync(ctx, &kgo.Record{Topic: "kept", Value: []byte("before the restart")}).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	producer.Close()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	bootstrap, _ = startRun(t, "-topic", "kept", "-data-dir", dir)
	if rec := consumeOne(t, bootstrap, "kept"); string(rec.Value) != "before the restart" {
		t.Errorf("after the restart: %q", rec.Value)
	}
}

func TestInvalidFlagsAreRefusedNamingTheFlag(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"port not a number", []string{"-ports", "90x2"}, "-ports"},
		{"port out of range", []string{"-ports", "70000"}, "-ports"},
		{"partitions not a number", []string{"-topic", "t:many"}, "partitions of \"t\""},
		{"zero partitions", []string{"-topic", "t:0"}, "partitions of \"t\""},
		{"empty topic", []string{"-topic", ":2"}, "empty topic name"},
		{"unknown log level", []string{"-log-level", "chatty"}, "-log-level"},
		{"stray argument", []string{"extra"}, "unexpected arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseFlags(tc.args, io.Discard)
			if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("parseFlags(%q) = %v, want a usage error mentioning %q", tc.args, err, tc.want)
			}
		})
	}
}
