//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/kubetrail/kubetrail/internal/auditconv"
	"github.com/kubetrail/kubetrail/internal/auditconv/auditconvtest"
	"github.com/kubetrail/kubetrail/internal/model"
)

// otlpSink is an OTLP/HTTP traces endpoint in the test process: it keeps the span IDs it took by
// cluster, answers 400 (invalid data: a permanent refusal) to every request that holds spans of
// cluster rejectCluster, and 503 (retryable) to the first refuse requests that hold spans of
// cluster refuseCluster.
type otlpSink struct {
	mu            sync.Mutex
	rejectCluster string
	rejected      int
	refuseCluster string
	refuse        int
	refused       int
	spans         map[string]map[string]bool // cluster → span ID
}

func (s *otlpSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	req := ptraceotlp.NewExportRequest()
	if err == nil {
		err = req.UnmarshalProto(body)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	spans := SpansFromTraces(req.Traces())
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(spans.WithAttr(model.AttrClusterName, s.rejectCluster)) > 0 {
		s.rejected++
		http.Error(w, "invalid", http.StatusBadRequest)
		return
	}
	if s.refused < s.refuse && len(spans.WithAttr(model.AttrClusterName, s.refuseCluster)) > 0 {
		s.refused++
		http.Error(w, "not now", http.StatusServiceUnavailable)
		return
	}
	for _, sp := range spans {
		c := sp.Attr(model.AttrClusterName)
		if s.spans[c] == nil {
			s.spans[c] = map[string]bool{}
		}
		s.spans[c][sp.SpanID] = true
	}
	out, _ := ptraceotlp.NewExportResponse().MarshalProto()
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// got returns the span IDs taken of cluster, and how many requests were refused (503) and
// rejected (400).
func (s *otlpSink) got(cluster string) (ids map[string]bool, refused, rejected int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids = map[string]bool{}
	for id := range s.spans[cluster] {
		ids[id] = true
	}
	return ids, s.refused, s.rejected
}

// edgeRecord is an otlp_proto record as the edge writes it: each event a log record named
// auditconv.RawEventName, its cluster on the resource.
func edgeRecord(t *testing.T, cluster string, events []string) []byte {
	t.Helper()
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr(model.AttrClusterName, cluster)
	lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
	for _, ev := range events {
		lr := lrs.AppendEmpty()
		lr.SetEventName(auditconv.RawEventName)
		lr.Body().SetStr(ev)
	}
	b, err := (&plog.ProtoMarshaler{}).MarshalLogs(ld)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// minimalEvent is a Metadata-level create of ConfigMap cm-<i> whose auditID ends in i.
func minimalEvent(i int, at string) string {
	return fmt.Sprintf(`{"level":"Metadata","auditID":"00000000-0000-4000-8000-%012d","stage":"ResponseComplete",`+
		`"requestURI":"/api/v1/namespaces/default/configmaps","verb":"create","user":{"username":"poison"},`+
		`"objectRef":{"resource":"configmaps","namespace":"default","name":"cm-%d","apiVersion":"v1"},`+
		`"responseStatus":{"metadata":{},"code":201},"requestReceivedTimestamp":%q,"stageTimestamp":%q}`, i, i, at, at)
}

// TestKafkaPoisonRecordsAreSkipped: a record on the topic that the processing tier cannot decode
// (OTLP JSON, where the tier reads otlp_proto), one the connector refuses for good (more decoded
// than max_in_flight_bytes allows), and one whose span the backend rejects as invalid (400),
// then real audit events through the edge, all in one partition. With
// message_marking.on_permanent_error, as the shipped configs set it, the three are skipped, each
// logged once with its partition and offset and counted, and every real event after them
// becomes a span; without it the partition stopped at the first one for good. A retryable
// refusal still holds the partition: the sink answers 503 to the first batches of the real
// events, and the receiver retries the same record until it is taken (the outage and SIGKILL
// tests in kafka_tiers_test.go hold a partition through a stopped tier).
func TestKafkaPoisonRecordsAreSkipped(t *testing.T) {
	env := Testbed(t)
	requireAuditReceiver(t, env)
	requireComponent(t, env, "receivers", "kafka")
	requireComponent(t, env, "exporters", "kafka")
	requireComponent(t, env, "connectors", "k8s_audit")
	requireComponent(t, env, "exporters", "otlp_http")
	t0 := time.Now()
	const topic, group = "kube-audit-poison", "kubetrail-poison"
	const cluster, bigCluster, rejectedCluster = "poison-a", "poison-big", "poison-rejected"
	bootstrap := startKafka(t, env, topic, 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Offset 0: what an OTLP JSON producer writes, an audit event in it.
	body := auditconvtest.FixtureBodies(t, "deployment")[0]
	foreign := plog.NewLogs()
	rl := foreign.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr(model.AttrClusterName, cluster)
	lr := rl.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
	lr.SetEventName(auditconv.RawEventName)
	lr.Body().SetStr(string(body))
	poison, err := (&plog.JSONMarshaler{}).MarshalLogs(foreign)
	if err != nil {
		t.Fatal(err)
	}
	// Offset 1: the edge's encoding, but 600 events in one record: each charges the connector
	// at least 64 KiB decoded, and the processing tier below allows 16 MiB (256 of them).
	now := time.Now().UTC().Format(time.RFC3339Nano)
	const bigEvents = 600
	var events []string
	for i := range bigEvents {
		events = append(events, minimalEvent(i, now))
	}
	bigRecord := edgeRecord(t, bigCluster, events)
	// Offset 2: one event whose span the backend rejects for good (400).
	rejectedRecord := edgeRecord(t, rejectedCluster, []string{minimalEvent(bigEvents, now)})
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: poison}, &kgo.Record{Value: bigRecord}, &kgo.Record{Value: rejectedRecord}).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}

	// Then real audit events, through an edge, and the spans they convert to in-process.
	edge := env.StartExtraCollector(t, "kafka-poison-edge", kafkaEdgeConfig(bootstrap, topic, cluster))
	want := map[string]bool{}
	conv := auditconv.New(auditconv.Options{Settings: auditconv.DefaultSettings(), ScopeName: "e2e"})
	for _, body := range auditconvtest.FixtureBodies(t, "deployment") {
		resp, err := http.Post(edge.AuditURL+"/audit/"+cluster, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("edge: %d:\n%s", resp.StatusCode, edge.LogTail(20))
		}
		events, err := conv.DecodeBody(body, nil)
		if err != nil {
			t.Fatal(err)
		}
		var st auditconv.Stats
		for _, s := range SpansFromTraces(conv.Convert(cluster, events, &st)) {
			want[s.SpanID] = true
		}
	}

	// The processing tier, writing to the sink, which refuses the first two batches of the real
	// events with a retryable 503.
	const refuse = 2
	sink := &otlpSink{rejectCluster: rejectedCluster, refuseCluster: cluster, refuse: refuse, spans: map[string]map[string]bool{}}
	srv := httptest.NewServer(sink)
	defer srv.Close()
	metricsPort, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{}
	setKafkaConsumer(cfg, bootstrap, topic, group, "otlp_proto")
	cfg.Set("receivers.kafka.error_backoff", map[string]any{"enabled": true, "initial_interval": "200ms", "max_interval": "1s", "max_elapsed_time": "20s"})
	cfg.Set("connectors.k8s_audit.cluster_attribute", model.AttrClusterName)
	cfg.Set("connectors.k8s_audit.max_in_flight_bytes", 16<<20)
	cfg.Set("exporters.otlp_http.traces_endpoint", srv.URL+"/v1/traces")
	cfg.Set("exporters.otlp_http.compression", "none")
	cfg.Set("exporters.otlp_http.retry_on_failure.enabled", false)
	cfg.Set("exporters.otlp_http.sending_queue.enabled", false)
	cfg.Set("service.pipelines.logs/audit.receivers", []any{"kafka"})
	cfg.Set("service.pipelines.logs/audit.exporters", []any{"k8s_audit"})
	cfg.Set("service.pipelines.traces.receivers", []any{"k8s_audit"})
	cfg.Set("service.pipelines.traces.exporters", []any{"otlp_http"})
	cfg.Set("service.telemetry.metrics.level", "normal")
	cfg.Set("service.telemetry.metrics.readers", []any{map[string]any{"pull": map[string]any{"exporter": map[string]any{
		"prometheus": map[string]any{"host": "127.0.0.1", "port": metricsPort}}}}})
	proc := env.StartExtraCollector(t, "kafka-poison-processing", cfg)

	var got map[string]bool
	var refused, rejected int
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		got, refused, rejected = sink.got(cluster)
		if len(got) >= len(want) || !proc.Running() || time.Now().After(deadline) {
			break
		}
	}
	missing, extra := 0, 0
	for id := range want {
		if !got[id] {
			missing++
		}
	}
	for id := range got {
		if !want[id] {
			extra++
		}
	}
	Check(t, "every real event after the skipped records is a span", len(want) > 0 && missing == 0 && extra == 0,
		"%d spans expected, %d taken: %d missing, %d unexpected:\n%s", len(want), len(got), missing, extra, proc.LogTail(20))
	Check(t, "a retryable refusal holds the partition: the refused record is read again, not skipped",
		refused == refuse && proc.LogContains("Backing off due to error from the next consumer"),
		"%d of %d refusals made, backoff logged %v", refused, refuse, proc.LogContains("Backing off due to error from the next consumer"))

	// Each skipped record logged once, with its partition and offset; none paused the partition.
	log, err := os.ReadFile(proc.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	skipped := map[string]int{}
	field := regexp.MustCompile(`"(partition|offset)": (\d+)`)
	for _, line := range strings.Split(string(log), "\n") {
		if !strings.Contains(line, "skipping due to message_marking config") {
			continue
		}
		fields := map[string]string{}
		for _, m := range field.FindAllStringSubmatch(line, -1) {
			fields[m[1]] = m[2]
		}
		skipped[fields["partition"]+"/"+fields["offset"]]++
	}
	Check(t, "the undecodable record, the one past max_in_flight_bytes and the one the backend rejected are each logged once as skipped, with partition and offset",
		len(skipped) == 3 && skipped["0/0"] == 1 && skipped["0/1"] == 1 && skipped["0/2"] == 1, "skipped (partition/offset → lines): %v", skipped)
	Check(t, "no partition is paused", !proc.LogContains("pausing partition"), "%s", proc.LogTail(20))

	addr := fmt.Sprintf("127.0.0.1:%d", metricsPort)
	unmarshal, text, err := scrapeSum(addr, "otelcol_kafka_receiver_unmarshal_failed_log_records", `partition="0"`)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	tooLarge, _, _ := scrapeSum(addr, "otelcol_k8s_audit_dropped_events", `reason="request_too_large"`)
	permanent, _, _ := scrapeSum(addr, "otelcol_k8s_audit_dropped_events", `reason="consumer_permanent"`)
	Check(t, "the undecodable record is counted", unmarshal == 1, "otelcol_kafka_receiver_unmarshal_failed_log_records{partition=\"0\"} = %v", unmarshal)
	Check(t, "the refused record's events past max_in_flight_bytes are counted", tooLarge > 0 && tooLarge < bigEvents,
		"otelcol_k8s_audit_dropped_events{reason=\"request_too_large\"} = %v of %d events:\n%s", tooLarge, bigEvents, grepLines(text, "otelcol_k8s_audit_dropped_events"))
	Check(t, "the span the backend rejected for good is counted, its record skipped after one try", permanent == 1 && rejected == 1,
		"otelcol_k8s_audit_dropped_events{reason=\"consumer_permanent\"} = %v, the sink answered 400 %d times", permanent, rejected)
	bigTaken, _, _ := sink.got(bigCluster)
	t.Logf("%d spans of the real events, %d refusals retried, %d of the refused record's %d events handed on before it, %v counted request_too_large; %s",
		len(got), refused, len(bigTaken), bigEvents, tooLarge, time.Since(t0).Round(100*time.Millisecond))
}

// grepLines returns text's lines that contain s.
func grepLines(text, s string) string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
