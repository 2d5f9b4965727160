//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kubetrail/kubetrail/internal/auditconv"
	"github.com/kubetrail/kubetrail/internal/auditconv/auditconvtest"
	"github.com/kubetrail/kubetrail/internal/model"
)

// kafkaEdgeConfig is distribution/examples/kafka-edge.yaml's pipeline on the test's broker: the
// webhook's events as log records, into Kafka keyed by object, acknowledged by the broker before
// the webhook answers.
func kafkaEdgeConfig(bootstrap, topic, cluster string) Config {
	cfg := Config{}
	cfg.Set("receivers.k8s_audit.cluster", cluster)
	cfg.Set("exporters.kafka.brokers", []any{bootstrap})
	cfg.Set("exporters.kafka.logs.topic", topic)
	cfg.Set("exporters.kafka.logs.encoding", "otlp_proto")
	cfg.Set("exporters.kafka.partition_logs_by_resource_attributes", true)
	cfg.Set("exporters.kafka.producer.required_acks", "all")
	cfg.Set("exporters.kafka.producer.allow_auto_topic_creation", false)
	cfg.Set("exporters.kafka.producer.max_message_bytes", 8<<20)
	cfg.Set("exporters.kafka.sending_queue.enabled", false)
	cfg.Set("exporters.kafka.timeout", "10s")
	cfg.Set("exporters.kafka.retry_on_failure", map[string]any{"enabled": true, "initial_interval": "1s", "max_interval": "5s", "max_elapsed_time": "20s"})
	cfg.Set("service.pipelines.logs/edge.receivers", []any{"k8s_audit"})
	cfg.Set("service.pipelines.logs/edge.exporters", []any{"kafka"})
	cfg.Set("service.telemetry.metrics.level", "none")
	return cfg
}

// TestKafkaEdgeRefusesAMissingTopic: an edge whose topic does not exist answers the webhook with
// a retryable 503 once its retries are spent, so the apiserver keeps and resends the batch; it
// never says 200 for events Kafka does not have. (The chart creates no topic and its exporter
// asks for none, allow_auto_topic_creation false, checked in the dist tests; kfake creates none
// either way, as a broker with auto.create.topics.enable=false.)
func TestKafkaEdgeRefusesAMissingTopic(t *testing.T) {
	env := Testbed(t)
	requireAuditReceiver(t, env)
	requireComponent(t, env, "exporters", "kafka")
	bootstrap := startKafka(t, env, "kube-audit-present", 1)
	cfg := kafkaEdgeConfig(bootstrap, "kube-audit-absent", ClusterName)
	cfg.Set("exporters.kafka.timeout", "2s")
	cfg.Set("exporters.kafka.retry_on_failure.max_interval", "1s")
	cfg.Set("exporters.kafka.retry_on_failure.max_elapsed_time", "3s")
	edge := env.StartExtraCollector(t, "kafka-edge-no-topic", cfg)
	body := auditconvtest.FixtureBodies(t, "deployment")[0]
	resp, err := http.Post(edge.AuditURL+"/audit/"+ClusterName, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	Check(t, "the edge answers a missing topic with a retryable 503", resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "",
		"answer %d (Retry-After %q): %s", resp.StatusCode, resp.Header.Get("Retry-After"), truncate(string(answer), 400))
	Check(t, "the edge logs why", edge.LogContains("kube-audit-absent"), "log:\n%s", edge.LogTail(20))
}

// kafkaProcessingConfig is distribution/examples/kafka-processing.yaml's consumer and connector,
// writing the audit spans to a file (out) to be compared with the apiserver's audit log.
func kafkaProcessingConfig(bootstrap, topic, group, out string) Config {
	cfg := Config{}
	setKafkaConsumer(cfg, bootstrap, topic, group, "otlp_proto")
	cfg.Set("receivers.kafka.error_backoff", map[string]any{"enabled": true, "initial_interval": "1s", "max_interval": "30s", "max_elapsed_time": "5m"})
	cfg.Set("connectors.k8s_audit.cluster_attribute", "k8s.cluster.name")
	cfg.Set("exporters.file.path", out)
	cfg.Set("exporters.file.rotation.max_megabytes", 1024)
	cfg.Set("service.pipelines.logs/audit.receivers", []any{"kafka"})
	cfg.Set("service.pipelines.logs/audit.exporters", []any{"k8s_audit"})
	cfg.Set("service.pipelines.traces.receivers", []any{"k8s_audit"})
	cfg.Set("service.pipelines.traces.exporters", []any{"file"})
	cfg.Set("service.telemetry.metrics.level", "none")
	return cfg
}

// setKafkaConsumer configures cfg's kafka receiver as the shipped examples do: a consumer group
// that starts at the oldest message, marks a message only once the pipeline took it or refused it
// for good (a retryable refusal is read again) and gives each partition a worker of its own
// running four of its messages at once, with kfake's shortest session so that a rebalance after a
// kill is quick.
func setKafkaConsumer(cfg Config, bootstrap, topic, group, encoding string) {
	cfg.Set("receivers.kafka.brokers", []any{bootstrap})
	cfg.Set("receivers.kafka.logs.topics", []any{topic})
	cfg.Set("receivers.kafka.logs.encoding", encoding)
	cfg.Set("receivers.kafka.group_id", group)
	cfg.Set("receivers.kafka.initial_offset", "earliest")
	cfg.Set("receivers.kafka.message_marking.after", true)
	cfg.Set("receivers.kafka.message_marking.on_error", false)
	cfg.Set("receivers.kafka.message_marking.on_permanent_error", true)
	cfg.Set("receivers.kafka.partition_processing.independent", true)
	cfg.Set("receivers.kafka.partition_processing.max_in_flight", map[string]any{"records": 4, "bytes": 16 << 20})
	// A killed consumer stays a group member until its session times out; the restarted one
	// waits for that rebalance. kfake's minimum keeps it short.
	cfg.Set("receivers.kafka.session_timeout", "6s")
	cfg.Set("receivers.kafka.heartbeat_interval", "1s")
}

// TestKafkaTiersSurviveAProcessingOutage puts the apiserver's webhook in front of an edge
// collector (k8s_audit's edge output into the kafka exporter, kafka-edge.yaml) and runs the
// deployment scenario while no processing tier runs, then waits past the testbed apiserver's
// retry budget (about 10 s with its 1 s initial backoff) before starting the processing tier
// (kafka receiver, k8s_audit connector, kafka-processing.yaml). The apiserver saw no refusal, and
// every write of the scenario in its audit log is exactly one audit span. A second cluster's edge
// produces into the same topic meanwhile (the recorded deployment capture, posted as cluster
// fleet-b): its spans are exactly those the capture converts to, and no trace holds spans of both
// clusters.
func TestKafkaTiersSurviveAProcessingOutage(t *testing.T) {
	AfterOthers(t)
	env := Testbed(t)
	requireAuditReceiver(t, env)
	requireComponent(t, env, "receivers", "kafka")
	requireComponent(t, env, "exporters", "kafka")
	requireComponent(t, env, "connectors", "k8s_audit")
	requireComponent(t, env, "exporters", "file")
	const topic, partitions, group = "kube-audit-tiers", 2, "kubetrail-processing"
	bootstrap := startKafka(t, env, topic, partitions)

	edge := env.StartExtraCollector(t, "kafka-edge", kafkaEdgeConfig(bootstrap, topic, ClusterName))
	const other = "fleet-b"
	edgeB := env.StartExtraCollector(t, "kafka-edge-b", kafkaEdgeConfig(bootstrap, topic, other))
	env.Router.SetRoute(ToAll(edge.AuditURL))
	t.Cleanup(env.RestoreRoute)
	refusedBefore := env.Router.Refused()

	// The outage: the scenario runs with no processing tier at all.
	run, err := env.RunScenario("deployment")
	if err != nil {
		t.Fatalf("scenario: %v", err)
	}
	// The other cluster's stream, and the spans it converts to in-process, in order: each span's
	// diff as one collector makes it.
	want := map[string]string{}
	conv := auditconv.New(auditconv.Options{Settings: auditconv.DefaultSettings(), ScopeName: "e2e"})
	for _, body := range auditconvtest.FixtureBodies(t, "deployment") {
		resp, err := http.Post(edgeB.AuditURL+"/audit/"+other, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("edge %s: %d", other, resp.StatusCode)
		}
		events, err := conv.DecodeBody(body, nil)
		if err != nil {
			t.Fatal(err)
		}
		var st auditconv.Stats
		for _, s := range SpansFromTraces(conv.Convert(other, events, &st)) {
			want[s.SpanID] = diffSummary(s.Attributes, s.Events)
		}
	}
	const outage = 30 * time.Second
	time.Sleep(time.Until(run.Start.Add(outage)))
	Check(t, "the edge answered every batch 200 while the processing tier was down", env.Router.Refused() == refusedBefore && env.Router.Delivered(edge.AuditURL) > 0,
		"%d refused, %d delivered:\n%s", env.Router.Refused()-refusedBefore, env.Router.Delivered(edge.AuditURL), edge.LogTail(20))

	out := filepath.Join(env.OutDir, "kafka-tiers-spans.jsonl")
	_ = os.Remove(out)
	env.StartExtraCollector(t, "kafka-processing", kafkaProcessingConfig(bootstrap, topic, group, out))
	logged := loggedWrites(t, env.AuditLog(), run.Start, run.End)
	got := waitAuditSpans(t, logged, out)
	checkEachWriteOnce(t, "edge and processing tiers after a 30 s outage", logged, got)

	spans := auditSpansIn(t, out)
	fleet := spans.WithAttr(model.AttrClusterName, other)
	gotB := map[string]string{}
	for _, s := range fleet {
		gotB[s.SpanID] = diffSummary(s.Attributes, s.Events)
	}
	missing, extra, otherDiff, diffs := 0, 0, 0, 0
	for id, d := range want {
		g, ok := gotB[id]
		switch {
		case !ok:
			missing++
		case g != d:
			otherDiff++
			t.Logf("span %s: diff %q, in order %q", id, g, d)
		}
		if strings.Contains(d, "k8s.object.diff.count") {
			diffs++
		}
	}
	for id := range gotB {
		if _, ok := want[id]; !ok {
			extra++
		}
	}
	Check(t, "the second cluster's spans through the shared topic are the capture's", len(want) > 0 && missing == 0 && extra == 0 && len(fleet) == len(want),
		"%d spans expected, %d written (%d distinct): %d missing, %d unexpected", len(want), len(fleet), len(gotB), missing, extra)
	// The backlog is read four messages of a partition at a time; the connector converts them in
	// offset order, so every diff is the one the capture gives in order.
	Check(t, "with the diffs of the capture converted in order, four messages of a partition in flight", diffs > 0 && otherDiff == 0,
		"%d of %d spans differ in their diff (%d spans with a diff)", otherDiff, len(want), diffs)
	clusters := map[string]map[string]bool{} // trace ID → clusters
	for _, s := range spans {
		if clusters[s.TraceID] == nil {
			clusters[s.TraceID] = map[string]bool{}
		}
		clusters[s.TraceID][s.Attr(model.AttrClusterName)] = true
	}
	mixed := 0
	for _, cs := range clusters {
		if len(cs) > 1 {
			mixed++
		}
	}
	Check(t, "two clusters' traces stay apart on one topic", mixed == 0 && len(clusters) > 0, "%d of %d traces hold spans of both clusters", mixed, len(clusters))
}

// TestKafkaProcessingReplicaKilled runs two processing replicas (kafka receiver, connector,
// k8s_object_link on a shared Redis ID map) in one consumer group behind an edge, and kills one
// (SIGKILL) mid-scenario: the group rebalances onto the other, which reads again what the
// killed one consumed but had not committed. Every write in the apiserver's audit log must be
// exactly one audit span across both replicas' outputs: the redelivered events are recognised
// as duplicates through the Redis marks (the processor's default on Redis; the count is logged). The processors run
// with owner_wait 0 and owner_lookup, as kafka-processing.yaml does: a span held for owner_wait
// would be lost with the killed process after its message was committed. With shared_diff_base
// off, every diff is the one a single collector makes of the apiserver's audit log, but those the
// rebalance leaves without a base (counted, not failed).
func TestKafkaProcessingReplicaKilled(t *testing.T) {
	AfterOthers(t)
	env := Testbed(t)
	requireAuditReceiver(t, env)
	requireObjectLink(t, env)
	requireComponent(t, env, "receivers", "kafka")
	requireComponent(t, env, "exporters", "kafka")
	requireComponent(t, env, "exporters", "file")
	const topic, partitions, group = "kube-audit-kill", 2, "kubetrail-kill"
	bootstrap := startKafka(t, env, topic, partitions)
	edge := env.StartExtraCollector(t, "kafka-edge-kill", kafkaEdgeConfig(bootstrap, topic, ClusterName))
	env.Router.SetRoute(ToAll(edge.AuditURL))
	t.Cleanup(env.RestoreRoute)

	prefix := fmt.Sprintf("e2e-kafka-kill-%d:", time.Now().UnixNano())
	t.Cleanup(func() { deleteRedisPrefix(t, "127.0.0.1:6379", prefix) })
	outs := map[string]string{}
	replica := func(name string, metricsPort int) *Collector {
		out := filepath.Join(env.OutDir, name+"-spans.jsonl")
		_ = os.Remove(out)
		outs[name] = out
		cfg := kafkaProcessingConfig(bootstrap, topic, group, out)
		// The file exporter stands in for a durable sink (a persistent queue fsyncs before it
		// answers), but it answers before it writes: SIGKILL loses what it has buffered, and once
		// the next batch or the second's tick has confirmed those spans' duplicate marks in Redis,
		// b drops them as duplicates after the rebalance. Its default 1 s flush made that a loss of
		// up to a second of spans; 1 ms keeps the sink as durable as the test can make a file.
		cfg.Set("exporters.file.flush_interval", "1ms")
		cfg.Set("processors.k8s_object_link.id_map.backend", "redis")
		cfg.Set("processors.k8s_object_link.id_map.redis.addresses", []any{"127.0.0.1:6379"})
		cfg.Set("processors.k8s_object_link.id_map.redis.key_prefix", prefix)
		cfg.Set("processors.k8s_object_link.owner_wait", "0s")
		cfg.Set("processors.k8s_object_link.owner_lookup.auth_type", "kubeConfig")
		cfg.Set("processors.k8s_object_link.owner_lookup.cluster", ClusterName)
		cfg.Set("service.pipelines.traces.processors", []any{"k8s_object_link"})
		if metricsPort != 0 {
			cfg.Set("service.telemetry.metrics.level", "normal")
			cfg.Set("service.telemetry.metrics.readers", []any{map[string]any{"pull": map[string]any{"exporter": map[string]any{
				"prometheus": map[string]any{"host": "127.0.0.1", "port": metricsPort}}}}})
		}
		return env.StartExtraCollector(t, name, cfg)
	}
	a := replica("kafka-proc-a", 0)
	metricsPort, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	b := replica("kafka-proc-b", metricsPort)
	// The group settled: b (which joined second) was given one partition, so a holds the other,
	// and whatever a takes from now on it has not committed when it is killed.
	settled := regexp.MustCompile(`"assigned": "` + topic + `\[\d\]"`)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if log, _ := os.ReadFile(b.LogPath); settled.Match(log) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica b was not given one partition within 60 s:\n%s", b.LogTail(20))
		}
	}

	done := make(chan error, 1)
	var run *ScenarioRun
	go func() {
		var err error
		run, err = env.RunScenario("deployment")
		done <- err
	}()
	// Kill a once it has written spans of the scenario's objects (demo, demo-…; it writes
	// spans of the cluster's background writes too): it holds a partition mid-stream.
	ofScenario := func(s *Span) bool { return strings.HasPrefix(s.Attr(model.AttrObjectName), "demo") }
	for deadline := time.Now().Add(60 * time.Second); len(auditSpansIn(t, outs["kafka-proc-a"]).Where(ofScenario)) == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("replica a wrote no span within 60 s:\n%s", a.LogTail(20))
		}
		time.Sleep(20 * time.Millisecond)
	}
	a.Kill()
	if err := <-done; err != nil {
		t.Fatalf("scenario: %v", err)
	}
	logged := loggedWrites(t, env.AuditLog(), run.Start, run.End)
	got := waitAuditSpans(t, logged, outs["kafka-proc-a"], outs["kafka-proc-b"])
	checkEachWriteAtLeastOnce(t, "two processing replicas, one killed mid-stream", logged, got)
	// shared_diff_base off: a partition holds all of an object's events, so its diffs are one
	// collector's; only the first write of an object after the rebalance may lack one (counted).
	checkDiffsAsOneCollector(t, "two processing replicas, local diff bases", env.AuditLog(), run.Start,
		outs["kafka-proc-a"], outs["kafka-proc-b"])
	// How many of a's spans b read again after the rebalance and dropped by their Redis marks:
	// as many as a had exported since its last commit (often none: the kill can fall right
	// after one); the check above holds either way.
	t.Logf("replica b dropped %s spans as duplicates after the rebalance",
		scrapeCounter(t, metricsPort, "otelcol_k8s_object_link_spans_dropped", `reason="duplicate"`))
}

// checkEachWriteAtLeastOnce checks that every logged write has a span in got, and that a write
// with several has one span ID: after a SIGKILL, the survivor sends again the spans whose
// duplicate marks the killed replica left pending (its last batch, perhaps already exported),
// so a write may arrive twice, as the same span, which backends merge; none may be missing.
func checkEachWriteAtLeastOnce(t *testing.T, what string, logged map[string]string, got map[string][]string) {
	t.Helper()
	var missing, split []string
	doubled := 0
	for id, desc := range logged {
		switch spans := got[id]; {
		case len(spans) == 0:
			missing = append(missing, desc)
		case len(spans) > 1:
			doubled++
			for _, s := range spans[1:] {
				if s != spans[0] {
					split = append(split, desc)
					break
				}
			}
		}
	}
	Check(t, what+": the writes are in the audit log", len(logged) > 0, "")
	Check(t, what+": every logged write is a span", len(missing) == 0,
		"%d of %d writes without a span: %s", len(missing), len(logged), truncate(strings.Join(missing, "; "), 2000))
	Check(t, what+": a write sent twice is one span", len(split) == 0,
		"%d writes with different spans: %s", len(split), truncate(strings.Join(split, "; "), 2000))
	t.Logf("%s: %d of %d writes sent twice (the killed replica's last, unconfirmed batch)", what, doubled, len(logged))
}

// scrapeCounter sums the samples of a collector's own metric (Prometheus text on port) whose
// labels contain label; "?" when the scrape fails.
func scrapeCounter(t *testing.T, port int, name, label string) string {
	t.Helper()
	sum, _, err := scrapeSum(fmt.Sprintf("127.0.0.1:%d", port), name, label)
	if err != nil {
		return "?"
	}
	return fmt.Sprint(sum)
}

// scrapeSum scrapes a collector's Prometheus endpoint at addr (host:port) and sums the samples
// of metric name whose labels contain label; it also returns the whole text.
func scrapeSum(addr, name, label string) (float64, string, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", err
	}
	body := string(b)
	if resp.StatusCode != http.StatusOK {
		return 0, body, fmt.Errorf("%s/metrics answered %d", addr, resp.StatusCode)
	}
	var sum float64
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, name) && strings.Contains(line, label) {
			var v float64
			if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
				sum += v
			}
		}
	}
	return sum, body, nil
}
