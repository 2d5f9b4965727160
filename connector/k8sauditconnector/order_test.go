package k8sauditconnector

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/kubetrail/kubetrail/internal/auditconv/auditconvtest"
)

const testTopic = "kube-audit"

// kafkaCtx is the context the kafka receiver gives the call of a message.
func kafkaCtx(ctx context.Context, partition int, offset int64) context.Context {
	return client.NewContext(ctx, client.Info{Metadata: client.NewMetadata(map[string][]string{
		"kafka.topic":     {testTopic},
		"kafka.partition": {strconv.Itoa(partition)},
		"kafka.offset":    {strconv.FormatInt(offset, 10)},
	})})
}

// skipCounter counts the sequencer's skips by reason.
type skipCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *skipCounter) add(_ context.Context, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[reason]++
}

func (c *skipCounter) get(reason string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[reason]
}

// setMaxWait changes a sequencer's wait while calls may be running.
func setMaxWait(s *sequencer, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxWait = d
}

// awaitWaiting returns once n calls of the partition wait in the sequencer.
func awaitWaiting(t *testing.T, s *sequencer, partition, n int) {
	t.Helper()
	key := partitionKey{topic: testTopic, partition: int32(partition)}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Microsecond) {
		s.mu.Lock()
		got := 0
		if p := s.parts[key]; p != nil {
			got = len(p.waiting)
		}
		s.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls of partition %d wait, want %d", got, partition, n)
		}
	}
}

// prime takes a partition's first offset through the sequencer: a partition new to it waits
// maxWait before its first call goes.
func prime(t *testing.T, s *sequencer, partition int, offset int64) {
	t.Helper()
	setMaxWait(s, time.Millisecond)
	s.done(s.wait(kafkaCtx(context.Background(), partition, offset)))
	setMaxWait(s, time.Minute)
}

// Calls that reach the sequencer in the reverse of their offsets convert in offset order.
func TestOffsetOrderConvertsAPartitionInOffsetOrder(t *testing.T) {
	var skips skipCounter
	s := newSequencer(time.Minute, time.Now, skips.add)
	prime(t, s, 0, 9)

	var mu sync.Mutex
	var order []int64
	var wg sync.WaitGroup
	for i, offset := range []int64{13, 12, 11, 10} {
		wg.Go(func() {
			tk := s.wait(kafkaCtx(context.Background(), 0, offset))
			mu.Lock()
			order = append(order, offset)
			mu.Unlock()
			s.done(tk)
		})
		if offset > 10 {
			awaitWaiting(t, s, 0, i+1)
		}
	}
	wg.Wait()
	want := []int64{10, 11, 12, 13}
	if len(order) != len(want) {
		t.Fatalf("converted %v", order)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("converted %v, want %v", order, want)
		}
	}
	if g, l := skips.get(orderSkipGap), skips.get(orderSkipLate); g+l != 0 {
		t.Errorf("%d gaps, %d late calls", g, l)
	}
}

// A missing offset is given up after max_wait and counted as a gap; when it comes after all,
// it goes at once, counted as late. Other partitions, other topics and calls without a Kafka
// offset are never held by it.
func TestOffsetOrderGivesUpAGapAndLetsLateCallsGo(t *testing.T) {
	var skips skipCounter
	s := newSequencer(time.Minute, time.Now, skips.add)
	prime(t, s, 0, 1)
	prime(t, s, 1, 1)

	setMaxWait(s, 20*time.Millisecond)
	held := make(chan orderTicket)
	go func() { held <- s.wait(kafkaCtx(context.Background(), 0, 4)) }()
	awaitWaiting(t, s, 0, 1)

	// Partition 1, another topic's partition 0 and an OTLP call are not held by offset 4.
	if tk := s.wait(kafkaCtx(context.Background(), 1, 2)); tk.late || tk.offset != 2 {
		t.Fatalf("partition 1: ticket %+v", tk)
	} else {
		s.done(tk)
	}
	if tk := s.wait(context.Background()); tk.part != nil {
		t.Fatal("a call without a Kafka offset was given a place")
	}
	other := client.NewContext(context.Background(), client.Info{Metadata: client.NewMetadata(map[string][]string{
		"kafka.topic": {"other"}, "kafka.partition": {"0"}, "kafka.offset": {"7"},
	})})
	// A partition new to the sequencer waits max_wait, then starts where its calls are: no gap.
	if tk := s.wait(other); tk.late || tk.offset != 7 {
		t.Fatalf("other topic: ticket %+v", tk)
	} else {
		s.done(tk)
	}

	// Offsets 2 and 3 never come: offset 4 goes after max_wait.
	tk := <-held
	if tk.offset != 4 || tk.late {
		t.Fatalf("ticket %+v", tk)
	}
	s.done(tk)
	if n := skips.get(orderSkipGap); n != 1 {
		t.Errorf("%d gaps, want 1", n)
	}
	// Offset 3 after all: late, at once.
	tk = s.wait(kafkaCtx(context.Background(), 0, 3))
	if !tk.late {
		t.Fatal("offset 3 was not late")
	}
	s.done(tk)
	if n := skips.get(orderSkipLate); n != 1 {
		t.Errorf("%d late calls, want 1", n)
	}
	// Offset 5 follows 4 without waiting: no second gap.
	s.done(s.wait(kafkaCtx(context.Background(), 0, 5)))
	if g := skips.get(orderSkipGap); g != 1 {
		t.Errorf("%d gaps after offset 5, want 1", g)
	}
}

// A call whose context ends while it waits goes, as a late one, and holds up nobody after it.
func TestOffsetOrderLetsACancelledCallGo(t *testing.T) {
	var skips skipCounter
	s := newSequencer(time.Minute, time.Now, skips.add)
	prime(t, s, 0, 1)
	ctx, cancel := context.WithCancel(context.Background())
	held := make(chan orderTicket)
	go func() { held <- s.wait(kafkaCtx(ctx, 0, 3)) }()
	awaitWaiting(t, s, 0, 1)
	cancel()
	if tk := <-held; !tk.late {
		t.Fatalf("ticket %+v", tk)
	}
	awaitWaiting(t, s, 0, 0)
	s.done(s.wait(kafkaCtx(context.Background(), 0, 2)))
}

func TestKafkaOffsetReadsTheReceiversMetadata(t *testing.T) {
	for _, tc := range []struct {
		md      map[string][]string
		key     partitionKey
		offset  int64
		ordered bool
	}{
		{md: map[string][]string{"kafka.topic": {"a"}, "kafka.partition": {"3"}, "kafka.offset": {"42"}}, key: partitionKey{"a", 3}, offset: 42, ordered: true},
		{md: map[string][]string{"kafka.partition": {"3"}, "kafka.offset": {"42"}}, key: partitionKey{partition: 3}, offset: 42, ordered: true},
		{md: map[string][]string{"kafka.topic": {strings.Repeat("t", maxTopicBytes+1)}, "kafka.partition": {"3"}, "kafka.offset": {"42"}}},
		{md: map[string][]string{"kafka.topic": {"a"}, "kafka.partition": {"3", "3"}, "kafka.offset": {"42"}}},
		{md: map[string][]string{"kafka.topic": {"a"}, "kafka.partition": {"4294967296"}, "kafka.offset": {"42"}}},
		{md: map[string][]string{"kafka.topic": {"a"}, "kafka.partition": {"-1"}, "kafka.offset": {"42"}}},
		{md: map[string][]string{"kafka.topic": {"a"}, "kafka.partition": {"3"}}},
		{md: map[string][]string{"kafka.topic": {"a"}, "kafka.partition": {"3"}, "kafka.offset": {"x"}}},
		{md: map[string][]string{"kafka.topic": {"a"}, "kafka.partition": {"3"}, "kafka.offset": {"-1"}}},
		{md: map[string][]string{"kafka.topic": {"a"}, "kafka.partition": {"3"}, "kafka.offset": {"1", "2"}}},
		{md: nil},
	} {
		ctx := client.NewContext(context.Background(), client.Info{Metadata: client.NewMetadata(tc.md)})
		key, offset, ok := kafkaOffset(ctx)
		if ok != tc.ordered || key != tc.key || offset != tc.offset {
			t.Errorf("%v: %q %d %v", tc.md, key, offset, ok)
		}
	}
}

// The processing tier with four messages of a partition in flight (the kafka receiver's
// partition_processing.max_in_flight.records: 4), each window's calls reaching the connector in
// the reverse of their offsets, the worst the receiver's goroutines can do: with offset_order
// the spans are the webhook's, diffs and all. Without it, the same messages converted in that
// order lose diffs.
func TestOffsetOrderKeepsTheDiffsOfMessagesInFlight(t *testing.T) {
	const partitions, inFlight = 4, 4
	var skippedOrdered, skippedUnordered int64
	for _, scenario := range auditconvtest.Scenarios(t) {
		t.Run(scenario, func(t *testing.T) {
			queues := partitionQueues(t, scenario, partitions)

			sink := new(slowSink)
			c, tel := newTestConnector(t, sink, nil)
			// Offset 0 of each partition, an empty message, starts it: a partition new to the
			// sequencer waits max_wait before its first call goes.
			setMaxWait(c.order, time.Millisecond)
			for p := range queues {
				if err := c.ConsumeLogs(kafkaCtx(context.Background(), p, 0), plog.NewLogs()); err != nil {
					t.Fatal(err)
				}
			}
			setMaxWait(c.order, time.Minute)
			var wg sync.WaitGroup
			for p, q := range queues {
				wg.Go(func() {
					for start := 0; start < len(q); start += inFlight {
						window := q[start:min(start+inFlight, len(q))]
						var calls sync.WaitGroup
						for i := len(window) - 1; i >= 0; i-- {
							ctx := kafkaCtx(context.Background(), p, int64(start+i+1))
							calls.Go(func() {
								if err := c.ConsumeLogs(ctx, window[i]); err != nil {
									t.Error(err)
								}
							})
							if i > 0 {
								awaitWaiting(t, c.order, p, len(window)-i)
							}
						}
						calls.Wait()
					}
				})
			}
			wg.Wait()
			checkWebhookSpans(t, scenario, spansOf(&sink.TracesSink), true)
			skipped := auditconvtest.MetricSum(t, tel, "otelcol_k8s_audit_diffs_skipped", "")
			webhook := int64(0)
			for _, w := range goldenByID(t, scenario) {
				if _, ok := w.Attributes().Get("k8s.object.diff.skipped"); ok {
					webhook++
				}
			}
			if skipped != webhook {
				t.Errorf("%d diffs skipped, the webhook skipped %d", skipped, webhook)
			}
			skippedOrdered += skipped
			if n := auditconvtest.MetricSum(t, tel, "otelcol_k8s_audit_offset_order_skips", ""); n != 0 {
				t.Errorf("%d calls out of offset order", n)
			}

			unordered, utel := newTestConnector(t, new(slowSink), func(cfg *Config) { cfg.OffsetOrder.MaxWait = 0 })
			for p, q := range queues {
				for start := 0; start < len(q); start += inFlight {
					window := q[start:min(start+inFlight, len(q))]
					for i := len(window) - 1; i >= 0; i-- {
						if err := unordered.ConsumeLogs(kafkaCtx(context.Background(), p, int64(start+i+1)), window[i]); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			skippedUnordered += auditconvtest.MetricSum(t, utel, "otelcol_k8s_audit_diffs_skipped", "")
		})
	}
	if skippedUnordered <= skippedOrdered {
		t.Errorf("diffs skipped: %d out of offset order, %d in it: the scenarios put no object twice in a window", skippedUnordered, skippedOrdered)
	}
	t.Logf("diffs skipped: %d in offset order, %d converted in reverse windows", skippedOrdered, skippedUnordered)
}

// A call refused for want of max_in_flight_bytes takes its turn all the same: the offsets after
// it go without waiting for its retry, which then comes late, counted.
func TestOffsetOrderARefusedCallHoldsUpNobody(t *testing.T) {
	sink := new(consumertest.TracesSink)
	c, tel := newTestConnector(t, sink, nil)
	setMaxWait(c.order, time.Millisecond)
	if err := c.ConsumeLogs(kafkaCtx(context.Background(), 0, 0), plog.NewLogs()); err != nil {
		t.Fatal(err)
	}
	setMaxWait(c.order, time.Minute)

	others := c.inFlight.Max() - 1024
	if !c.inFlight.Acquire(others) {
		t.Fatal("could not hold the budget")
	}
	refused := logsOf(str([]byte(auditconvtest.EventList("a", "b"))))
	if err := c.ConsumeLogs(kafkaCtx(context.Background(), 0, 1), refused); err == nil || consumererror.IsPermanent(err) {
		t.Fatalf("offset 1 while the budget is held: %v, want a retryable error", err)
	}
	c.inFlight.Release(others)
	// With max_wait a minute, offset 2 would hang here had offset 1 kept its place.
	if err := c.ConsumeLogs(kafkaCtx(context.Background(), 0, 2), logsOf(str([]byte(auditconvtest.EventList("c"))))); err != nil {
		t.Fatal(err)
	}
	if err := c.ConsumeLogs(kafkaCtx(context.Background(), 0, 1), refused); err != nil {
		t.Fatal(err)
	}
	if sink.SpanCount() != 3 {
		t.Fatalf("%d spans, want 3", sink.SpanCount())
	}
	if gaps, late := orderSkips(t, tel); late != 1 || gaps != 0 {
		t.Fatalf("%d late, %d gaps; want the retry late and no gap", late, gaps)
	}
}

// Client metadata is also what an OTLP receiver with include_metadata makes of a client's
// headers, so a sender can name any partition and offset. What it can do with them is bounded:
// a name Kafka would not allow orders nothing and is not remembered; an offset far ahead of a
// real partition holds its own call at most max_wait and makes the partition's next calls late
// (converted at once, counted), and no span is lost.
func TestOffsetOrderForgedMetadataIsBounded(t *testing.T) {
	sink := new(consumertest.TracesSink)
	c, tel := newTestConnector(t, sink, nil)
	forged := client.NewContext(context.Background(), client.Info{Metadata: client.NewMetadata(map[string][]string{
		"kafka.topic": {strings.Repeat("t", 1<<20)}, "kafka.partition": {"0"}, "kafka.offset": {"1"},
	})})
	if err := c.ConsumeLogs(forged, logsOf(str([]byte(auditconvtest.EventList("f"))))); err != nil {
		t.Fatal(err)
	}
	c.order.mu.Lock()
	kept := len(c.order.parts)
	c.order.mu.Unlock()
	if kept != 0 {
		t.Fatalf("a megabyte topic name was kept: %d partitions", kept)
	}

	// A real partition, then a forged offset far ahead of it, then the real partition again.
	setMaxWait(c.order, 10*time.Millisecond)
	for _, call := range []struct {
		offset int64
		event  string
	}{{0, "a"}, {1 << 40, "x"}, {1, "b"}, {2, "c"}} {
		if err := c.ConsumeLogs(kafkaCtx(context.Background(), 0, call.offset), logsOf(str([]byte(auditconvtest.EventList(call.event))))); err != nil {
			t.Fatal(err)
		}
	}
	if sink.SpanCount() != 5 {
		t.Fatalf("%d spans, want all 5", sink.SpanCount())
	}
	if gaps, late := orderSkips(t, tel); gaps != 1 || late != 2 {
		t.Fatalf("%d gaps, %d late; want the forged offset's gap and both later calls late", gaps, late)
	}
}

// orderSkips reads the offset_order_skips counter: gaps given up, and late calls.
func orderSkips(t *testing.T, tel *componenttest.Telemetry) (gaps, late int64) {
	t.Helper()
	const name = "otelcol_k8s_audit_offset_order_skips"
	return auditconvtest.MetricSum(t, tel, name, orderSkipGap), auditconvtest.MetricSum(t, tel, name, orderSkipLate)
}
