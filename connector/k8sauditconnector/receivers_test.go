package k8sauditconnector

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/kubetrail/kubetrail/internal/auditconv"
	"github.com/kubetrail/kubetrail/internal/auditconv/auditconvtest"
	"github.com/kubetrail/kubetrail/internal/envelopetest"
)

// These tests feed the connector the records the stock contrib receivers make of the
// providers' envelopes (internal/envelopetest/receivers.go), built from every recorded capture.

// aksMessages is a scenario's capture as AKS Event Hub messages, one per webhook batch, with
// the resourceId naming cluster.
func aksMessages(t *testing.T, scenario, cluster string) [][]byte {
	t.Helper()
	var out [][]byte
	for _, body := range auditconvtest.FixtureBodies(t, scenario) {
		items, err := envelopetest.Items(body)
		if err != nil {
			t.Fatal(err)
		}
		msg, err := envelopetest.AKS(cluster, items)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, msg)
	}
	return out
}

// Every shape that carries the whole audit event gives the webhook's spans (the golden files).
func TestEveryReceiverShapeGivesTheWebhookSpans(t *testing.T) {
	at := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	perMessage := func(shape func(msg []byte) (plog.Logs, error)) func(t *testing.T, scenario string) []plog.Logs {
		return func(t *testing.T, scenario string) []plog.Logs {
			var out []plog.Logs
			for _, msg := range aksMessages(t, scenario, strings.ToUpper(auditconvtest.Cluster)) {
				ld, err := shape(msg)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, ld)
			}
			return out
		}
	}
	perEvent := func(shape func(items []json.RawMessage) (plog.Logs, error)) func(t *testing.T, scenario string) []plog.Logs {
		return func(t *testing.T, scenario string) []plog.Logs {
			ld, err := shape(scenarioItems(t, scenario))
			if err != nil {
				t.Fatal(err)
			}
			return []plog.Logs{ld}
		}
	}
	messages := func(items []json.RawMessage) [][]byte {
		out := make([][]byte, len(items))
		for i, item := range items {
			out[i] = item
		}
		return out
	}
	shapes := map[string]func(t *testing.T, scenario string) []plog.Logs{
		"azure_event_hub format azure (its default)": perMessage(envelopetest.EventHubAzure),
		"azure_event_hub format azure, properties.log an object": perMessage(func(msg []byte) (plog.Logs, error) {
			obj, err := envelopetest.AKSLogObjects(msg)
			if err != nil {
				return plog.Logs{}, err
			}
			return envelopetest.EventHubAzure(obj)
		}),
		"azure_event_hub format azure, apply_semantic_conventions": perMessage(func(msg []byte) (plog.Logs, error) {
			return envelopetest.EventHubAzureSemconv(msg, at)
		}),
		"azure_event_hub format raw": perMessage(func(msg []byte) (plog.Logs, error) { return envelopetest.EventHubRaw(msg, at), nil }),
		"awscloudwatch": perEvent(func(items []json.RawMessage) (plog.Logs, error) {
			return envelopetest.CloudWatch(auditconvtest.Cluster, items), nil
		}),
		"filelog":                  perEvent(func(items []json.RawMessage) (plog.Logs, error) { return envelopetest.Filelog(items, false) }),
		"filelog with json_parser": perEvent(func(items []json.RawMessage) (plog.Logs, error) { return envelopetest.Filelog(items, true) }),
		"kafka raw":                perEvent(func(items []json.RawMessage) (plog.Logs, error) { return envelopetest.Kafka("raw", messages(items)) }),
		"kafka text":               perEvent(func(items []json.RawMessage) (plog.Logs, error) { return envelopetest.Kafka("text", messages(items)) }),
		"kafka json":               perEvent(func(items []json.RawMessage) (plog.Logs, error) { return envelopetest.Kafka("json", messages(items)) }),
	}
	for name, shape := range shapes {
		for _, scenario := range auditconvtest.Scenarios(t) {
			t.Run(name+"/"+scenario, func(t *testing.T) {
				sink := new(consumertest.TracesSink)
				c, tel := newTestConnector(t, sink, nil)
				for _, ld := range shape(t, scenario) {
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

// spanAt is a span with its resource's attributes.
type spanAt struct {
	res  pcommon.Map
	span ptrace.Span
}

func spansByID(sink *consumertest.TracesSink) map[pcommon.SpanID]spanAt {
	out := map[pcommon.SpanID]spanAt{}
	for _, td := range sink.AllTraces() {
		for _, rs := range td.ResourceSpans().All() {
			for _, ss := range rs.ScopeSpans().All() {
				for _, s := range ss.Spans().All() {
					out[s.SpanID()] = spanAt{rs.Resource().Attributes(), s}
				}
			}
		}
	}
	return out
}

// gkeNotCarried are the attributes a span from the googlecloudlogentry extension's records
// may lack, because the extension drops the AuditLog's request and response: what the
// conversion reads from the bodies (README, "What each receiver delivers"); k8s.audit.level is
// there, Metadata, as no body was logged.
var gkeNotCarried = []string{
	"k8s.object.uid", "k8s.pod.uid", "k8s.deployment.uid", "k8s.replicaset.uid", "k8s.job.uid",
	"k8s.namespace.uid", "k8s.node.uid", "k8s.object.resource_version", "k8s.object.generation",
	"k8s.object.observed_generation", "k8s.object.revision", "k8s.object.pod_template_hash",
	"k8s.object.controller_revision_hash", "k8s.object.owner.kind", "k8s.object.owner.name",
	"k8s.object.owner.uid", "k8s.object.owner.api_version", "k8s.pod.node.name", "k8s.object.phase",
	"k8s.object.conditions", "k8s.object.ready", "k8s.audit.level", "k8s.object.new_resource_version",
	"k8s.object.owner.none", "k8s.node.name", "k8s.cronjob.uid",
	// Why a write whose response carried the object has no diff: without the response, no body.
	"k8s.object.diff.skipped",
	// A create with generateName (a ReplicaSet's or a Job's Pods) is named by the response only.
	"k8s.object.name", "k8s.pod.name",
}

// The same GKE entries give the same spans whichever way they arrive: as the LogEntry's text
// (the text encoding, as raw_text did), as cloud_logging's map of the payload with the entry's
// fields in attributes (identical spans), and as the googlecloudlogentry extension's attributes
// (the same span IDs, names, times, status, user, client and admission attributes, less only
// what the dropped bodies carried).
func TestGKEShapesGiveTheSameSpans(t *testing.T) {
	at := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	for _, scenario := range auditconvtest.Scenarios(t) {
		t.Run(scenario, func(t *testing.T) {
			var entries [][]byte
			for _, item := range scenarioItems(t, scenario) {
				if entry, err := envelopetest.GKE(auditconvtest.Cluster, item); err == nil {
					entries = append(entries, entry)
				}
			}
			run := func(lds ...plog.Logs) map[pcommon.SpanID]spanAt {
				sink := new(consumertest.TracesSink)
				c, tel := newTestConnector(t, sink, nil)
				for _, ld := range lds {
					if err := c.ConsumeLogs(context.Background(), ld); err != nil {
						t.Fatal(err)
					}
				}
				if n := auditconvtest.MetricSum(t, tel, "otelcol_k8s_audit_dropped_events", ""); n != 0 {
					t.Fatalf("%d events dropped", n)
				}
				return spansByID(sink)
			}
			text := run(envelopetest.PubSubText(entries, at))
			if len(text) != len(goldenByID(t, scenario)) {
				t.Fatalf("text: %d spans, the webhook made %d", len(text), len(goldenByID(t, scenario)))
			}
			var legacy, ext []plog.Logs
			for _, e := range entries {
				ld, err := envelopetest.PubSubCloudLogging(e)
				if err != nil {
					t.Fatal(err)
				}
				legacy = append(legacy, ld)
				if ld, err = envelopetest.LogEntryExtension(e); err != nil {
					t.Fatal(err)
				}
				ext = append(ext, ld)
			}
			compareSpans(t, "cloud_logging", text, run(legacy...), nil)
			compareSpans(t, "googlecloudlogentry_encoding", text, run(ext...), gkeNotCarried)
		})
	}
}

// compareSpans checks that got holds want's spans, by span ID, with the same name, times,
// status, events and resource and span attributes, but for the keys in missing, which got may
// lack (and then has no diff or snapshot events).
func compareSpans(t *testing.T, shape string, want, got map[pcommon.SpanID]spanAt, missing []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d spans, the text shape %d", shape, len(got), len(want))
	}
	for id, w := range want {
		g, ok := got[id]
		switch {
		case !ok:
			t.Fatalf("%s: no span %s (%q)", shape, id, w.span.Name())
		case g.span.Name() != w.span.Name() || g.span.StartTimestamp() != w.span.StartTimestamp() ||
			g.span.EndTimestamp() != w.span.EndTimestamp() || g.span.Status().Code() != w.span.Status().Code():
			t.Fatalf("%s: span %s is %q %v–%v %v, the text shape's %q %v–%v %v", shape, id,
				g.span.Name(), g.span.StartTimestamp(), g.span.EndTimestamp(), g.span.Status().Code(),
				w.span.Name(), w.span.StartTimestamp(), w.span.EndTimestamp(), w.span.Status().Code())
		}
		for what, pair := range map[string][2]pcommon.Map{"resource": {w.res, g.res}, "span": {w.span.Attributes(), g.span.Attributes()}} {
			if diff := attrDiff(pair[0], pair[1], missing); diff != "" {
				t.Errorf("%s: span %q (%s) %s attributes differ: %s", shape, w.span.Name(), id, what, diff)
			}
		}
		if missing == nil && !slices.Equal(eventNames(g.span), eventNames(w.span)) {
			t.Fatalf("%s: span %q events %v, the text shape's %v", shape, w.span.Name(), eventNames(g.span), eventNames(w.span))
		}
		if missing != nil && len(diffPaths(g.span)) != 0 {
			t.Fatalf("%s: span %q has a diff without bodies: %v", shape, w.span.Name(), diffPaths(g.span))
		}
	}
}

// attrDiff says how got differs from want, but for keys of missing that got lacks.
func attrDiff(want, got pcommon.Map, missing []string) string {
	var out []string
	for k, v := range want.All() {
		gv, ok := got.Get(k)
		switch {
		case slices.Contains(missing, k) && (!ok || k == "k8s.audit.level"):
		case !ok:
			out = append(out, "no "+k)
		case !gv.Equal(v):
			out = append(out, fmt.Sprintf("%s=%q, want %q", k, gv.AsString(), v.AsString()))
		}
	}
	for k := range got.All() {
		if _, ok := want.Get(k); !ok {
			out = append(out, "extra "+k)
		}
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

func eventNames(s ptrace.Span) []string {
	var out []string
	for _, e := range s.Events().All() {
		out = append(out, e.Name())
	}
	return out
}

// The extension's label keys come back as the audit annotations the conversion reads, in each
// of its spellings.
func TestAnnotationKeyOfExtensionLabels(t *testing.T) {
	for label, want := range map[string]string{
		"authorization.k8s.io/decision":                         "authorization.k8s.io/decision",
		"authorization.k8_s.io/reason":                          "authorization.k8s.io/reason",
		"pod_security.kubernetes.io/enforce_policy":             "pod-security.kubernetes.io/enforce-policy",
		"pod_security.kubernetes.io/audit_violations":           "pod-security.kubernetes.io/audit-violations",
		"mutation.webhook.admission.k8s.io/round_0index_1":      "mutation.webhook.admission.k8s.io/round_0_index_1",
		"mutation.webhook.admission.k8_s.io/round_2_index_10":   "mutation.webhook.admission.k8s.io/round_2_index_10",
		"patch.webhook.admission.k8s.io/round_1index_0":         "patch.webhook.admission.k8s.io/round_1_index_0",
		"validation.policy.admission.k8s.io/validation_failure": "validation.policy.admission.k8s.io/validation_failure",
		"apiserver.latency.k8s.io/mutating_webhook":             "apiserver.latency.k8s.io/mutating-webhook",
		"team": "team",
	} {
		if got := annotationKey(label); got != want {
			t.Errorf("annotationKey(%q) = %q, want %q", label, got, want)
		}
	}
	// The fixture builder and the reader agree on every annotation key of the captures.
	for _, key := range []string{"pod-security.kubernetes.io/enforce-policy", "mutation.webhook.admission.k8s.io/round_0_index_0", "authorization.k8s.io/decision"} {
		if got := annotationKey(envelopeSnake(key)); got != key {
			t.Errorf("%q: written %q, read back %q", key, envelopeSnake(key), got)
		}
	}
}

// envelopeSnake is the extension's spelling of a label key, as the fixture builder writes it.
func envelopeSnake(key string) string {
	ld, err := envelopetest.LogEntryExtension([]byte(`{"timestamp":"2026-11-27T00:00:00Z","labels":{"` + key + `":"v"},"protoPayload":{}}`))
	if err != nil {
		panic(err)
	}
	for k := range ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0).Attributes().All() {
		if label, ok := strings.CutPrefix(k, attrGCPLabelPrefix); ok {
			return label
		}
	}
	return ""
}

// A configured cluster wins over the one an envelope names; without one, an AKS resourceId's
// cluster is lower-cased (Azure writes it upper-case) so that it meets k8s_event_spans' name.
func TestConfiguredClusterWinsOverTheEnvelope(t *testing.T) {
	msg := aksMessages(t, "deployment", "PROD-EU-1")[0]
	for name, tc := range map[string]struct {
		mutate func(*Config)
		want   map[string]string // by shape
	}{
		"configured": {func(*Config) {}, map[string]string{"raw": auditconvtest.Cluster, "azure": auditconvtest.Cluster}},
		"envelope, attribute not on record": {
			func(c *Config) { c.Cluster, c.ClusterAttribute = "", "k8s.cluster.name" },
			map[string]string{"raw": "prod-eu-1", "azure": "prod-eu-1"},
		},
		// format raw has no attributes: the configured cluster is next.
		"attribute asked for": {
			func(c *Config) { c.ClusterAttribute = "azure.resource.id" },
			map[string]string{"raw": auditconvtest.Cluster, "azure": "prod-eu-1"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			for _, shape := range []string{"raw", "azure"} {
				sink := new(consumertest.TracesSink)
				c, _ := newTestConnector(t, sink, tc.mutate)
				ld := envelopetest.EventHubRaw(msg, time.Now())
				if shape == "azure" {
					var err error
					if ld, err = envelopetest.EventHubAzure(msg); err != nil {
						t.Fatal(err)
					}
				}
				if err := c.ConsumeLogs(context.Background(), ld); err != nil {
					t.Fatal(err)
				}
				clusters := map[string]bool{}
				for _, td := range sink.AllTraces() {
					for _, rs := range td.ResourceSpans().All() {
						v, _ := rs.Resource().Attributes().Get("k8s.cluster.name")
						clusters[v.Str()] = true
					}
				}
				if len(clusters) != 1 || !clusters[tc.want[shape]] {
					t.Fatalf("%s: clusters %v, want %q", shape, clusters, tc.want[shape])
				}
			}
		})
	}
}

// An event EKS cut at CloudWatch's 256 KiB is counted as truncated and logged with its
// auditID; a record of an unknown shape is logged once a minute with what it looked like.
func TestTruncatedAndUnknownShapesAreCountedAndNamed(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	sink := new(consumertest.TracesSink)
	c, tel := newTestConnector(t, sink, nil)
	c.logger, c.shapeLogger = zap.New(core), zap.New(core)
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	c.now = func() time.Time { return now }

	big := `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"RequestResponse","auditID":"9f2c0d8e-cut","stage":"ResponseComplete","verb":"update","requestObject":{"data":"` +
		strings.Repeat("x", 300<<10) + `"}}`
	cut := envelopetest.Truncated([]byte(big), 0)
	if len(cut) != 256*1024-26 || !strings.HasSuffix(string(cut), "[Truncated...]") {
		t.Fatalf("the fixture is not cut as EKS cuts: %d bytes", len(cut))
	}
	unknown := func() plog.Logs {
		ld := plog.NewLogs()
		rl := ld.ResourceLogs().AppendEmpty()
		rl.Resource().Attributes().PutStr("gcp.project", "p")
		lr := rl.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
		lr.Attributes().PutStr("gcp.audit.something", "x") // an empty body of no shape we read
		return ld
	}
	feed := func(ld plog.Logs) {
		if err := c.ConsumeLogs(context.Background(), ld); err != nil {
			t.Fatal(err)
		}
	}
	feed(logsOf(str(cut), str([]byte(auditconvtest.EventList("ok")))))
	for range 3 {
		feed(unknown())
	}
	now = now.Add(time.Minute)
	feed(unknown())

	if n := auditconvtest.MetricSum(t, tel, "otelcol_k8s_audit_dropped_events", reasonTruncated); n != 1 {
		t.Fatalf("truncated drops = %d, want 1", n)
	}
	if n := auditconvtest.MetricSum(t, tel, "otelcol_k8s_audit_dropped_events", reasonUnknownFormat); n != 4 {
		t.Fatalf("unknown_format drops = %d, want 4", n)
	}
	if sink.SpanCount() != 1 {
		t.Fatalf("%d spans, want the good record's one", sink.SpanCount())
	}
	trunc := logs.FilterField(zap.String("audit_id", "9f2c0d8e-cut")).Len()
	shapes := logs.FilterMessageSnippet("of a shape").All()
	if trunc != 1 || len(shapes) != 2 {
		t.Fatalf("%d truncated lines naming the auditID (want 1), %d shape lines (want 2, one a minute)", trunc, len(shapes))
	}
	if msg := fmt.Sprint(shapes[0].ContextMap()["error"]); !strings.Contains(msg, "body Empty") || !strings.Contains(msg, "gcp.audit.something") || !strings.Contains(msg, "gcp.project") {
		t.Fatalf("the shape line does not say what the record looked like: %s", msg)
	}
}

// GKE resource names map onto the objectRef the apiserver would log; non-resource requests are
// filtered as the webhook files them; names that no apiserver routes are malformed.
func TestGKEResourceNames(t *testing.T) {
	for name, want := range map[string]string{
		"core/v1/namespaces/team-a/finalize":                       "/namespaces/team-a/finalize",
		"core/v1/namespaces/team-a/status":                         "/namespaces/team-a/status",
		"core/v1/namespaces/team-a":                                "/namespaces/team-a/",
		"core/v1/namespaces/team-a/pods":                           "team-a/pods//",
		"core/v1/nodes/n1/status":                                  "/nodes/n1/status",
		"core/v1/namespaces/default/pods/web-0/exec":               "default/pods/web-0/exec",
		"core/v1/namespaces/default/pods/web-0/portforward":        "default/pods/web-0/portforward",
		"core/v1/nodes/n1/proxy/metrics/cadvisor":                  "/nodes/n1/proxy",
		"core/v1/namespaces/default/services/web:80/proxy/healthz": "default/services/web:80/proxy",
		"apps/v1/namespaces/default/deployments/web/scale":         "default/deployments/web/scale",
	} {
		ref, err := refOfResourceName(name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got := ref.Namespace + "/" + ref.Resource + "/" + ref.Name + "/" + ref.Subresource; got != want {
			t.Errorf("%s: %s, want %s", name, got, want)
		}
	}
	for _, name := range []string{
		"core/v1/namespaces/../secrets/x", "core/v1/namespaces/a//secrets", "core/v1/Secrets/x",
		"core/v1/namespaces/a/secrets/./x", "core/v1/namespaces/a/pods/b/exec/extra", "core/v1", "",
	} {
		if ref, err := refOfResourceName(name); err == nil {
			t.Errorf("%q accepted as %+v", name, ref)
		}
	}

	sink := new(consumertest.TracesSink)
	c, tel := newTestConnector(t, sink, nil)
	entry := func(method, resource string) func(pcommon.Value) {
		return str(fmt.Appendf(nil, `{"operation":{"id":"op-%s"},"timestamp":"2026-11-27T00:00:00Z","protoPayload":{"serviceName":"k8s.io","methodName":%q,"resourceName":%q}}`,
			strings.ReplaceAll(resource, "/", "-"), method, resource))
	}
	ld := logsOf(entry("io.k8s.get", "readyz"), entry("io.k8s.get", "api/v1"), entry("io.k8s.get", "../etc"),
		entry("io.k8s.core.v1.namespaces.finalize.update", "core/v1/namespaces/team-a/finalize"))
	if err := c.ConsumeLogs(context.Background(), ld); err != nil {
		t.Fatal(err)
	}
	if n := auditconvtest.MetricSum(t, tel, "otelcol_k8s_audit_filtered_events", "non_resource"); n != 2 {
		t.Errorf("non_resource filtered = %d, want 2", n)
	}
	if n := auditconvtest.MetricSum(t, tel, "otelcol_k8s_audit_dropped_events", reasonMalformedRecord); n != 1 {
		t.Errorf("malformed_record = %d, want 1 (the '..' path)", n)
	}
	spans := spansOf(sink)
	if len(spans) != 1 || spans[0].Name() != "update namespaces/finalize" {
		var names []string
		for _, s := range spans {
			names = append(names, s.Name())
		}
		t.Fatalf("spans %v, want one \"update namespaces/finalize\"", names)
	}
}

// An auditID over auditconv.MaxAuditIDBytes is no dedup key: a 17 MB one cannot flush the
// table, and its event is converted like any other.
func TestAnOversizedAuditIDIsNoDedupKey(t *testing.T) {
	sink := new(consumertest.TracesSink)
	c, tel := newTestConnector(t, sink, nil)
	long := strings.Repeat("a", auditconv.MaxAuditIDBytes+1)
	ld := logsOf(str([]byte(auditconvtest.EventList(long))), str([]byte(auditconvtest.EventList("short"))))
	for range 2 {
		if err := c.ConsumeLogs(context.Background(), ld); err != nil {
			t.Fatal(err)
		}
	}
	if n := auditconvtest.MetricSum(t, tel, "otelcol_k8s_audit_duplicate_events", ""); n != 1 {
		t.Fatalf("duplicates %d, want 1: the short ID's redelivery, not the long one's", n)
	}
	if sink.SpanCount() != 3 {
		t.Fatalf("%d spans, want 3 (the long ID's twice, the short one's once)", sink.SpanCount())
	}
}
