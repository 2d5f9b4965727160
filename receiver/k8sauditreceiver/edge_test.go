package k8sauditreceiver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/kubetrail/kubetrail/internal/auditconv"
	"github.com/kubetrail/kubetrail/internal/auditconv/auditconvtest"
	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/receiver/k8sauditreceiver/internal/metadata"
)

// startEdge starts the receiver through its factory with the outputs given (nil: none), as the
// collector does for a receiver in a logs pipeline, a traces pipeline or both: one instance.
func startEdge(t *testing.T, logs consumer.Logs, traces consumer.Traces, mutate func(*Config)) string {
	t.Helper()
	f := NewFactory()
	cfg := f.CreateDefaultConfig().(*Config)
	cfg.ServerConfig.NetAddr.Endpoint = "127.0.0.1:0"
	cfg.Cluster = "c1"
	if mutate != nil {
		mutate(cfg)
	}
	set := receivertest.NewNopSettings(metadata.Type)
	var comps []component.Component
	if logs != nil {
		r, err := f.CreateLogs(context.Background(), set, cfg, logs)
		if err != nil {
			t.Fatal(err)
		}
		comps = append(comps, r)
	}
	if traces != nil {
		r, err := f.CreateTraces(context.Background(), set, cfg, traces)
		if err != nil {
			t.Fatal(err)
		}
		comps = append(comps, r)
	}
	for _, c := range comps {
		if err := c.Start(context.Background(), componenttest.NewNopHost()); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, c := range comps {
			if err := c.Shutdown(context.Background()); err != nil {
				t.Error(err)
			}
		}
	})
	shared := comps[0].(*sharedReceiver)
	for _, c := range comps[1:] {
		if c.(*sharedReceiver) != shared {
			t.Fatal("a traces and a logs pipeline got two receivers of one config")
		}
	}
	return "http://" + shared.listenAddr().String()
}

func postRaw(t *testing.T, url string, body []byte) int {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// recordedBodies are the recorded webhook posts of the deployment scenario.
func recordedBodies(t *testing.T) [][]byte {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("..", "..", "testbed", "fixtures", "deployment", "audit-webhook", "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no recorded bodies: %v", err)
	}
	var bodies [][]byte
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, b)
	}
	return bodies
}

// postToEdge posts body to the edge for cluster prod-eu-1 and returns its events as scanned and
// the logs the edge output handed on for it.
func postToEdge(t *testing.T, url string, sink *consumertest.LogsSink, body []byte) ([]auditconv.RawEvent, plog.Logs) {
	t.Helper()
	if code := postRaw(t, url+"/audit/prod-eu-1", body); code != http.StatusOK {
		t.Fatalf("POST: %d", code)
	}
	raws, err := auditconv.ScanEventList(body, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	return raws, sink.AllLogs()[len(sink.AllLogs())-1]
}

// The edge output forwards each audit event of a real body exactly as the apiserver sent it, a
// log record each, its body the event's JSON text, in one ResourceLogs per object (its cluster
// and key the resource), each object's events in the body's order. The records share a copy of
// the request's body: checked again once every body is posted, a record that still shared the
// pooled buffer would hold a later body's bytes.
func TestEdgeOutputForwardsEachEventAsReceived(t *testing.T) {
	sink := new(consumertest.LogsSink)
	url := startEdge(t, sink, nil, nil)
	type posted struct {
		raws []auditconv.RawEvent
		ld   plog.Logs
	}
	var all []posted
	want := 0
	for _, body := range recordedBodies(t) {
		raws, ld := postToEdge(t, url, sink, body)
		want += len(raws)
		checkEdgeRecords(t, raws, ld)
		all = append(all, posted{raws, ld})
	}
	if sink.LogRecordCount() != want || want == 0 {
		t.Fatalf("%d records for %d events", sink.LogRecordCount(), want)
	}
	for _, p := range all {
		checkEdgeRecords(t, p.raws, p.ld)
	}
}

// checkEdgeRecords fails unless ld holds raws as TestEdgeOutputForwardsEachEventAsReceived says.
func checkEdgeRecords(t *testing.T, raws []auditconv.RawEvent, ld plog.Logs) {
	t.Helper()
	// Each object's records, in order, are the body's events of that object, byte for byte.
	perKey := map[auditconv.ObjectKey][]string{}
	for _, r := range raws {
		perKey[r.Key] = append(perKey[r.Key], string(r.Raw))
	}
	if ld.ResourceLogs().Len() != len(perKey) {
		t.Fatalf("%d ResourceLogs for %d objects", ld.ResourceLogs().Len(), len(perKey))
	}
	for _, rl := range ld.ResourceLogs().All() {
		attrs := rl.Resource().Attributes()
		get := func(k string) string { v, _ := attrs.Get(k); return v.Str() }
		if get(model.AttrClusterName) != "prod-eu-1" {
			t.Fatalf("resource %v: want k8s.cluster.name prod-eu-1 (the path's)", attrs.AsRaw())
		}
		key := auditconv.ObjectKey{APIGroup: get(model.AttrObjectAPIGroup), Resource: get(model.AttrObjectResource),
			Namespace: get(model.AttrNamespaceName), Name: get(model.AttrObjectName)}
		records := rl.ScopeLogs().At(0).LogRecords()
		if records.Len() != len(perKey[key]) {
			t.Fatalf("object %+v: %d records, %d events", key, records.Len(), len(perKey[key]))
		}
		for i, lr := range records.All() {
			if lr.Body().Type() != pcommon.ValueTypeStr || lr.Body().Str() != perKey[key][i] || lr.ObservedTimestamp() == 0 || lr.EventName() != auditconv.RawEventName {
				t.Fatalf("object %+v record %d: a %s body that differs from the event as received", key, i, lr.Body().Type())
			}
		}
	}
}

// With edge.shards the edge output groups a body's objects into at most that many ResourceLogs,
// each keyed by its cluster and shard only: every event is still forwarded as received, each
// object's events in one group in the body's order, and an object keeps its shard from body to
// body, as its Kafka key must.
func TestEdgeShardsGroupObjects(t *testing.T) {
	const shards = 4
	sink := new(consumertest.LogsSink)
	url := startEdge(t, sink, nil, func(cfg *Config) { cfg.Edge.Shards = shards })
	shardOf := map[auditconv.ObjectKey]int64{}
	want, objects := 0, 0
	for _, body := range recordedBodies(t) {
		raws, ld := postToEdge(t, url, sink, body)
		want += len(raws)
		if n := ld.ResourceLogs().Len(); n > shards || n == 0 {
			t.Fatalf("%d ResourceLogs with %d shards", n, shards)
		}
		// The records of each group, read back per object, are the body's events of that object.
		got := map[auditconv.ObjectKey][][]byte{}
		seenShards := map[int64]bool{}
		next := map[auditconv.ObjectKey]int{}
		byRaw := map[string]auditconv.ObjectKey{}
		for _, r := range raws {
			byRaw[string(r.Raw)] = r.Key
		}
		for _, rl := range ld.ResourceLogs().All() {
			attrs := rl.Resource().Attributes()
			shard, ok := attrs.Get(attrEdgeShard)
			if cluster, _ := attrs.Get(model.AttrClusterName); !ok || cluster.Str() != "prod-eu-1" || attrs.Len() != 2 {
				t.Fatalf("resource %v: want k8s.cluster.name and %s only", attrs.AsRaw(), attrEdgeShard)
			}
			if seenShards[shard.Int()] || shard.Int() < 0 || shard.Int() >= shards {
				t.Fatalf("shard %d twice or out of range in one batch", shard.Int())
			}
			seenShards[shard.Int()] = true
			for _, lr := range rl.ScopeLogs().At(0).LogRecords().All() {
				key, ok := byRaw[lr.Body().Str()]
				if !ok {
					t.Fatal("a record that is none of the body's events")
				}
				got[key] = append(got[key], []byte(lr.Body().Str()))
				if s, ok := shardOf[key]; ok && s != shard.Int() {
					t.Fatalf("object %+v moved from shard %d to %d", key, s, shard.Int())
				}
				shardOf[key] = shard.Int()
			}
		}
		for _, r := range raws {
			if i := next[r.Key]; i >= len(got[r.Key]) || !bytes.Equal(got[r.Key][i], r.Raw) {
				t.Fatalf("object %+v: event %d is not where the body had it", r.Key, i)
			}
			next[r.Key]++
		}
		objects = max(objects, len(next))
	}
	if sink.LogRecordCount() != want || want == 0 {
		t.Fatalf("%d records for %d events", sink.LogRecordCount(), want)
	}
	if objects <= shards {
		t.Fatalf("no body had more objects (%d) than shards (%d): the grouping was not tried", objects, shards)
	}
}

// The shard of an object depends on its whole key and on nothing else.
func TestEdgeShardIsTheKeys(t *testing.T) {
	a := auditconv.ObjectKey{APIGroup: "apps", Resource: "deployments", Namespace: "default", Name: "web"}
	again := auditconv.ObjectKey{APIGroup: "apps", Resource: "deployments", Namespace: "default", Name: "web"}
	if edgeShard(a, 1<<16) != edgeShard(again, 1<<16) || edgeShard(a, 1) != 0 {
		t.Fatal("a key's shard is not stable")
	}
	// Parts shifted across their boundaries are other keys.
	b := auditconv.ObjectKey{APIGroup: "app", Resource: "sdeployments", Namespace: "default", Name: "web"}
	c := auditconv.ObjectKey{APIGroup: "apps", Resource: "deployments", Namespace: "defaultweb"}
	if edgeShard(a, 1<<16) == edgeShard(b, 1<<16) && edgeShard(a, 1<<16) == edgeShard(c, 1<<16) {
		t.Fatal("keys that differ only in where their parts end share a shard")
	}
}

// The events of the recorded scenarios, their objects renamed pass after pass as a cluster's
// new objects are, spread evenly over 24 shards: the busiest shard holds at most 10 % more than
// its share. A shard that gets more gives its partition more to do, and after an outage that
// partition drains last. With FNV-1a alone, whose low bits follow the names' last characters,
// the busiest held 1.16 times its share here, in a pattern of residues, and a replica caught up
// after an outage at 0.59 times the rate of one message per object (docs/performance.md).
func TestEdgeShardsSpreadRealObjects(t *testing.T) {
	var keys []auditconv.ObjectKey
	for _, body := range recordedBodies(t) {
		raws, err := auditconv.ScanEventList(body, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range raws {
			keys = append(keys, r.Key)
		}
	}
	const shards, passes = 24, 2000
	load := make([]int, shards)
	for pass := range passes {
		for _, k := range keys {
			if k.Name != "" {
				k.Name = fmt.Sprintf("%s-%05x", k.Name, pass)
			}
			load[edgeShard(k, shards)]++
		}
	}
	mean := float64(len(keys)*passes) / shards
	if busiest := float64(slices.Max(load)); busiest > 1.1*mean {
		t.Fatalf("the busiest of %d shards holds %.2f times its share: %v", shards, busiest/mean, load)
	}
}

// In a traces and a logs pipeline at once, one receiver answers each request for both: 200
// only when both outputs took the batch.
func TestOneReceiverFeedsTracesAndLogs(t *testing.T) {
	logs := new(refusingLogs)
	traces := &switchConsumer{}
	url := startEdge(t, logs, traces, nil)
	body := []byte(eventList("a", "b"))
	if code := postRaw(t, url+"/audit", body); code != http.StatusOK || logs.LogRecordCount() != 2 || traces.spans() != 2 {
		t.Fatalf("200 with 2 records and 2 spans, got %d, %d, %d", code, logs.LogRecordCount(), traces.spans())
	}
	traces.refuse(errors.New("busy"))
	if code := postRaw(t, url+"/audit", body); code != http.StatusServiceUnavailable {
		t.Fatalf("traces refused: %d, want 503", code)
	}
	traces.refuse(nil)
	logs.err = consumererror.NewPermanent(errors.New("too large"))
	if code := postRaw(t, url+"/audit", body); code != http.StatusInternalServerError || traces.spans() != 2 {
		t.Fatalf("logs refused permanently: %d with %d spans, want 500 and no conversion", code, traces.spans())
	}
	logs.err = errors.New("kafka down")
	if code := postRaw(t, url+"/audit", body); code != http.StatusServiceUnavailable {
		t.Fatalf("logs refused: %d, want 503", code)
	}
	if code := postRaw(t, url+"/audit", []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{]}`)); code != http.StatusBadRequest {
		t.Fatalf("malformed: %d, want 400", code)
	}
}

// The edge output's own refusals: a batch of more events than max_events_per_request, and one
// whose records alone would pass max_in_flight_bytes, are 413s, counted by reason, and reach no
// consumer.
func TestEdgeOutputRefusesWhatPassesItsBounds(t *testing.T) {
	sink := new(consumertest.LogsSink)
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	set := receivertest.NewNopSettings(metadata.Type)
	set.TelemetrySettings = tel.NewTelemetrySettings()
	cfg := createDefaultConfig().(*Config)
	cfg.ServerConfig.NetAddr.Endpoint = "127.0.0.1:0"
	cfg.Cluster = "c1"
	cfg.MaxEventsPerRequest = 2
	cfg.MaxInFlightBytes = 64 << 10
	r, err := newAuditReceiver(set, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.edge = sink
	if err := r.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Shutdown(context.Background()) })
	url := "http://" + r.listenAddr().String() + "/audit"
	if code := postRaw(t, url, []byte(eventList("a", "b", "c"))); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("3 events past max_events_per_request 2: %d, want 413", code)
	}
	// A body of 36 KB fits max_in_flight_bytes (64 KiB); with its records' copy, 72 KB, it does
	// not, alone.
	big := strings.Repeat("x", 36<<10)
	body := `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{"auditID":"` + big + `"}]}`
	if code := postRaw(t, url, []byte(body)); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("records past max_in_flight_bytes alone: %d, want 413", code)
	}
	for _, reason := range []string{reasonTooManyEvents, reasonTooLarge} {
		if n := auditconvtest.MetricSum(t, tel, "otelcol_k8s_audit_rejected_requests", reason); n != 1 {
			t.Errorf("rejected_requests{reason=%s} = %d, want 1", reason, n)
		}
	}
	if sink.LogRecordCount() != 0 {
		t.Fatalf("%d records reached the consumer", sink.LogRecordCount())
	}
}

// The audit log files feed spans only: a receiver with files and no traces output does not
// start, and says why.
func TestFilesWithOnlyTheEdgeOutputDoNotStart(t *testing.T) {
	f := NewFactory()
	cfg := f.CreateDefaultConfig().(*Config)
	cfg.ServerConfig.NetAddr.Endpoint = ""
	cfg.Cluster = "c1"
	cfg.Files = []string{filepath.Join(t.TempDir(), "audit.log")}
	r, err := f.CreateLogs(context.Background(), receivertest.NewNopSettings(metadata.Type), cfg, new(consumertest.LogsSink))
	if err != nil {
		t.Fatal(err)
	}
	err = r.Start(context.Background(), componenttest.NewNopHost())
	if err == nil || !strings.Contains(err.Error(), "traces output only") {
		t.Fatalf("Start = %v", err)
	}
	_ = r.Shutdown(context.Background())
}

// refusingLogs is a LogsSink that refuses with err when set.
type refusingLogs struct {
	consumertest.LogsSink
	err error
}

func (c *refusingLogs) ConsumeLogs(ctx context.Context, ld plog.Logs) error {
	if c.err != nil {
		return c.err
	}
	return c.LogsSink.ConsumeLogs(ctx, ld)
}
