package k8sauditreceiver

import (
	"fmt"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/receiver/k8sauditreceiver/internal/metadatatest"
)

// userContext is a valid W3C traceparent.
const userContext = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// The counts of malformed contexts reach otelcol_k8s_audit_trace_context_invalid itself, one data
// point per reason, through the receiver's webhook as a collector runs it.
func TestTraceContextInvalidMetric(t *testing.T) {
	env := startWebhook(t, nil)
	create := func(id, value string) string {
		return fmt.Sprintf(`{"level":"RequestResponse","auditID":%q,"stage":"ResponseComplete","requestURI":"/apis/apps/v1/namespaces/default/deployments","verb":"create",
"user":{"username":"ci"},"objectRef":{"resource":"deployments","namespace":"default","name":"demo","apiGroup":"apps","apiVersion":"v1"},"responseStatus":{"code":201},
"responseObject":%s,"requestReceivedTimestamp":"2026-11-21T10:45:54.106207Z","stageTimestamp":"2026-11-21T10:45:54.109001Z"}`,
			id, `{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"demo","namespace":"default","uid":"d-1","resourceVersion":"1","annotations":{"`+model.AnnotationTraceparent+`":"`+value+`"}},"spec":{"replicas":2}}`)
	}
	post := func(items ...string) {
		t.Helper()
		if code := postItems(t, env.url, items...); code != http.StatusOK {
			t.Fatalf("status = %d", code)
		}
	}
	post(create("m1", userContext[:40]), create("m2", "ff"+userContext[2:]), create("ok", userContext))
	post(create("m3", userContext[:20]))
	if n := env.next.spans(); n != 4 {
		t.Fatalf("spans = %d: a malformed context costs the event nothing", n)
	}
	metadatatest.AssertEqualK8sAuditTraceContextInvalid(t, env.tel, []metricdata.DataPoint[int64]{
		{Value: 2, Attributes: attribute.NewSet(attribute.String("reason", model.TraceparentBadLength))},
		{Value: 1, Attributes: attribute.NewSet(attribute.String("reason", model.TraceparentBadVersion))},
	}, metricdatatest.IgnoreTimestamp(), metricdatatest.IgnoreExemplars()) // exemplars: the obsreport span of each request
}
