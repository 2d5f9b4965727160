package k8seventsreceiver

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubetrail/kubetrail/receiver/k8seventsreceiver/internal/metadata"
)

// t0 is the time of every test Event's first occurrence.
var t0 = time.Date(2026, 11, 21, 10, 0, 0, 123456000, time.UTC)

type evOpt func(*eventsv1.Event)

// testEvent is a Scheduled Event on Pod default/web-1, first occurrence at t0.
func testEvent(uid, rv string, opts ...evOpt) *eventsv1.Event {
	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web-1." + uid, Namespace: "default", UID: types.UID(uid), ResourceVersion: rv,
			Labels:        map[string]string{"noise": "dropped by strip"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-scheduler"}},
		},
		EventTime:           metav1.NewMicroTime(t0),
		Reason:              "Scheduled",
		Action:              "Binding",
		Type:                corev1.EventTypeNormal,
		Note:                "Successfully assigned default/web-1 to kwok-node-0",
		ReportingController: "default-scheduler",
		ReportingInstance:   "default-scheduler-host",
		Regarding:           corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: "default", Name: "web-1", UID: "pod-uid-1"},
	}
	for _, o := range opts {
		o(ev)
	}
	return ev
}

func withSeries(count int32, last time.Time) evOpt {
	return func(ev *eventsv1.Event) {
		ev.Series = &eventsv1.EventSeries{Count: count, LastObservedTime: metav1.NewMicroTime(last)}
	}
}

func withDeprecatedCount(count int32, first, last time.Time) evOpt {
	return func(ev *eventsv1.Event) {
		ev.EventTime = metav1.MicroTime{}
		ev.DeprecatedCount = count
		ev.DeprecatedFirstTimestamp = metav1.NewTime(first)
		ev.DeprecatedLastTimestamp = metav1.NewTime(last)
	}
}

func withNamespace(ns string) evOpt {
	return func(ev *eventsv1.Event) { ev.Namespace = ns; ev.Regarding.Namespace = ns }
}

func withWarning(reason string) evOpt {
	return func(ev *eventsv1.Event) { ev.Type = corev1.EventTypeWarning; ev.Reason = reason }
}

func withoutRegarding() evOpt {
	return func(ev *eventsv1.Event) { ev.Regarding = corev1.ObjectReference{} }
}

func withoutTimes() evOpt {
	return func(ev *eventsv1.Event) { ev.EventTime = metav1.MicroTime{} }
}

func withTime(at time.Time) evOpt {
	return func(ev *eventsv1.Event) { ev.EventTime = metav1.NewMicroTime(at) }
}

// telemetry is a TelemetryBuilder whose measurements a test can read back.
type telemetry struct {
	reader *sdkmetric.ManualReader
	tb     *metadata.TelemetryBuilder
	set    component.TelemetrySettings
}

func newTelemetry(t testing.TB) *telemetry {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	set := componenttest.NewNopTelemetrySettings()
	set.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	set.Logger = zap.NewNop()
	tb, err := metadata.NewTelemetryBuilder(set)
	if err != nil {
		t.Fatal(err)
	}
	return &telemetry{reader: reader, tb: tb, set: set}
}

// value sums the data points of the named counter, restricted to one reason when reason != "".
func (tm *telemetry) value(t *testing.T, name, reason string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tm.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			data, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				t.Fatalf("metric %s is %T, want an int64 sum", name, m.Data)
			}
			for _, dp := range data.DataPoints {
				if reason != "" {
					if v, ok := dp.Attributes.Value(attribute.Key(reasonKey)); !ok || v.AsString() != reason {
						continue
					}
				}
				sum += dp.Value
			}
		}
	}
	return sum
}

var consumererrorPermanent = consumererror.NewPermanent(errors.New("bad data"))

// pointAtNoAPIServer makes auth_type none resolve to a local port nothing listens on, for the
// generated lifecycle test (metadata.yaml, tests.goleak.setup): the receiver starts against an
// apiserver it cannot reach, as after a control-plane outage, and must still stop cleanly. The
// other tests build their clients themselves and never read these variables.
func pointAtNoAPIServer() {
	for k, v := range map[string]string{"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "1"} {
		if err := os.Setenv(k, v); err != nil {
			panic(err)
		}
	}
}
