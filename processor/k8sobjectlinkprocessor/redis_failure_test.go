package k8sobjectlinkprocessor

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/idmap"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/metadata"
)

// observed is a processor's settings with its logs and metrics captured.
type observed struct {
	set    processor.Settings
	logs   *observer.ObservedLogs
	reader *sdkmetric.ManualReader
}

func newObserved(t *testing.T) *observed {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	set := processortest.NewNopSettings(metadata.Type)
	set.Logger = zap.New(core)
	set.MeterProvider = mp
	return &observed{set: set, logs: logs, reader: reader}
}

// counter sums a counter's data points that carry the given attribute values.
func (o *observed) counter(t *testing.T, name string, attrs ...attribute.KeyValue) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := o.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	return sumOf(rm, name, attrs...)
}

func reason(r string) attribute.KeyValue { return attribute.String(attrReason, r) }

const redisErrors = "otelcol_k8s_object_link_redis_errors"

func TestRedisConfigurationErrorsFailStartWithRedisAnswer(t *testing.T) {
	requireRedis(t)
	secured := startThrowawayRedis(t, 0, "--requirepass", "right-password")
	tests := []struct {
		name     string
		addr     string
		password string
		db       int
		want     string // in Redis's own words
	}{
		{"a wrong password", secured.Addr(), "wrong-password", 0, "WRONGPASS"},
		{"no password where one is required", secured.Addr(), "", 0, "NOAUTH"},
		{"a database index the server does not have", redisAddr, "", 99, "DB index"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := redisConfig(t, tt.addr)
			cfg.IDMap.Redis.Password = configopaque.String(tt.password)
			cfg.IDMap.Redis.DB = tt.db
			o := newObserved(t)
			p, err := newProcessor(o.set, cfg, consumertest.NewNop(), newFakeClock(time.Now()))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = p.Shutdown(context.Background()) }()
			err = p.Start(context.Background(), componenttest.NewNopHost())
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "id_map.redis") {
				t.Fatalf("Start() = %v, want an id_map.redis error carrying Redis's %q", err, tt.want)
			}
			if strings.Contains(err.Error(), tt.password) && tt.password != "" {
				t.Fatalf("the error must not show the password: %v", err)
			}
			if n := o.counter(t, redisErrors, reason("auth")); n != 1 {
				t.Fatalf("redis_errors{reason=auth} = %d, want 1", n)
			}
		})
	}
	t.Run("the right password starts", func(t *testing.T) {
		cfg := redisConfig(t, secured.Addr())
		cfg.IDMap.Redis.Password = "right-password"
		h := newHarness(t, cfg, newFakeClock(time.Now()))
		h.consume(audit(deploy, "ok", time.Now()))
		if h.p.redis.Down() {
			t.Fatal("Redis with the right password must be in use")
		}
	})
}

// freeLoopbackPort returns a port nothing listens on (at the time of the call).
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return port
}

func TestAnUnreachableRedisAtStartIsARecoverableErrorAndIngestContinues(t *testing.T) {
	port := freeLoopbackPort(t)
	cfg := redisConfig(t, "127.0.0.1:"+strconv.Itoa(port))
	cfg.IDMap.Redis.Timeout = 200 * time.Millisecond
	cfg.IDMap.Redis.RetryMaxBackoff = 100 * time.Millisecond
	o := newObserved(t)
	host := &statusHost{Host: componenttest.NewNopHost()}
	sink := new(consumertest.TracesSink)
	p, err := newProcessor(o.set, cfg, sink, newFakeClock(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background(), host); err != nil {
		t.Fatalf("an unreachable Redis must not fail Start: %v", err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	if st := host.statuses(); len(st) == 0 || st[0] != componentstatus.StatusRecoverableError {
		t.Fatalf("statuses = %v, want a recoverable error first", st)
	}
	// Connection refused, or the ping's timeout while go-redis retries the dial.
	if n := o.counter(t, redisErrors, reason("unavailable")) + o.counter(t, redisErrors, reason("timeout")); n < 1 {
		t.Fatal("the failed start-up ping must be counted as reason=unavailable or timeout")
	}
	if o.logs.FilterMessageSnippet("Redis ID map unavailable").Len() == 0 {
		t.Fatal("the outage must be logged")
	}
	h := &harness{t: t, p: p, sink: sink}
	base := model.WindowStart(time.Now(), model.DefaultWindow)
	h.consume(audit(deploy, "during-outage", base.Add(time.Second)))
	assertChild(t, h.one("Deployment default/demo"), h.activitySpan("audit during-outage"))

	// Redis comes up: the store reconnects by itself and says so.
	startThrowawayRedis(t, port)
	waitFor(t, func() bool {
		st := host.statuses()
		return st[len(st)-1] == componentstatus.StatusOK
	})
}

func TestRunTimeRedisErrorsAreCountedLoggedOnceAndReported(t *testing.T) {
	srv := startThrowawayRedis(t, 0, "--requirepass", "first")
	cfg := redisConfig(t, srv.Addr())
	cfg.IDMap.Redis.Password = "first"
	cfg.IDMap.Redis.RetryMaxBackoff = time.Hour // one probe attempt in this test: no time-based result
	o := newObserved(t)
	host := &statusHost{Host: componenttest.NewNopHost()}
	sink := new(consumertest.TracesSink)
	clk := newFakeClock(time.Now())
	p, err := newProcessor(o.set, cfg, sink, clk)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background(), host); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	h := &harness{t: t, p: p, sink: sink, clock: clk}
	base := model.WindowStart(time.Now(), model.DefaultWindow)

	// Per-record reply errors: two foreign keys, two batches; counted twice, logged once.
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: "first"})
	defer raw.Close()
	for _, o := range []model.Object{rsA, rsB} {
		if err := raw.RPush(context.Background(), cfg.IDMap.Redis.KeyPrefix+idmap.AssignmentKey(o.Key(), base), "x").Err(); err != nil {
			t.Fatal(err)
		}
	}
	h.consume(audit(rsA, "r1", base.Add(time.Second)))
	h.consume(audit(rsB, "r2", base.Add(time.Second)))
	if n := o.counter(t, redisErrors, reason("reply")); n < 2 {
		t.Fatalf("redis_errors{reason=reply} = %d, want one per failed record operation (at least 2)", n)
	}
	if n := o.logs.FilterMessageSnippet("Redis rejected a record operation").Len(); n != 1 {
		t.Fatalf("%d log lines for two reply errors within a minute, want 1 (rate-limited)", n)
	}

	// The password is rotated on the server while the collector runs: the next connection is
	// refused. That is counted as auth, logged and reported; spans keep flowing from memory.
	if err := raw.ConfigSet(context.Background(), "requirepass", "second").Err(); err != nil {
		t.Fatal(err)
	}
	if err := raw.Do(context.Background(), "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	h.consume(audit(podA1, "p1", base.Add(2*time.Second)))
	h.activitySpan("audit p1")
	// The batch finds its connection closed (reason unavailable); the reconnection attempt
	// that follows is refused (reason auth).
	waitFor(t, func() bool { return o.counter(t, redisErrors, reason("auth")) >= 1 })
	refused := 0
	for _, e := range o.logs.FilterMessageSnippet("Redis ID map unavailable").All() {
		if strings.Contains(e.ContextMap()["error"].(string), "WRONGPASS") && e.ContextMap()["reason"] == "auth" {
			refused++
		}
	}
	if refused != 1 {
		t.Fatalf("the refused password must be logged once with Redis's answer, got %d lines: %v", refused, o.logs.All())
	}
	if st := host.statuses(); len(st) == 0 || st[len(st)-1] != componentstatus.StatusRecoverableError {
		t.Fatalf("statuses = %v, want a recoverable error", st)
	}
}
