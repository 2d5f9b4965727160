package k8sobjectlinkprocessor

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/kubetrail/kubetrail/internal/model"
)

// kubeletSpan is one span of a kubelet's pod sync as its tracing exports it: syncPod, the root,
// names the Pod (k8s.pod.uid, k8s.pod.name, k8s.namespace.name); the CRI calls under it name
// nothing.
type kubeletSpan struct {
	name   string
	parent string // "" for the root
	pod    *model.Object
}

// kubeletBatch builds one export of a kubelet's spans of trace tid, from service svc.
func kubeletBatch(tid pcommon.TraceID, svc string, start time.Time, spans ...kubeletSpan) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr(model.AttrServiceName, svc)
	rs.Resource().Attributes().PutStr("host.name", "node-1")
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName("k8s.io/kubernetes/pkg/kubelet")
	for _, k := range spans {
		s := ss.Spans().AppendEmpty()
		s.SetTraceID(tid)
		s.SetSpanID(spanIDOf(k.name))
		if k.parent != "" {
			s.SetParentSpanID(spanIDOf(k.parent))
		}
		s.SetName(k.name)
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(start))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(start.Add(time.Second)))
		if k.pod != nil {
			s.Attributes().PutStr("k8s.pod.uid", k.pod.UID)
			s.Attributes().PutStr("k8s.pod.name", k.pod.Name)
			s.Attributes().PutStr("k8s.namespace.name", k.pod.Namespace)
		}
	}
	return td
}

func spanIDOf(name string) pcommon.SpanID {
	var id pcommon.SpanID
	copy(id[:], name+"........")
	return id
}

func newTraceID() pcommon.TraceID {
	var id pcommon.TraceID
	_, _ = rand.Read(id[:])
	return id
}

// identityConfig is cfg with the kubelet's spans placed in cluster c1, and the default
// owner_wait (the harness's configurations hold nothing).
func identityConfig(cfg *Config) *Config {
	cfg.Doors.Identity.Cluster = "c1"
	cfg.OwnerWait = 2 * time.Second
	return cfg
}

// consumeUntrusted hands td to the processor as an otlp receiver would: an untrusted door.
func (h *harness) consumeUntrusted(td ptrace.Traces) {
	h.t.Helper()
	if err := h.p.ConsumeTraces(untrusted, td); err != nil {
		h.t.Fatal(err)
	}
}

// outByName returns the output spans of the given name.
func (h *harness) outByName(name string) []ptrace.Span {
	var out []ptrace.Span
	for _, o := range h.spans() {
		if o.span.Name() == name {
			out = append(out, o.span)
		}
	}
	return out
}

func onlyOut(t *testing.T, h *harness, name string) ptrace.Span {
	t.Helper()
	s := h.outByName(name)
	if len(s) != 1 {
		t.Fatalf("want one output span %q, got %d", name, len(s))
	}
	return s[0]
}

// placePod makes the Pod podA1 known in now's window, as the receivers' spans make it (the
// Deployment's body said it has no owner).
func placePod(h *harness, w time.Time) ptrace.Span {
	root := deploy
	root.NoOwner = true
	h.consume(audit(root, "create", w.Add(time.Second)), audit(rsA, "rs", w.Add(2*time.Second)), audit(podA1, "pod", w.Add(3*time.Second)))
	return h.one("Pod default/demo-a-1")
}

func TestKubeletSyncsGoUnderThePodsSpanWithTheirCRICalls(t *testing.T) {
	backends(t, func(t *testing.T, cfg func() *Config) {
		now := time.Now()
		w := model.WindowStart(now, model.DefaultWindow)
		h := newHarness(t, identityConfig(cfg()), newFakeClock(now))
		pod := placePod(h, w)
		records := len(h.records())
		tid := newTraceID()
		// The children end first: a kubelet exports them first.
		td := kubeletBatch(tid, "kubelet", w.Add(4*time.Second),
			kubeletSpan{name: "PullImage", parent: "syncPod"}, kubeletSpan{name: "CreateContainer", parent: "syncPod"},
			kubeletSpan{name: "syncPod", pod: &podA1})
		h.consumeUntrusted(td)
		root := onlyOut(t, h, "syncPod")
		assertChild(t, pod, root)
		for _, name := range []string{"PullImage", "CreateContainer"} {
			assertChild(t, root, onlyOut(t, h, name))
		}
		if got := len(h.records()); got != records {
			t.Fatalf("the kubelet's spans wrote to the ID map: %d records, %d before", got, records)
		}
		// A later sync's spans in later batches: the root first, a child after it.
		tid2 := newTraceID()
		h.consumeUntrusted(kubeletBatch(tid2, "kubelet", w.Add(9*time.Second), kubeletSpan{name: "syncPod2", pod: &podA1}))
		h.consumeUntrusted(kubeletBatch(tid2, "kubelet", w.Add(9*time.Second), kubeletSpan{name: "StartContainer2", parent: "syncPod2"}))
		root2 := onlyOut(t, h, "syncPod2")
		assertChild(t, pod, root2)
		assertChild(t, root2, onlyOut(t, h, "StartContainer2"))
	})
}

func TestAKubeletChildBeforeItsSyncWaitsForIt(t *testing.T) {
	now := time.Now()
	w := model.WindowStart(now, model.DefaultWindow)
	clk := newFakeClock(now)
	h := newHarness(t, identityConfig(memoryConfig()), clk)
	pod := placePod(h, w)
	tid := newTraceID()
	h.consumeUntrusted(kubeletBatch(tid, "kubelet", w.Add(4*time.Second), kubeletSpan{name: "PullImage", parent: "syncPod"}))
	if n := len(h.outByName("PullImage")); n != 0 {
		t.Fatal("a child whose sync is not placed yet waits for it")
	}
	clk.Advance(5 * time.Second) // past owner_wait (2s), within doors.identity.wait (10s)
	if err := h.p.release(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if n := len(h.outByName("PullImage")); n != 0 {
		t.Fatal("it waits doors.identity.wait, not owner_wait")
	}
	h.consumeUntrusted(kubeletBatch(tid, "kubelet", w.Add(4*time.Second), kubeletSpan{name: "syncPod", pod: &podA1}))
	if err := h.p.release(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	root := onlyOut(t, h, "syncPod")
	assertChild(t, pod, root)
	assertChild(t, root, onlyOut(t, h, "PullImage"))
}

// What identity placement leaves as it came, and counts: a Pod kubetrail never saw (after the
// wait), a window far from now, a span without a cluster, another service's span; and a child
// whose sync never came. Nothing is written to the ID map.
func TestSpansIdentityCannotPlacePassAsTheyCame(t *testing.T) {
	now := time.Now()
	w := model.WindowStart(now, model.DefaultWindow)
	unseen := model.Object{Cluster: "c1", Version: "v1", Resource: "pods", Kind: "Pod", Namespace: "default", Name: "ghost", UID: "pod-ghost"}
	cases := []struct {
		name    string
		cluster string
		td      func(pcommon.TraceID) ptrace.Traces
		counted int64
	}{
		{"a Pod never seen", "c1", func(tid pcommon.TraceID) ptrace.Traces {
			return kubeletBatch(tid, "kubelet", w.Add(4*time.Second), kubeletSpan{name: "syncPod", pod: &unseen}, kubeletSpan{name: "PullImage", parent: "syncPod"})
		}, 2},
		{"a window a day back", "c1", func(tid pcommon.TraceID) ptrace.Traces {
			return kubeletBatch(tid, "kubelet", w.Add(-24*time.Hour), kubeletSpan{name: "syncPod", pod: &podA1})
		}, 1},
		{"no cluster", "", func(tid pcommon.TraceID) ptrace.Traces {
			return kubeletBatch(tid, "kubelet", w.Add(4*time.Second), kubeletSpan{name: "syncPod", pod: &podA1})
		}, 1},
		{"another service", "c1", func(tid pcommon.TraceID) ptrace.Traces {
			return kubeletBatch(tid, "checkout", w.Add(4*time.Second), kubeletSpan{name: "syncPod", pod: &podA1}, kubeletSpan{name: "PullImage", parent: "syncPod"})
		}, 0},
		{"a child whose sync never came", "c1", func(tid pcommon.TraceID) ptrace.Traces {
			return kubeletBatch(tid, "kubelet", w.Add(4*time.Second), kubeletSpan{name: "PullImage", parent: "syncPod"})
		}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock(now)
			cfg := identityConfig(memoryConfig())
			cfg.Doors.Identity.Cluster = tc.cluster
			sink := new(consumertest.TracesSink)
			h, reader := newMeteredHarness(t, cfg, clk, sink, sink)
			placePod(h, w)
			records := len(h.records())
			tid := newTraceID()
			in := tc.td(tid)
			want := map[string]pcommon.SpanID{}
			for _, s := range in.ResourceSpans().At(0).ScopeSpans().At(0).Spans().All() {
				want[s.Name()] = s.ParentSpanID()
			}
			h.consumeUntrusted(in)
			clk.Advance(11 * time.Second)
			if err := h.p.release(context.Background(), false); err != nil {
				t.Fatal(err)
			}
			for name, parent := range want {
				s := onlyOut(t, h, name)
				if s.TraceID() != tid || s.ParentSpanID() != parent {
					t.Fatalf("%s moved: trace %s parent %s", name, s.TraceID(), s.ParentSpanID())
				}
			}
			if got := len(h.records()); got != records {
				t.Fatalf("the ID map changed: %d records, %d before", got, records)
			}
			var rm metricdata.ResourceMetrics
			if err := reader.Collect(context.Background(), &rm); err != nil {
				t.Fatal(err)
			}
			if got := sumOf(rm, "otelcol_k8s_object_link_untrusted_spans", attribute.String(attrResult, resultPassed)); got != tc.counted {
				t.Fatalf("untrusted_spans{passed} = %d, want %d", got, tc.counted)
			}
		})
	}
}

func TestMovedTracesAreBounded(t *testing.T) {
	now := time.Now()
	m := newMovedTraces(2, time.Minute)
	a, b, c, to := newTraceID(), newTraceID(), newTraceID(), newTraceID()
	m.put(a, to, now)
	m.put(b, to, now)
	m.put(a, newTraceID(), now) // the first move stands
	if got, ok := m.get(a, now); !ok || got != to {
		t.Fatal("a trace's first move stands")
	}
	m.put(c, to, now)
	if _, ok := m.get(a, now); ok || m.len() != 2 {
		t.Fatalf("the oldest goes first: %d entries", m.len())
	}
	if _, ok := m.get(c, now.Add(2*time.Minute)); ok {
		t.Fatal("an entry past its TTL is not followed")
	}
}

func TestIdentityConfigIsChecked(t *testing.T) {
	for name, mutate := range map[string]func(*IdentityConfig){
		"negative wait":      func(c *IdentityConfig) { c.Wait = -time.Second },
		"no trace bound":     func(c *IdentityConfig) { c.MaxTraces = 0 },
		"an empty service":   func(c *IdentityConfig) { c.Services = []string{""} },
		"a bad cluster name": func(c *IdentityConfig) { c.Cluster = "no spaces allowed" },
	} {
		cfg := createDefaultConfig()
		mutate(&cfg.Doors.Identity)
		if cfg.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	cfg := createDefaultConfig()
	cfg.Doors.Identity = IdentityConfig{}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("identity placement off: %v", err)
	}
}

// A kubelet root that names no object (image garbage collection, its HTTP server) stays where it
// is, and so do the spans of its trace: they pass at once, in its batch and after it, without
// waiting in the hold.
func TestSpansUnderARootThatStaysPassAtOnce(t *testing.T) {
	now := time.Now()
	w := model.WindowStart(now, model.DefaultWindow)
	h := newHarness(t, identityConfig(memoryConfig()), newFakeClock(now))
	placePod(h, w)
	tid := newTraceID()
	h.consumeUntrusted(kubeletBatch(tid, "kubelet", w.Add(4*time.Second),
		kubeletSpan{name: "ListImages", parent: "Containers/GarbageCollect"}, kubeletSpan{name: "Containers/GarbageCollect"}))
	h.consumeUntrusted(kubeletBatch(tid, "kubelet", w.Add(4*time.Second), kubeletSpan{name: "RemoveImage", parent: "Containers/GarbageCollect"}))
	for _, name := range []string{"Containers/GarbageCollect", "ListImages", "RemoveImage"} {
		if s := onlyOut(t, h, name); s.TraceID() != tid {
			t.Fatalf("%s moved to %s", name, s.TraceID())
		}
	}
	if n := len(h.p.waiting); n != 0 {
		t.Fatalf("%d spans wait", n)
	}
}
