package k8sauditconnector

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/kubetrail/kubetrail/internal/auditconv/auditconvtest"
	"github.com/kubetrail/kubetrail/internal/model"
)

func confmapOf(m map[string]any) *confmap.Conf { return confmap.NewFromStringMap(m) }

func TestClusterOfProviderValues(t *testing.T) {
	for in, want := range map[string]string{
		"/aws/eks/prod-eu/cluster": "prod-eu",
		"/SUBSCRIPTIONS/0000/RESOURCEGROUPS/RG/PROVIDERS/MICROSOFT.CONTAINERSERVICE/MANAGEDCLUSTERS/aks-1": "aks-1",
		"gke-prod": "gke-prod",
	} {
		if got := clusterOf(in); got != want {
			t.Errorf("clusterOf(%q) = %q, want %q", in, got, want)
		}
	}
}

// The cluster comes from cluster_attribute on the record, then on its resource (a slice such
// as the awsfirehose receiver's aws.log.group.names takes its first value), then from the
// configured cluster; a value that is no valid cluster name drops the record, counted.
func TestClusterFromAttributes(t *testing.T) {
	sink := new(consumertest.TracesSink)
	c, tel := newTestConnector(t, sink, func(cfg *Config) {
		cfg.ClusterAttribute = "aws.log.group.names"
		cfg.Cluster = "fallback"
	})
	ld := plog.NewLogs()
	add := func(resGroup, recGroup any, id string) {
		rl := ld.ResourceLogs().AppendEmpty()
		if resGroup != nil {
			_ = rl.Resource().Attributes().FromRaw(map[string]any{"aws.log.group.names": resGroup})
		}
		lr := rl.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
		if recGroup != nil {
			_ = lr.Attributes().FromRaw(map[string]any{"aws.log.group.names": recGroup})
		}
		lr.Body().SetStr(auditconvtest.EventList(id))
	}
	add([]any{"/aws/eks/from-resource/cluster"}, nil, "a1")
	add("/aws/eks/from-resource/cluster", "/aws/eks/from-record/cluster", "a2")
	add(nil, nil, "a3")
	add(nil, "/aws/eks/not a name/cluster", "a4")
	if err := c.ConsumeLogs(context.Background(), ld); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, td := range sink.AllTraces() {
		for _, rs := range td.ResourceSpans().All() {
			cluster, _ := rs.Resource().Attributes().Get(model.AttrClusterName)
			for _, ss := range rs.ScopeSpans().All() {
				for _, s := range ss.Spans().All() {
					id, _ := s.Attributes().Get(model.AttrAuditID)
					got[id.Str()] = cluster.Str()
				}
			}
		}
	}
	want := map[string]string{"a1": "from-resource", "a2": "from-record", "a3": "fallback"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("clusters %v, want %v", got, want)
	}
	if n := auditconvtest.MetricSum(t, tel, "otelcol_k8s_audit_dropped_events", reasonNoCluster); n != 1 {
		t.Fatalf("no_cluster drops = %d, want 1", n)
	}
}

// A record of no known format, or of a known one that cannot be read, is counted by reason and
// the rest of the batch goes on.
func TestUnreadableRecordsAreCountedAlone(t *testing.T) {
	sink := new(consumertest.TracesSink)
	c, tel := newTestConnector(t, sink, nil)
	ld := logsOf(
		func(v pcommon.Value) { v.SetStr("level=info msg=hello") },
		func(v pcommon.Value) { v.SetStr(`{"kind":"Pod","apiVersion":"v1"}`) },
		func(v pcommon.Value) { v.SetInt(7) },
		func(v pcommon.Value) { v.SetStr(`{"category":"kube-audit","properties":{"log":"{not json"}}`) },
		func(v pcommon.Value) {
			v.SetStr(`{"protoPayload":{"serviceName":"k8s.io","methodName":"io.k8s.core.v1.pods.create","resourceName":"pods"}}`)
		},
		str([]byte(auditconvtest.EventList("ok"))),
	)
	if err := c.ConsumeLogs(context.Background(), ld); err != nil {
		t.Fatal(err)
	}
	if sink.SpanCount() != 1 {
		t.Fatalf("%d spans, want the one good record's", sink.SpanCount())
	}
	for reason, want := range map[string]int64{reasonUnknownFormat: 3, reasonMalformedRecord: 2} {
		if n := auditconvtest.MetricSum(t, tel, "otelcol_k8s_audit_dropped_events", reason); n != want {
			t.Errorf("dropped %s = %d, want %d", reason, n, want)
		}
	}
}

// A record of more events than maxEventsPerRecord is refused at the event past the bound, as a
// malformed record, and costs no gigabyte; the batch goes on.
func TestARecordOfTooManyEventsIsRefused(t *testing.T) {
	sink := new(consumertest.TracesSink)
	c, tel := newTestConnector(t, sink, nil)
	huge := `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` + strings.Repeat("{},", 1_000_000) + `{}]}`
	if err := c.ConsumeLogs(context.Background(), logsOf(str([]byte(huge)), str([]byte(auditconvtest.EventList("ok"))))); err != nil {
		t.Fatal(err)
	}
	if sink.SpanCount() != 1 {
		t.Fatalf("%d spans, want the good record's one", sink.SpanCount())
	}
	if n := auditconvtest.MetricSum(t, tel, "otelcol_k8s_audit_dropped_events", reasonMalformedRecord); n != 1 {
		t.Fatalf("malformed_record drops = %d, want 1", n)
	}
}

// The request of issue 30: one gzipped OTLP request of 6.5 KB held 200 records, each an
// EventList of 10,000 `{}`, and cost +2.97 GB decoded. Now one call holds at most
// max_in_flight_bytes decoded: the records that fit become spans, the rest are refused for good
// (request_too_large), and the call allocates a small multiple of the bound, not gigabytes.
func TestACallHoldsAtMostMaxInFlightBytes(t *testing.T) {
	const bound = 4 << 20
	sink := new(consumertest.TracesSink)
	c, tel := newTestConnector(t, sink, func(cfg *Config) { cfg.MaxInFlightBytes = bound })
	empties := `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` + strings.Repeat("{},", 9_999) + `{}]}`
	bodies := []func(pcommon.Value){str([]byte(auditconvtest.EventList("first")))}
	for range 200 {
		bodies = append(bodies, str([]byte(empties)))
	}
	ld := logsOf(bodies...)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	err := c.ConsumeLogs(context.Background(), ld)
	runtime.ReadMemStats(&after)
	if err == nil || !consumererror.IsPermanent(err) {
		t.Fatalf("ConsumeLogs: %v, want a permanent refusal", err)
	}
	if sink.SpanCount() != 1 {
		t.Fatalf("%d spans, want the first record's one", sink.SpanCount())
	}
	if n := auditconvtest.MetricSum(t, tel, "otelcol_k8s_audit_dropped_events", reasonRequestTooLarge); n != 200 {
		t.Fatalf("request_too_large = %d, want the 200 records past the bound", n)
	}
	// Allocated in all (an upper bound of the peak): the unbounded call allocated 4 GB here.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16*bound {
		t.Fatalf("the call allocated %d MiB, over 16 times max_in_flight_bytes", alloc>>20)
	}
	if c.inFlight.InUse() != 0 {
		t.Fatalf("%d bytes still held after the call", c.inFlight.InUse())
	}
}

// A call that finds max_in_flight_bytes held by other calls is refused whole with a retryable
// error, counted, and goes through once they are done.
func TestACallFindingTheBudgetHeldIsRetried(t *testing.T) {
	sink := new(consumertest.TracesSink)
	c, tel := newTestConnector(t, sink, nil)
	others := c.inFlight.Max() - 1024
	if !c.inFlight.Acquire(others) {
		t.Fatal("could not hold the budget")
	}
	ld := logsOf(str([]byte(auditconvtest.EventList("a", "b"))))
	err := c.ConsumeLogs(context.Background(), ld)
	if err == nil || consumererror.IsPermanent(err) {
		t.Fatalf("ConsumeLogs while the budget is held: %v, want a retryable error", err)
	}
	if sink.SpanCount() != 0 || auditconvtest.MetricSum(t, tel, "otelcol_k8s_audit_in_flight_refused", "") != 1 {
		t.Fatalf("%d spans handed on, refusals counted %d; want none and 1", sink.SpanCount(), auditconvtest.MetricSum(t, tel, "otelcol_k8s_audit_in_flight_refused", ""))
	}
	c.inFlight.Release(others)
	if err := c.ConsumeLogs(context.Background(), ld); err != nil || sink.SpanCount() != 2 {
		t.Fatalf("the retry: %v, %d spans; want both events' spans", err, sink.SpanCount())
	}
}
