package k8sauditconnector

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/golden"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/connector/connectortest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/kubetrail/kubetrail/connector/k8sauditconnector/internal/metadata"
	"github.com/kubetrail/kubetrail/internal/auditconv"
	"github.com/kubetrail/kubetrail/internal/auditconv/auditconvtest"
	"github.com/kubetrail/kubetrail/internal/envelopetest"
)

// newTestConnector is a connector of the default configuration for cluster testbed, changed by
// mutate, feeding next, with its telemetry.
func newTestConnector(t *testing.T, next consumer.Traces, mutate func(*Config)) (*auditConnector, *componenttest.Telemetry) {
	t.Helper()
	cfg := createDefaultConfig().(*Config)
	cfg.Cluster = auditconvtest.Cluster
	if mutate != nil {
		mutate(cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	set := connectortest.NewNopSettings(metadata.Type)
	set.TelemetrySettings = tel.NewTelemetrySettings()
	c, err := newAuditConnector(set, cfg, next)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
	return c, tel
}

// logsOf is one ResourceLogs of records, each body set by its function.
func logsOf(bodies ...func(pcommon.Value)) plog.Logs {
	ld := plog.NewLogs()
	lrs := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords()
	for _, set := range bodies {
		set(lrs.AppendEmpty().Body())
	}
	return ld
}

func str(b []byte) func(pcommon.Value) { return func(v pcommon.Value) { v.SetStr(string(b)) } }

// asMap sets the body to the JSON object b as a map, as a receiver that parsed it would.
func asMap(t *testing.T, b []byte) func(pcommon.Value) {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return func(v pcommon.Value) {
		if err := v.SetEmptyMap().FromRaw(m); err != nil {
			t.Fatal(err)
		}
	}
}

// scenarioItems is every audit event of a scenario's webhook captures, in arrival order.
func scenarioItems(t *testing.T, scenario string) []json.RawMessage {
	t.Helper()
	var out []json.RawMessage
	for _, body := range auditconvtest.FixtureBodies(t, scenario) {
		items, err := envelopetest.Items(body)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, items...)
	}
	return out
}

func spansOf(sink *consumertest.TracesSink) []ptrace.Span {
	var got []ptrace.Span
	for _, td := range sink.AllTraces() {
		got = append(got, auditconvtest.AllSpans(td)...)
	}
	return got
}

// edgeForm is a scenario's events as k8s_audit's edge output hands them on, each record's body
// set by body from the event's bytes.
func edgeForm(body func(v pcommon.Value, raw []byte)) func(t *testing.T, scenario string) []plog.Logs {
	return func(t *testing.T, scenario string) []plog.Logs {
		var out []plog.Logs
		for _, b := range auditconvtest.FixtureBodies(t, scenario) {
			raws, err := auditconv.ScanEventList(b, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			ld := plog.NewLogs()
			lrs := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords()
			for _, r := range raws {
				lr := lrs.AppendEmpty()
				lr.SetEventName(auditconv.RawEventName)
				body(lr.Body(), r.Raw)
			}
			out = append(out, ld)
		}
		return out
	}
}

// Every native form and the AKS envelope of the recorded captures give the very spans the
// webhook gave (the golden files): one conversion behind every door.
func TestEveryFormatGivesTheWebhookSpans(t *testing.T) {
	forms := map[string]func(t *testing.T, scenario string) []plog.Logs{
		"native EventList per webhook batch, string body": func(t *testing.T, scenario string) []plog.Logs {
			var out []plog.Logs
			for _, body := range auditconvtest.FixtureBodies(t, scenario) {
				out = append(out, logsOf(str(body)))
			}
			return out
		},
		"native Event per record, map body (CloudWatch, Kafka, filelog parsed)": func(t *testing.T, scenario string) []plog.Logs {
			var bodies []func(pcommon.Value)
			for _, item := range scenarioItems(t, scenario) {
				bodies = append(bodies, asMap(t, item))
			}
			return []plog.Logs{logsOf(bodies...)}
		},
		"k8s_audit's edge output: each event as an EventList held it, string body (Kafka edge)": edgeForm(func(v pcommon.Value, raw []byte) {
			v.SetStr(string(raw))
		}),
		"each event as an EventList held it, bytes body": edgeForm(func(v pcommon.Value, raw []byte) {
			v.SetEmptyBytes().FromRaw(raw)
		}),
		"aks records per Event Hub message": func(t *testing.T, scenario string) []plog.Logs {
			var out []plog.Logs
			for _, body := range auditconvtest.FixtureBodies(t, scenario) {
				items, err := envelopetest.Items(body)
				if err != nil {
					t.Fatal(err)
				}
				msg, err := envelopetest.AKS(auditconvtest.Cluster, items)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, logsOf(str(msg)))
			}
			return out
		},
	}
	for name, form := range forms {
		for _, scenario := range auditconvtest.Scenarios(t) {
			t.Run(name+"/"+scenario, func(t *testing.T) {
				sink := new(consumertest.TracesSink)
				c, tel := newTestConnector(t, sink, nil)
				for _, ld := range form(t, scenario) {
					if err := c.ConsumeLogs(context.Background(), ld); err != nil {
						t.Fatal(err)
					}
				}
				auditconvtest.AssertGoldenSpans(t, scenario, spansOf(sink))
				if n := auditconvtest.MetricSum(t, tel, "otelcol_k8s_audit_dropped_events", ""); n != 0 {
					t.Fatalf("%d events dropped", n)
				}
			})
		}
	}
}

// A GKE entry carries less than the apiserver's event (README, "GKE"): the spans are the
// webhook's spans, one for one by span ID, with the same name, start, status and diffs, and
// without what GKE does not log.
func TestGKEEntriesGiveTheWebhookSpans(t *testing.T) {
	for _, scenario := range auditconvtest.Scenarios(t) {
		t.Run(scenario, func(t *testing.T) {
			sink := new(consumertest.TracesSink)
			c, _ := newTestConnector(t, sink, func(cfg *Config) { cfg.Format = formatAuto })
			var bodies []func(pcommon.Value)
			for _, item := range scenarioItems(t, scenario) {
				entry, err := envelopetest.GKE(auditconvtest.Cluster, item)
				if err != nil {
					continue // a non-resource request: GKE has no entry of that shape
				}
				bodies = append(bodies, str(entry))
			}
			if err := c.ConsumeLogs(context.Background(), logsOf(bodies...)); err != nil {
				t.Fatal(err)
			}
			eachWebhookSpan(t, scenario, spansOf(sink), func(s, w ptrace.Span) {
				switch {
				case s.Name() != w.Name():
					t.Errorf("span %s: name %q, the webhook's %q", s.SpanID(), s.Name(), w.Name())
				case s.StartTimestamp() != w.StartTimestamp():
					t.Errorf("span %q: starts %v, the webhook's %v", s.Name(), s.StartTimestamp(), w.StartTimestamp())
				case s.EndTimestamp() != s.StartTimestamp():
					t.Errorf("span %q: GKE logs one timestamp, so no duration; got %v", s.Name(), s.EndTimestamp().AsTime().Sub(s.StartTimestamp().AsTime()))
				case s.Status().Code() != w.Status().Code():
					t.Errorf("span %q: status %v, the webhook's %v", s.Name(), s.Status().Code(), w.Status().Code())
				case !slices.Equal(diffPaths(s), diffPaths(w)):
					t.Errorf("span %q: diff %v, the webhook's %v", s.Name(), diffPaths(s), diffPaths(w))
				}
			})
		})
	}
}

// goldenByID is the webhook's spans of a scenario (its golden file), by span ID.
func goldenByID(t *testing.T, scenario string) map[pcommon.SpanID]ptrace.Span {
	t.Helper()
	want, err := golden.ReadTraces(auditconvtest.GoldenPath(scenario))
	if err != nil {
		t.Fatal(err)
	}
	byID := map[pcommon.SpanID]ptrace.Span{}
	for _, s := range auditconvtest.AllSpans(want) {
		byID[s.SpanID()] = s
	}
	return byID
}

// eachWebhookSpan checks that got are as many spans as the webhook made of scenario (its golden
// file), each one of them by span ID, and calls check with each and the webhook's.
func eachWebhookSpan(t *testing.T, scenario string, got []ptrace.Span, check func(s, w ptrace.Span)) {
	t.Helper()
	wantByID := goldenByID(t, scenario)
	if len(got) != len(wantByID) {
		t.Fatalf("%d spans, the webhook made %d", len(got), len(wantByID))
	}
	for _, s := range got {
		w, ok := wantByID[s.SpanID()]
		if !ok {
			t.Fatalf("span %q (%s) is not the webhook's", s.Name(), s.SpanID())
		}
		check(s, w)
	}
}

// checkWebhookSpans checks that got are the webhook's spans of scenario: each in the webhook's
// trace under its parent (a 404's aside: it names no object) and, with diffs, with the same
// diff paths.
func checkWebhookSpans(t *testing.T, scenario string, got []ptrace.Span, diffs bool) {
	t.Helper()
	eachWebhookSpan(t, scenario, got, func(s, w ptrace.Span) {
		switch {
		case strings.HasPrefix(w.Status().Message(), "NotFound"):
		case s.TraceID() != w.TraceID() || s.ParentSpanID() != w.ParentSpanID():
			t.Errorf("span %q: trace %s parent %s, the webhook's %s %s", s.Name(), s.TraceID(), s.ParentSpanID(), w.TraceID(), w.ParentSpanID())
		case diffs && !slices.Equal(diffPaths(s), diffPaths(w)):
			t.Errorf("span %q: diff %v, the webhook's %v", s.Name(), diffPaths(s), diffPaths(w))
		}
	})
}

func diffPaths(s ptrace.Span) []string {
	for _, e := range s.Events().All() {
		if v, ok := e.Attributes().Get("k8s.object.diff.paths"); ok {
			var paths []string
			for _, p := range v.Slice().All() {
				paths = append(paths, p.AsString())
			}
			slices.Sort(paths)
			return paths
		}
	}
	return nil
}

// refusingConsumer refuses the first refusals batches with a retryable error, then sinks.
type refusingConsumer struct {
	consumertest.TracesSink
	refusals int
}

func (r *refusingConsumer) ConsumeTraces(ctx context.Context, td ptrace.Traces) error {
	if r.refusals > 0 {
		r.refusals--
		return errors.New("exporter queue is full")
	}
	return r.TracesSink.ConsumeTraces(ctx, td)
}

// A refusal downstream goes back to the receiver that fed the connector (so Kafka does not
// commit and Pub/Sub does not ack), nothing is remembered, and the redelivery is converted;
// a redelivery after acceptance is no second span.
func TestRedeliveryIsOneSpan(t *testing.T) {
	next := &refusingConsumer{refusals: 1}
	c, tel := newTestConnector(t, next, nil)
	body := []byte(auditconvtest.EventList("r1", "r2", "r3"))
	if err := c.ConsumeLogs(context.Background(), logsOf(str(body))); err == nil {
		t.Fatal("the refusal must reach the caller")
	}
	for range 3 {
		if err := c.ConsumeLogs(context.Background(), logsOf(str(body), str(body))); err != nil {
			t.Fatal(err)
		}
	}
	if n := next.SpanCount(); n != 3 {
		t.Fatalf("%d spans from three events redelivered four times", n)
	}
	if n := auditconvtest.MetricSum(t, tel, "otelcol_k8s_audit_duplicate_events", ""); n != 3+6+6 {
		t.Fatalf("duplicates counted %d, want 15 (3 in the accepted batch, 6 in each later one)", n)
	}
	if c.dedup.len() != 3 {
		t.Fatalf("%d audit IDs remembered, want 3", c.dedup.len())
	}
}

// Log pipelines deliver late, out of order and twice: a capture shuffled within 60 s and
// with a fifth of its events delivered again, in batches of seven, still gives each audited
// write exactly one span, in the webhook's trace, under the webhook's parent, in its window.
// The exception, documented in the README: a request answered 404 names no object, and joins
// the object that last held its name in arrival order, which a shuffle can change.
func TestShuffledCaptureWithDuplicates(t *testing.T) {
	for _, scenario := range auditconvtest.Scenarios(t) {
		t.Run(scenario, func(t *testing.T) {
			stream, err := envelopetest.Shuffled(scenarioItems(t, scenario), 60*time.Second, 5, 1)
			if err != nil {
				t.Fatal(err)
			}
			sink := new(consumertest.TracesSink)
			c, _ := newTestConnector(t, sink, nil)
			for start := 0; start < len(stream); start += 7 {
				var bodies []func(pcommon.Value)
				for _, raw := range stream[start:min(start+7, len(stream))] {
					bodies = append(bodies, str(raw))
				}
				if err := c.ConsumeLogs(context.Background(), logsOf(bodies...)); err != nil {
					t.Fatal(err)
				}
			}
			checkWebhookSpans(t, scenario, spansOf(sink), false)
		})
	}
}

// An EventList's item (no kind, no apiVersion) is an audit event only where the record says so
// (the event name k8s_audit's edge output writes): elsewhere it is a record of no known shape.
func TestAnItemIsAnEventOnlyWhenTheRecordSaysSo(t *testing.T) {
	raws, err := auditconv.ScanEventList(auditconvtest.FixtureBodies(t, "deployment")[0], 0, nil)
	if err != nil || len(raws) == 0 {
		t.Fatal(err)
	}
	for _, named := range []bool{true, false} {
		sink := new(consumertest.TracesSink)
		c, tel := newTestConnector(t, sink, nil)
		ld := plog.NewLogs()
		lr := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
		if named {
			lr.SetEventName(auditconv.RawEventName)
		}
		lr.Body().SetStr(string(raws[0].Raw))
		if err := c.ConsumeLogs(context.Background(), ld); err != nil {
			t.Fatal(err)
		}
		unknown := auditconvtest.MetricSum(t, tel, "otelcol_k8s_audit_dropped_events", "unknown_format")
		if named != (unknown == 0) {
			t.Fatalf("event name set %v: %d dropped as unknown_format", named, unknown)
		}
	}
}

// Every measurement the connector makes says input=connector: its metrics share their names with
// the k8s_audit receiver's, and in one collector with both the Prometheus endpoint would
// otherwise collect the same series twice and fail every scrape. The recorded capture, a
// redelivery and a record of no known shape exercise the conversion's instruments and the
// connector's own.
func TestEveryMeasurementSaysConnector(t *testing.T) {
	c, tel := newTestConnector(t, consumertest.NewNop(), nil)
	bodies := auditconvtest.FixtureBodies(t, "deployment")
	for _, b := range append(bodies, bodies[0]) {
		if err := c.ConsumeLogs(context.Background(), logsOf(str(b))); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.ConsumeLogs(context.Background(), logsOf(str([]byte("not an audit event")))); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := tel.Reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			for _, attrs := range dataPointAttributes(t, m) {
				seen[m.Name]++
				if v, ok := attrs.Value("input"); !ok || v.AsString() != "connector" {
					t.Errorf("%s: a data point without input=connector: %v", m.Name, attrs.ToSlice())
				}
			}
		}
	}
	// The instruments a capture, a duplicate and a bad record must have touched.
	for _, name := range []string{"otelcol_k8s_audit_log_records", "otelcol_k8s_audit_dropped_events",
		"otelcol_k8s_audit_duplicate_events", "otelcol_k8s_audit_in_flight_bytes", "otelcol_k8s_audit_diff_cache_objects",
		"otelcol_k8s_audit_dedup_bytes", "otelcol_k8s_audit_receive_lag"} {
		if seen[name] == 0 {
			t.Errorf("%s: no data point (have %v)", name, seen)
		}
	}
}

// dataPointAttributes are the attribute sets of a metric's data points.
func dataPointAttributes(t *testing.T, m metricdata.Metrics) []attribute.Set {
	t.Helper()
	var out []attribute.Set
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, dp := range d.DataPoints {
			out = append(out, dp.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, dp := range d.DataPoints {
			out = append(out, dp.Attributes)
		}
	default:
		t.Fatalf("%s: %T", m.Name, m.Data)
	}
	return out
}
