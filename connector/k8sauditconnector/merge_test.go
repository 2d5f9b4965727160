package k8sauditconnector

import (
	"context"
	"errors"
	"hash/fnv"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/kubetrail/kubetrail/internal/auditconv"
	"github.com/kubetrail/kubetrail/internal/auditconv/auditconvtest"
	"github.com/kubetrail/kubetrail/internal/door"
)

// gate is a next consumer that records each call's span names and holds every call until
// released, answering with the error of its turn.
type gate struct {
	mu      sync.Mutex
	calls   [][]string
	ctxErrs []error
	answers []error // by call, nil past the end
	entered chan struct{}
	release chan struct{}
}

func newGate(answers ...error) *gate {
	return &gate{answers: answers, entered: make(chan struct{}, 64), release: make(chan struct{})}
}

func (*gate) Capabilities() consumer.Capabilities { return consumer.Capabilities{MutatesData: true} }

func (g *gate) ConsumeTraces(ctx context.Context, td ptrace.Traces) error {
	var names []string
	for _, rs := range td.ResourceSpans().All() {
		for _, ss := range rs.ScopeSpans().All() {
			for _, s := range ss.Spans().All() {
				names = append(names, s.Name())
			}
		}
	}
	g.entered <- struct{}{}
	<-g.release
	g.mu.Lock()
	defer g.mu.Unlock()
	i := len(g.calls)
	g.calls = append(g.calls, names)
	g.ctxErrs = append(g.ctxErrs, ctx.Err())
	if i < len(g.answers) {
		return g.answers[i]
	}
	return nil
}

func (g *gate) recorded() [][]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([][]string(nil), g.calls...)
}

func tracesNamed(name string) ptrace.Traces {
	td := ptrace.NewTraces()
	td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans().AppendEmpty().SetName(name)
	return td
}

// mergeRun starts calls of m, one span each, named by names; the first is started alone and
// held in the next consumer, the rest queue behind it. It returns each call's answer, by name.
func mergeRun(t *testing.T, m *merger, g *gate, names []string, ctxs map[string]context.Context) map[string]error {
	t.Helper()
	var mu sync.Mutex
	answers := map[string]error{}
	var wg sync.WaitGroup
	start := func(name string) {
		ctx := context.Background()
		if c, ok := ctxs[name]; ok {
			ctx = c
		}
		wg.Go(func() {
			err := m.consume(ctx, tracesNamed(name), 1000)
			mu.Lock()
			answers[name] = err
			mu.Unlock()
		})
	}
	for len(g.entered) > 0 { // earlier runs' calls
		<-g.entered
	}
	start(names[0])
	<-g.entered // the first hand-off is in flight
	for _, name := range names[1:] {
		start(name)
	}
	// The others queue behind it: wait until they all have.
	deadline := time.Now().Add(10 * time.Second)
	for {
		m.mu.Lock()
		queued := len(m.queue)
		m.mu.Unlock()
		if queued == len(names)-1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d calls queued", queued, len(names)-1)
		}
		time.Sleep(time.Millisecond)
	}
	stop := make(chan struct{})
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		for {
			select {
			case g.release <- struct{}{}:
			case <-stop:
				return
			}
		}
	}()
	wg.Wait()
	close(stop)
	<-fed
	// The feeder may have put one release ahead in the buffer: take it back.
	select {
	case <-g.release:
	default:
	}
	return answers
}

func TestConcurrentCallsGoOnTogetherInTheNextHandOff(t *testing.T) {
	g := newGate()
	merged := 0
	m := newMerger(g, 1<<20, time.Now, func(_ context.Context, n int) { merged += n }, func(int, error) {})
	answers := mergeRun(t, m, g, []string{"a", "b", "c", "d"}, nil)
	calls := g.recorded()
	if len(calls) != 2 || len(calls[0]) != 1 || calls[0][0] != "a" || len(calls[1]) != 3 {
		t.Fatalf("hand-offs = %v, want [a] then the three that waited, together", calls)
	}
	for name, err := range answers {
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if merged != 3 {
		t.Errorf("merged calls counted = %d, want 3", merged)
	}
	if m.busy || len(m.queue) != 0 {
		t.Errorf("merger left busy=%v with %d queued", m.busy, len(m.queue))
	}
}

func TestAMergedHandOffStaysWithinMaxBytes(t *testing.T) {
	g := newGate()
	// Each call is 1000 bytes: two fit in 2500, the third goes on in a hand-off of its own.
	m := newMerger(g, 2500, time.Now, func(context.Context, int) {}, func(int, error) {})
	mergeRun(t, m, g, []string{"a", "b", "c", "d"}, nil)
	calls := g.recorded()
	// The three queue in the order they arrive: any two, then the third.
	if len(calls) != 3 || len(calls[0]) != 1 || len(calls[1]) != 2 || len(calls[2]) != 1 {
		t.Fatalf("hand-offs = %v, want [a], two of b c d, then the third", calls)
	}
}

func TestEachMergedCallHearsTheNextConsumersAnswer(t *testing.T) {
	busy := errors.New("backend busy")
	g := newGate(nil, busy)
	m := newMerger(g, 1<<20, time.Now, func(context.Context, int) {}, func(int, error) {})
	answers := mergeRun(t, m, g, []string{"a", "b", "c"}, nil)
	if answers["a"] != nil {
		t.Errorf("a: %v, want nil", answers["a"])
	}
	for _, name := range []string{"b", "c"} {
		if !errors.Is(answers[name], busy) {
			t.Errorf("%s: %v, want the next consumer's error", name, answers[name])
		}
	}
}

func TestAMergedRefusalForGoodIsRetriedAlone(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	refused := consumererror.NewPermanent(errors.New("too large"))
	g := newGate(nil, refused, refused)
	var told []int
	m := newMerger(g, 1<<20, clock, func(context.Context, int) {}, func(n int, err error) {
		if consumererror.IsPermanent(err) {
			told = append(told, n)
		}
	})
	answers := mergeRun(t, m, g, []string{"a", "b", "c"}, nil)
	if len(told) != 1 || told[0] != 2 {
		t.Errorf("refusals told: %v, want one of the two merged calls (logged by the connector)", told)
	}
	for _, name := range []string{"b", "c"} {
		if answers[name] == nil || consumererror.IsPermanent(answers[name]) {
			t.Errorf("%s: %v, want a retryable error: the refusal may be another call's", name, answers[name])
		}
	}
	// Sent again, the call goes on alone and hears its own answer, permanent this time.
	go func() { g.release <- struct{}{} }()
	err := m.consume(context.Background(), tracesNamed("b"), 1000)
	<-g.entered
	if !consumererror.IsPermanent(err) {
		t.Errorf("b alone: %v, want the permanent refusal", err)
	}
	// Alone means beside the queue: nothing waits in it.
	if m.busy || len(m.queue) != 0 {
		t.Errorf("a solo call went through the queue: busy=%v, %d queued", m.busy, len(m.queue))
	}
	// After soloAfterRefusal, calls merge again.
	now = now.Add(soloAfterRefusal)
	mergeRun(t, m, g, []string{"x", "y", "z"}, nil)
	calls := g.recorded()
	if last := calls[len(calls)-1]; len(last) != 2 {
		t.Errorf("after the solo minute, the last hand-off = %v, want y and z together", last)
	}
}

// panicking is a next consumer that panics on the calls named in panics.
type panicking struct {
	*gate
	panics map[int]bool
	n      int
}

func (p *panicking) ConsumeTraces(ctx context.Context, td ptrace.Traces) error {
	err := p.gate.ConsumeTraces(ctx, td)
	p.n++
	if p.panics[p.n] {
		panic("exporter bug")
	}
	return err
}

// A panic downstream answers every call of the hand-off and leaves the merger free: no call
// waits forever behind it.
func TestAPanicDownstreamAnswersEveryMergedCall(t *testing.T) {
	g := newGate()
	next := &panicking{gate: g, panics: map[int]bool{2: true}}
	m := newMerger(next, 1<<20, time.Now, func(context.Context, int) {}, func(int, error) {})
	answers := mergeRun(t, m, g, []string{"a", "b", "c"}, nil)
	if answers["a"] != nil {
		t.Errorf("a: %v", answers["a"])
	}
	for _, name := range []string{"b", "c"} {
		if answers[name] == nil || consumererror.IsPermanent(answers[name]) {
			t.Errorf("%s: %v, want a retryable error (merged, the fault may be the other call's)", name, answers[name])
		}
	}
	if m.busy || len(m.queue) != 0 {
		t.Fatalf("merger left busy=%v with %d queued", m.busy, len(m.queue))
	}
	// Alone now (the solo minute), a panic is that call's own permanent error.
	next.panics[3] = true
	go func() { g.release <- struct{}{} }()
	if err := m.consume(context.Background(), tracesNamed("b"), 1000); !consumererror.IsPermanent(err) {
		t.Errorf("alone, a call whose hand-off panicked: %v, want a permanent error", err)
	}
}

func TestAMergedHandOffOutlivesTheLeadersCancellation(t *testing.T) {
	g := newGate()
	m := newMerger(g, 1<<20, time.Now, func(context.Context, int) {}, func(int, error) {})
	ctx, cancel := context.WithCancel(door.Trusted(context.Background()))
	cancel()
	// b leads the second hand-off with a cancelled context: c's spans ride on it.
	mergeRun(t, m, g, []string{"a", "b", "c"}, map[string]context.Context{"b": ctx})
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.ctxErrs) != 2 || g.ctxErrs[1] != nil {
		t.Errorf("the merged hand-off's context errors = %v, want it not cancelled", g.ctxErrs)
	}
}

// slowSink is a sink whose every call takes a millisecond, as an export does: the calls that
// arrive meanwhile queue in the merger.
type slowSink struct{ consumertest.TracesSink }

func (s *slowSink) ConsumeTraces(ctx context.Context, td ptrace.Traces) error {
	time.Sleep(time.Millisecond)
	return s.TracesSink.ConsumeTraces(ctx, td)
}

// The processing tier's shape: each webhook batch split into one message per object (the edge's
// layout), the objects spread over four partitions, each partition's messages sent in order by
// its own worker, all at once. Merged, the spans are the webhook's: each in its trace, under its
// parent, with its diff.
func TestPartitionWorkersMergedGiveTheWebhookSpans(t *testing.T) {
	var merged, handOffs, messages int64
	defer func() {
		// A scenario of a few messages may see none arrive together; the six together do.
		if merged == 0 || handOffs >= messages {
			t.Errorf("%d calls merged: %d hand-offs for %d messages", merged, handOffs, messages)
		}
	}()
	for _, scenario := range auditconvtest.Scenarios(t) {
		t.Run(scenario, func(t *testing.T) {
			queues := partitionQueues(t, scenario, 4)
			sink := new(slowSink)
			c, tel := newTestConnector(t, sink, nil)
			var wg sync.WaitGroup
			for _, q := range queues {
				wg.Go(func() {
					for _, ld := range q {
						if err := c.ConsumeLogs(context.Background(), ld); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			checkWebhookSpans(t, scenario, spansOf(&sink.TracesSink), true)
			merged += auditconvtest.MetricSum(t, tel, "otelcol_k8s_audit_merged_calls", "")
			handOffs += int64(len(sink.AllTraces()))
			messages += int64(messagesOf(queues))
		})
	}
}

// partitionQueues is a scenario's webhook batches as the edge lays them out in Kafka: each batch
// split into one message per object, each object's messages in one of the partitions (by a hash
// of its key), in order.
func partitionQueues(t *testing.T, scenario string, partitions int) [][]plog.Logs {
	t.Helper()
	queues := make([][]plog.Logs, partitions)
	for _, body := range auditconvtest.FixtureBodies(t, scenario) {
		raws, err := auditconv.ScanEventList(body, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		byKey := map[auditconv.ObjectKey]plog.LogRecordSlice{}
		for _, r := range raws {
			lrs, ok := byKey[r.Key]
			if !ok {
				ld := plog.NewLogs()
				lrs = ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords()
				byKey[r.Key] = lrs
				h := fnv.New32a()
				_, _ = h.Write([]byte(r.Key.APIGroup + "/" + r.Key.Resource + "/" + r.Key.Namespace + "/" + r.Key.Name))
				p := h.Sum32() % uint32(partitions)
				queues[p] = append(queues[p], ld)
			}
			lr := lrs.AppendEmpty()
			lr.SetEventName(auditconv.RawEventName)
			lr.Body().SetStr(string(r.Raw))
		}
	}
	return queues
}

func messagesOf(queues [][]plog.Logs) int {
	n := 0
	for _, q := range queues {
		n += len(q)
	}
	return n
}
