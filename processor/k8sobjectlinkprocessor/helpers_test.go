package k8sobjectlinkprocessor

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	k8sclock "k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/kubetrail/kubetrail/internal/door"
	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/metadata"
)

// trustedCtx is the context kubetrail's receivers hand their spans on with (internal/door):
// the spans of the tests come through a trusted door unless a test says otherwise.
var trustedCtx = door.Trusted(context.Background())

// refusingConsumer is a next consumer that refuses every batch while *refuse is set, as a full
// exporter queue or the memory limiter does, and hands the others to sink.
func refusingConsumer(sink *consumertest.TracesSink, refuse *bool) consumer.Traces {
	next, _ := consumer.NewTraces(func(ctx context.Context, td ptrace.Traces) error {
		if *refuse {
			return errors.New("next consumer refuses: queue full")
		}
		return sink.ConsumeTraces(ctx, td)
	})
	return next
}

// fakeClock is k8s.io/utils/clock's fake, moved by the test with Advance; its tickers fire
// only when the test calls FireTickers, so a test decides exactly when held spans are re-examined.
type fakeClock struct {
	*testingclock.FakeClock
	mu      sync.Mutex
	tickers []*manualTicker
}

func newFakeClock(t time.Time) *fakeClock { return &fakeClock{FakeClock: testingclock.NewFakeClock(t)} }

// Advance moves the time on by d.
func (c *fakeClock) Advance(d time.Duration) { c.Step(d) }

// NewTicker returns a ticker that fires on FireTickers only.
func (c *fakeClock) NewTicker(time.Duration) k8sclock.Ticker {
	t := &manualTicker{ch: make(chan time.Time, 1)}
	c.mu.Lock()
	c.tickers = append(c.tickers, t)
	c.mu.Unlock()
	return t
}

// FireTickers fires every ticker once (without blocking if one has not consumed the last tick).
func (c *fakeClock) FireTickers() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.tickers {
		select {
		case t.ch <- c.Now():
		default:
		}
	}
}

type manualTicker struct{ ch chan time.Time }

func (t *manualTicker) C() <-chan time.Time { return t.ch }
func (t *manualTicker) Stop()               {}

var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

// Objects of the scenarios, as a receiver identifies them.
var (
	deploy = model.Object{Cluster: "c1", Group: "apps", Version: "v1", Resource: "deployments", Kind: "Deployment",
		Namespace: "default", Name: "demo", UID: "d-1"}
	rsA = model.Object{Cluster: "c1", Group: "apps", Version: "v1", Resource: "replicasets", Kind: "ReplicaSet",
		Namespace: "default", Name: "demo-a", UID: "rs-a", Owner: ownerOf(deploy)}
	rsB = model.Object{Cluster: "c1", Group: "apps", Version: "v1", Resource: "replicasets", Kind: "ReplicaSet",
		Namespace: "default", Name: "demo-b", UID: "rs-b", Owner: ownerOf(deploy)}
	podA1 = model.Object{Cluster: "c1", Version: "v1", Resource: "pods", Kind: "Pod",
		Namespace: "default", Name: "demo-a-1", UID: "pod-a1", Owner: ownerOf(rsA)}
	podB1 = model.Object{Cluster: "c1", Version: "v1", Resource: "pods", Kind: "Pod",
		Namespace: "default", Name: "demo-b-1", UID: "pod-b1", Owner: ownerOf(rsB)}
	cron = model.Object{Cluster: "c1", Group: "batch", Version: "v1", Resource: "cronjobs", Kind: "CronJob",
		Namespace: "default", Name: "nightly", UID: "cj-1"}
	job = model.Object{Cluster: "c1", Group: "batch", Version: "v1", Resource: "jobs", Kind: "Job",
		Namespace: "default", Name: "nightly-1", UID: "job-1", Owner: ownerOf(cron)}
	jobPod = model.Object{Cluster: "c1", Version: "v1", Resource: "pods", Kind: "Pod",
		Namespace: "default", Name: "nightly-1-x", UID: "pod-j1", Owner: ownerOf(job)}
)

func ownerOf(o model.Object) model.Owner {
	return model.Owner{APIVersion: o.APIVersion(), Kind: o.Kind, Name: o.Name, UID: o.UID}
}

func withoutOwner(o model.Object) model.Object {
	o.Owner = model.Owner{}
	return o
}

func withoutUID(o model.Object) model.Object {
	o.UID = ""
	return o
}

// activity is one span a receiver would emit.
type activity struct {
	obj  model.Object
	typ  string
	id   string // audit ID or event UID+occurrence; the span ID derives from it
	at   time.Time
	name string
	// with adds what a receiver adds beyond identity (links, attributes).
	with func(ptrace.Span)
}

func audit(obj model.Object, id string, at time.Time) activity {
	return activity{obj: obj, typ: model.SpanTypeAudit, id: id, at: at, name: "audit " + id}
}

func event(obj model.Object, id string, at time.Time) activity {
	return activity{obj: obj, typ: model.SpanTypeEvent, id: id, at: at, name: "event " + id}
}

// batch builds spans exactly as the receivers do (internal/model contract): resource per
// object, identity on it, the owner on the span, per-object trace and parent, derived span ID.
func batch(acts ...activity) ptrace.Traces {
	b := model.NewTracesBuilder("test-receiver", "")
	for _, a := range acts {
		s := b.AppendSpan(a.obj)
		w := model.WindowStart(a.at, model.DefaultWindow)
		s.SetTraceID(model.ObjectTraceID(a.obj.Key(), w))
		s.SetParentSpanID(model.ObjectSpanID(a.obj.Key(), w))
		if a.typ == model.SpanTypeAudit {
			s.SetSpanID(model.AuditSpanID(a.id))
		} else {
			s.SetSpanID(model.EventSpanID(a.id, "1"))
		}
		s.SetName(a.name)
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(a.at))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(a.at.Add(time.Millisecond)))
		a.obj.PutOwner(s.Attributes())
		s.Attributes().PutStr(model.AttrSpanType, a.typ)
		if a.with != nil {
			a.with(s)
		}
	}
	return b.Traces()
}

func memoryConfig() *Config {
	cfg := createDefaultConfig()
	cfg.OwnerWait = 0
	return cfg
}

type harness struct {
	t     *testing.T
	p     *objectLinkProcessor
	sink  *consumertest.TracesSink
	clock *fakeClock
}

func newHarness(t *testing.T, cfg *Config, clk *fakeClock) *harness {
	t.Helper()
	return newHarnessWithNext(t, cfg, clk, new(consumertest.TracesSink))
}

func newHarnessWithNext(t *testing.T, cfg *Config, clk *fakeClock, sink *consumertest.TracesSink) *harness {
	t.Helper()
	return newHarnessConsumer(t, cfg, clk, sink, sink)
}

func newHarnessConsumer(t *testing.T, cfg *Config, clk *fakeClock, next consumer.Traces, sink *consumertest.TracesSink) *harness {
	t.Helper()
	p, err := newProcessor(processortest.NewNopSettings(metadata.Type), cfg, next, clk)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.store != nil {
			_ = p.Shutdown(context.Background())
		}
	})
	return &harness{t: t, p: p, sink: sink, clock: clk}
}

// newMeteredHarness is a harness whose processor records its own metrics into the returned
// reader. The processor is not started: these tests drive it, and its releases, themselves.
func newMeteredHarness(t *testing.T, cfg *Config, clk *fakeClock, next consumer.Traces, sink *consumertest.TracesSink) (*harness, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	set := processortest.NewNopSettings(metadata.Type)
	set.MeterProvider = mp
	p, err := newProcessor(set, cfg, next, clk)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	return &harness{t: t, p: p, sink: sink, clock: clk}, reader
}

func (h *harness) consume(acts ...activity) {
	h.t.Helper()
	if err := h.p.ConsumeTraces(trustedCtx, batch(acts...)); err != nil {
		h.t.Fatal(err)
	}
}

// out is everything the processor passed on, flattened.
type outSpan struct {
	span     ptrace.Span
	resource pcommon.Map
}

// name is how a test names the span: an object span by its object ("Deployment default/demo",
// read from its Resource; its span name is the kind), any other by its span name.
func (o outSpan) name() string {
	if spanType(o.span) == model.SpanTypeObject {
		return displayName(o.resource, o.span)
	}
	return o.span.Name()
}

func (h *harness) spans() []outSpan {
	var out []outSpan
	for _, td := range h.sink.AllTraces() {
		for _, rs := range td.ResourceSpans().All() {
			for _, ss := range rs.ScopeSpans().All() {
				for _, s := range ss.Spans().All() {
					out = append(out, outSpan{span: s, resource: rs.Resource().Attributes()})
				}
			}
		}
	}
	return out
}

// displayName names a span's object as people read it ("Deployment default/demo"), from its
// Resource: span names are kinds.
func displayName(res pcommon.Map, s ptrace.Span) string {
	o, _ := model.ObjectFromAttributes(res, s.Attributes())
	return o.DisplayName()
}

// count is how many spans named name the next consumer got.
func (h *harness) count(name string) int {
	n := 0
	for _, o := range h.spans() {
		if o.span.Name() == name {
			n++
		}
	}
	return n
}

// objectOf is the identity of an output span's object, read as a consumer reads it.
func (h *harness) objectOf(s ptrace.Span) model.Object {
	h.t.Helper()
	for _, o := range h.spans() {
		if o.span.SpanID() == s.SpanID() && o.span.TraceID() == s.TraceID() {
			obj, _ := model.ObjectFromAttributes(o.resource, o.span.Attributes())
			return obj
		}
	}
	h.t.Fatalf("span %q is not in the output", s.Name())
	return model.Object{}
}

func spanType(s ptrace.Span) string {
	v, _ := s.Attributes().Get(model.AttrSpanType)
	return v.Str()
}

// objectSpans returns the object spans by display name, failing on any duplicate in a window.
func (h *harness) objectSpans() map[string][]ptrace.Span {
	h.t.Helper()
	out := map[string][]ptrace.Span{}
	seen := map[pcommon.SpanID]bool{}
	for _, o := range h.spans() {
		if spanType(o.span) != model.SpanTypeObject {
			continue
		}
		if seen[o.span.SpanID()] {
			h.t.Fatalf("object span %q (%s) emitted twice", displayName(o.resource, o.span), o.span.SpanID())
		}
		seen[o.span.SpanID()] = true
		name := displayName(o.resource, o.span)
		out[name] = append(out[name], o.span)
	}
	return out
}

// one returns the single object span of the given name.
func (h *harness) one(name string) ptrace.Span {
	h.t.Helper()
	spans := h.objectSpans()[name]
	if len(spans) != 1 {
		h.t.Fatalf("want exactly one object span %q, got %d (have %v)", name, len(spans), names(h.objectSpans()))
	}
	return spans[0]
}

func names(m map[string][]ptrace.Span) []string {
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s×%d", k, len(v)))
	}
	sort.Strings(out)
	return out
}

// activitySpan returns the output span of the given receiver-side name.
func (h *harness) activitySpan(name string) ptrace.Span {
	h.t.Helper()
	var found []ptrace.Span
	for _, o := range h.spans() {
		if o.name() == name {
			found = append(found, o.span)
		}
	}
	if len(found) != 1 {
		h.t.Fatalf("want exactly one span %q, got %d", name, len(found))
	}
	return found[0]
}

// assertChild checks that child sits in parent's trace directly under it.
func assertChild(t *testing.T, parent, child ptrace.Span) {
	t.Helper()
	if child.TraceID() != parent.TraceID() || child.ParentSpanID() != parent.SpanID() {
		t.Fatalf("%q (trace %s, parent %s) is not a child of %q (trace %s, span %s)",
			child.Name(), child.TraceID(), child.ParentSpanID(), parent.Name(), parent.TraceID(), parent.SpanID())
	}
}

func assertRoot(t *testing.T, s ptrace.Span) {
	t.Helper()
	if !s.ParentSpanID().IsEmpty() {
		t.Fatalf("%q must be a root, has parent %s", s.Name(), s.ParentSpanID())
	}
}

func linkTypes(s ptrace.Span) []string {
	var out []string
	for _, l := range s.Links().All() {
		v, _ := l.Attributes().Get(model.AttrLinkType)
		out = append(out, v.Str())
	}
	return out
}

// uniquePrefix gives each Redis test its own key space.
func uniquePrefix(t *testing.T) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(time.Now().UnixNano()))
	return "kubetrail-test:" + strings.ReplaceAll(t.Name(), "/", "_") + ":" + fmt.Sprintf("%x", b) + ":"
}

// sumOf adds up the data points of the int64 sum metric name whose attributes include attrs.
func sumOf(rm metricdata.ResourceMetrics, name string, attrs ...attribute.KeyValue) int64 {
	var total int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				match := true
				for _, a := range attrs {
					if v, ok := dp.Attributes.Value(a.Key); !ok || v != a.Value {
						match = false
					}
				}
				if match {
					total += dp.Value
				}
			}
		}
	}
	return total
}
