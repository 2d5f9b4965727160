//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kubetrail/kubetrail/internal/envelopetest"
)

// The stock contrib log receivers in front of the k8s_audit connector, in the built binary, on
// the control plane's own audit log: what a managed cluster's collector (Kafka) or a node agent
// without the k8s_audit receiver's file mode (filelog) runs.

// filelogMaxLogSize is the filelog receivers' max_log_size: a line longer than it is split into
// several records (the default, 1 MiB, would cut the largest audit events), so it is set well
// above the largest event the test feeds, which the test checks.
const filelogMaxLogSize = 16 << 20

// rotatingLog writes audit lines into dir/audit.log as the apiserver's log backend does: whole
// lines appended, and on rotate the file renamed to audit-<time>.log and a new audit.log opened
// (what --audit-log-maxsize does).
type rotatingLog struct {
	dir string
	f   *os.File
}

func newRotatingLog(t *testing.T, dir string) *rotatingLog {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	l := &rotatingLog{dir: dir}
	l.open(t)
	t.Cleanup(func() { l.f.Close() })
	return l
}

func (l *rotatingLog) open(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(l.dir, "audit.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	l.f = f
}

func (l *rotatingLog) write(t *testing.T, lines [][]byte) {
	t.Helper()
	var b bytes.Buffer
	for _, line := range lines {
		b.Write(line)
		b.WriteByte('\n')
	}
	if _, err := l.f.Write(b.Bytes()); err != nil {
		t.Fatal(err)
	}
}

func (l *rotatingLog) rotate(t *testing.T) {
	t.Helper()
	if err := l.f.Close(); err != nil {
		t.Fatal(err)
	}
	backup := "audit-" + time.Now().UTC().Format("2006-01-02T15-04-05.000") + ".log"
	if err := os.Rename(filepath.Join(l.dir, "audit.log"), filepath.Join(l.dir, backup)); err != nil {
		t.Fatal(err)
	}
	l.open(t)
}

// TestAuditLogThroughFilelog feeds the apiserver's audit log to the collector's filelog receiver
// (the path of a node agent shipping the log, or of anyone who runs the stock receivers), through
// the k8s_audit connector into a file: every logged write must be one span, with the span ID the
// webhook gave Jaeger. The log is copied into files the test writes as the apiserver would, and
// rotated while the receiver reads it: the rest of the rotated file must be read, and nothing
// twice (the connectors' deduplication is off, so a line read twice would be a second span).
// Two receivers read two copies, one plain (body = the line) and one with a json_parser
// operator (the parsed event in the attributes, the body still the line), each into a connector
// and a file of its own.
func TestAuditLogThroughFilelog(t *testing.T) {
	env := Testbed(t)
	requireAuditReceiver(t, env)
	requireComponent(t, env, "receivers", "file_log")
	requireComponent(t, env, "connectors", "k8s_audit")
	requireComponent(t, env, "exporters", "file")
	start, end, logged := env.RunsWrites(t)
	t0 := time.Now()
	auditLog := env.AuditLog()
	lines := auditLogLines(t, auditLog)
	largest := 0
	for _, l := range lines {
		largest = max(largest, len(l))
	}
	if !Check(t, "max_log_size is well above the largest audit event", 4*largest < filelogMaxLogSize,
		"largest line %d bytes, max_log_size %d", largest, filelogMaxLogSize) {
		t.FailNow()
	}

	dir := filepath.Join(env.OutDir, "filelog")
	_ = os.RemoveAll(dir)
	variants := []struct {
		name      string
		operators []any
	}{
		{"plain", nil},
		{"json", []any{map[string]any{"type": "json_parser"}}},
	}
	cfg := Config{}
	logs := make([]*rotatingLog, len(variants))
	outs := make([]string, len(variants))
	for i, v := range variants {
		logs[i] = newRotatingLog(t, filepath.Join(dir, v.name))
		outs[i] = filepath.Join(dir, v.name+"-spans.jsonl")
		recv, conn, exp := "file_log/"+v.name, "k8s_audit/"+v.name, "file/"+v.name
		// Both names of a rotating log: the one written and the rotated ones.
		cfg.Set("receivers."+recv+".include", []any{filepath.Join(logs[i].dir, "audit*.log")})
		cfg.Set("receivers."+recv+".start_at", "beginning")
		cfg.Set("receivers."+recv+".max_log_size", filelogMaxLogSize)
		if v.operators != nil {
			cfg.Set("receivers."+recv+".operators", v.operators)
		}
		cfg.Set("connectors."+conn+".cluster", ClusterName)
		cfg.Set("connectors."+conn+".dedup_window", "0s")
		cfg.Set("exporters."+exp+".path", outs[i])
		cfg.Set("exporters."+exp+".flush_interval", "100ms")
		cfg.Set("service.pipelines.logs/"+v.name+".receivers", []any{recv})
		cfg.Set("service.pipelines.logs/"+v.name+".exporters", []any{conn})
		cfg.Set("service.pipelines.traces/"+v.name+".receivers", []any{conn})
		cfg.Set("service.pipelines.traces/"+v.name+".exporters", []any{exp})
	}
	cfg.Set("service.telemetry.metrics.level", "none")
	c := env.StartExtraCollector(t, "filelog", cfg)

	// A third of the log, then wait until both receivers have read into it; another third
	// appended, and the file rotated at once, before they can have read all of it; the last third
	// into the new file.
	third := len(lines) / 3
	for _, l := range logs {
		l.write(t, lines[:third])
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, out := range outs {
		for len(auditSpansIn(t, out)) == 0 {
			if time.Now().After(deadline) || !c.Running() {
				t.Fatalf("no span in %s within 30 s of the first lines:\n%s", out, c.LogTail(20))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for _, l := range logs {
		l.write(t, lines[third:2*third])
		l.rotate(t)
		l.write(t, lines[2*third:])
	}

	for i, v := range variants {
		door := "filelog"
		if v.operators != nil {
			door = "filelog with json_parser"
		}
		checkSpansOfEveryLoggedWrite(t, env, door, outs[i], logged, start, end, c)
	}
	t.Logf("%d audit log lines (largest %d bytes) through two filelog receivers, rotated after line %d; %d logged writes; %s",
		len(lines), largest, 2*third, len(logged), time.Since(t0).Round(100*time.Millisecond))
}

// kafkaMessages makes the audit log's events into Kafka messages the way the providers' pipelines
// deliver them: every other event alone (a native event, and also what EKS's CloudWatch Logs
// message is: the event's JSON), the rest as Event Hub messages of AKS diagnostic records
// ({"records":[…]}, up to 20 events each, as an Event Hub's Kafka endpoint hands them on).
func kafkaMessages(t *testing.T, lines [][]byte) (msgs [][]byte, native, aks int) {
	t.Helper()
	var batch []json.RawMessage
	flush := func() {
		if len(batch) == 0 {
			return
		}
		m, err := envelopetest.AKS(ClusterName, batch)
		if err != nil {
			t.Fatal(err)
		}
		msgs, batch = append(msgs, m), nil
		aks++
	}
	for i, l := range lines {
		if i%2 == 0 {
			msgs = append(msgs, l)
			native++
			continue
		}
		batch = append(batch, l)
		if len(batch) == 20 {
			flush()
		}
	}
	flush()
	return msgs, native, aks
}

// startKafka starts testbed/cmd/kafka with one topic of the given partitions and returns its
// bootstrap address, which it prints once it serves. args are more of its flags (-ports).
func startKafka(t *testing.T, env *Env, topic string, partitions int, args ...string) string {
	t.Helper()
	if _, err := os.Stat(env.KafkaBin); err != nil {
		t.Fatalf("no Kafka broker binary (testbed/hack/e2e.sh builds it: go build -o %s ./testbed/cmd/kafka): %v", env.KafkaBin, err)
	}
	logPath := filepath.Join(env.OutDir, "kafka.log")
	_ = os.Remove(logPath)
	p, err := StartProcess("kafka", logPath, env.pidDir, nil, env.KafkaBin, append([]string{"-topic", fmt.Sprintf("%s:%d", topic, partitions), "-log-level", "warn"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(10 * time.Second); err != nil {
			t.Log(err)
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; {
		b, _ := os.ReadFile(logPath)
		if first, _, ok := bytes.Cut(b, []byte("\n")); ok && bytes.HasPrefix(first, []byte("127.0.0.1:")) {
			return string(first)
		}
		if done, err := p.Exited(); done {
			t.Fatalf("kafka exited (%v):\n%s", err, p.LogTail(20))
		}
		if time.Now().After(deadline) {
			t.Fatalf("kafka printed no bootstrap address within 30 s:\n%s", p.LogTail(20))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// committedOffsets returns the sum of the offsets group has committed on topic's partitions.
func committedOffsets(ctx context.Context, cl *kgo.Client, group, topic string, partitions int) (int64, error) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = topic
	for p := range partitions {
		rt.Partitions = append(rt.Partitions, int32(p))
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return 0, err
	}
	var sum int64
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return 0, err
			}
			sum += max(p.Offset, 0) // -1: nothing committed yet
		}
	}
	return sum, nil
}

// TestAuditEventsThroughKafka produces the audit log's events to a Kafka topic (testbed/cmd/kafka,
// franz-go's kfake broker) as native, EKS- and AKS-shaped messages; the collector's kafka receiver
// hands them to the k8s_audit connector, which writes spans to a file. While the messages stream
// in, the collector is killed (SIGKILL, once its group has committed offsets) and started again
// on the same group. Every logged write must then be one span ID, the one the
// webhook gave Jaeger, and none missing: the receiver marks a message only after the pipeline
// took it (message_marking.after) and the restarted consumer resumes after the committed offsets.
// Messages consumed but not yet committed at the kill are consumed again, and the connector's
// deduplication (in memory) died with the process: their spans are written twice with the same
// span ID (at least once, not exactly once; the figure is logged, and a k8s_object_link processor
// on a shared Redis drops such repeats by span ID in a real pipeline).
func TestAuditEventsThroughKafka(t *testing.T) {
	env := Testbed(t)
	requireAuditReceiver(t, env)
	requireComponent(t, env, "receivers", "kafka")
	requireComponent(t, env, "connectors", "k8s_audit")
	requireComponent(t, env, "exporters", "file")
	start, end, logged := env.RunsWrites(t)
	t0 := time.Now()
	auditLog := env.AuditLog()
	msgs, native, aks := kafkaMessages(t, auditLogLines(t, auditLog))
	largest := 0
	for _, m := range msgs {
		largest = max(largest, len(m))
	}
	// Kafka's default max.message.bytes (about 1 MiB), which kfake keeps too.
	if !Check(t, "every message fits Kafka's default message size", largest < 1<<20, "largest message %d bytes", largest) {
		t.FailNow()
	}

	const topic, partitions, group = "kube-audit", 2, "kubetrail-e2e"
	bootstrap := startKafka(t, env, topic, partitions)
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	records := func(msgs [][]byte) []*kgo.Record {
		recs := make([]*kgo.Record, len(msgs))
		for i, m := range msgs {
			recs[i] = &kgo.Record{Value: m}
		}
		return recs
	}
	// The stream: the first messages before the collector starts, the rest a few at a time while
	// it consumes (below), so that the kill falls mid-stream.
	const first = 20
	if err := cl.ProduceSync(ctx, records(msgs[:first])...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}

	out := filepath.Join(env.OutDir, "kafka-spans.jsonl")
	_ = os.Remove(out)
	cfg := Config{}
	setKafkaConsumer(cfg, bootstrap, topic, group, "raw")
	cfg.Set("connectors.k8s_audit.cluster", ClusterName)
	cfg.Set("exporters.file.path", out)
	// With rotation the file exporter writes through to the file at each export (no buffer a
	// SIGKILL would lose after the offsets were committed) and appends after a restart; the
	// size is never reached.
	cfg.Set("exporters.file.rotation.max_megabytes", 1024)
	cfg.Set("service.pipelines.logs/audit.receivers", []any{"kafka"})
	cfg.Set("service.pipelines.logs/audit.exporters", []any{"k8s_audit"})
	cfg.SetPipeline("receivers", "k8s_audit")
	cfg.SetPipeline("exporters", "file")
	cfg.Set("service.telemetry.metrics.level", "none")
	c := env.StartExtraCollector(t, "kafka", cfg)

	for deadline := time.Now().Add(60 * time.Second); len(auditSpansIn(t, out)) == 0; {
		if !c.Running() || time.Now().After(deadline) {
			t.Fatalf("no span from the kafka collector within 60 s:\n%s", c.LogTail(20))
		}
		time.Sleep(50 * time.Millisecond)
	}
	var produced atomic.Int64
	produced.Store(first)
	streamed := make(chan error, 1)
	go func() {
		for chunk := range slices.Chunk(msgs[first:], 4) {
			if err := cl.ProduceSync(ctx, records(chunk)...).FirstErr(); err != nil {
				streamed <- err
				return
			}
			produced.Add(int64(len(chunk)))
			time.Sleep(25 * time.Millisecond) // a stream, not one burst
		}
		streamed <- nil
	}()

	// Kill once the group has committed more than the first messages (bootstrap writes, each a
	// span): the restart then has committed messages not to read again, and, unless the kill
	// fell right after a commit, consumed ones not yet committed to read again.
	want := int64(min(first+20, len(msgs)))
	var committed int64
	for deadline := time.Now().Add(60 * time.Second); committed < want; {
		if !c.Running() {
			t.Fatalf("the kafka collector exited:\n%s", c.LogTail(20))
		}
		if time.Now().After(deadline) {
			t.Fatalf("the kafka receiver committed %d offsets within 60 s, want %d:\n%s", committed, want, c.LogTail(20))
		}
		time.Sleep(50 * time.Millisecond)
		if committed, err = committedOffsets(ctx, cl, group, topic, partitions); err != nil {
			t.Logf("offset fetch: %v", err)
		}
	}
	c.Kill()
	atKill := produced.Load()
	firstRun := len(auditSpansIn(t, out))
	if err := c.start(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if err := <-streamed; err != nil {
		t.Fatalf("produce: %v", err)
	}

	got := waitAuditSpans(t, logged, out)
	if !c.Running() {
		t.Fatalf("the kafka collector exited after the restart:\n%s", c.LogTail(20))
	}
	all := auditSpansIn(t, out)
	distinct := map[string][]string{}
	for id, spans := range got {
		seen := map[string]bool{}
		for _, s := range spans {
			if !seen[s] {
				seen[s] = true
				distinct[id] = append(distinct[id], s)
			}
		}
	}
	repeated := len(all) - len(all.ByID())
	checkEachWriteOnce(t, "kafka", logged, distinct)
	checkWebhookSpanIDs(t, env, "kafka", logged, distinct, start, end)
	Check(t, "the restarted consumer resumed after the committed offsets", repeated < firstRun,
		"%d spans written again after the restart, %d written before the kill", repeated, firstRun)
	t.Logf("%d messages (%d native/EKS events alone, %d AKS messages of up to 20 records; largest %d bytes), "+
		"killed with %d produced, %d committed and %d audit spans written; %d spans in all, %d written twice "+
		"(redelivered after the kill); %d logged writes; %s",
		len(msgs), native, aks, largest, atKill, committed, firstRun, len(all), repeated, len(logged),
		time.Since(t0).Round(100*time.Millisecond))
}
