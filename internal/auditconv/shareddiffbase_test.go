package auditconv

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/otel/attribute"
	otelmetric "go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"sigs.k8s.io/yaml"

	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/internal/redisconf"
	"github.com/kubetrail/kubetrail/internal/redistest"
)

// sharedRedisAddr is the redis-server `make test` starts when none answers.
const sharedRedisAddr = redistest.SharedAddr

// sharedSettings are the defaults with a shared diff base on the test's redis-server, under a
// key prefix of the test's own.
func sharedSettings(t testing.TB, addr string) *Settings {
	t.Helper()
	s := defaultSettings()
	sh := defaultSharedDiffBase()
	sh.Redis.Addresses = []string{addr}
	sh.Redis.KeyPrefix = fmt.Sprintf("kubetrail-test:%s:%d:", t.Name(), time.Now().UnixNano())
	s.SharedDiffBase = configoptional.Some(sh)
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	return s
}

// startedReplica is a converter of s, started, counting its diff-base records with counter.
func startedReplica(t testing.TB, s *Settings, counter otelmetric.Int64Counter) *Converter {
	t.Helper()
	c := New(Options{Settings: *s, ScopeName: goldenScope, ScopeVersion: "test", Telemetry: Telemetry{DiffBaseRecords: counter}})
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// recordsCounter is the diff-base counter of a meter provider read by rd.
func recordsCounter(t testing.TB, rd *metric.ManualReader) otelmetric.Int64Counter {
	t.Helper()
	mp := metric.NewMeterProvider(metric.WithReader(rd))
	counter, err := mp.Meter("test").Int64Counter("otelcol_k8s_audit_diff_base_records")
	if err != nil {
		t.Fatal(err)
	}
	return counter
}

// diffBaseAttribute is the attribute of otelcol_k8s_audit_diff_base_records as the k8s_audit
// receiver's and connector's metadata.yaml name it, which their documentation.md and READMEs
// tell users to query: records reads the counter by it, so that the conversion exporting it
// under another name (it did, as reason) fails every test that counts records.
func diffBaseAttribute(t testing.TB) string {
	t.Helper()
	names := map[string]bool{}
	for _, path := range []string{"../../receiver/k8sauditreceiver/metadata.yaml", "../../connector/k8sauditconnector/metadata.yaml"} {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var md struct {
			Attributes map[string]struct {
				NameOverride string `json:"name_override"`
			} `json:"attributes"`
			Telemetry struct {
				Metrics map[string]struct {
					Attributes []string `json:"attributes"`
				} `json:"metrics"`
			} `json:"telemetry"`
		}
		if err := yaml.Unmarshal(raw, &md); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		// The connector labels every metric input=connector besides (its README, Telemetry).
		attrs := slices.DeleteFunc(md.Telemetry.Metrics["k8s_audit_diff_base_records"].Attributes, func(a string) bool { return a == "input" })
		if len(attrs) != 1 {
			t.Fatalf("%s: k8s_audit_diff_base_records has attributes %v, want one besides input", path, attrs)
		}
		name := md.Attributes[attrs[0]].NameOverride
		if name == "" {
			name = attrs[0]
		}
		names[name] = true
	}
	if len(names) != 1 {
		t.Fatalf("the receiver and the connector name the diff-base attribute differently: %v", names)
	}
	for n := range names {
		return n
	}
	return ""
}

// records reads the diff-base counter by result.
func records(t testing.TB, rd *metric.ManualReader) map[string]int64 {
	t.Helper()
	key := diffBaseAttribute(t)
	var rm metricdata.ResourceMetrics
	if err := rd.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, dp := range sum.DataPoints {
					r, ok := dp.Attributes.Value(attribute.Key(key))
					if !ok {
						t.Fatalf("a diff-base record counted without %s: %v", key, dp.Attributes.ToSlice())
					}
					got[r.AsString()] += dp.Value
				}
			}
		}
	}
	return got
}

// scenarioEvents are a scenario's recorded webhook events in arrival order.
func scenarioEvents(t testing.TB, scenario string) []Event {
	t.Helper()
	return slices.Concat(scenarioPosts(t, scenario)...)
}

// diffsByAuditID converts the events in batches of size n, handing batch i to replica
// i % len(replicas), and returns what each write's span says of its diff: the diff event's
// attributes, or why it has none.
func diffsByAuditID(events []Event, n int, replicas ...*Converter) map[string]string {
	got := map[string]string{}
	for i, b := 0, 0; i < len(events); i, b = i+n, b+1 {
		var st Stats
		td := replicas[b%len(replicas)].convert(goldenCluster, events[i:min(i+n, len(events))], &st)
		for _, s := range allSpans(td) {
			var parts []string
			if v, ok := s.Attributes().Get(attrDiffSkipped); ok {
				parts = append(parts, "skipped="+v.AsString())
			}
			if e, ok := spanEvent(s, model.EventObjectDiff); ok {
				e.Attributes().Range(func(k string, v pcommon.Value) bool {
					parts = append(parts, k+"="+v.AsString())
					return true
				})
			}
			slices.Sort(parts)
			got[attrStr(s.Attributes(), model.AttrAuditID)] = strings.Join(parts, " ")
		}
	}
	return got
}

// TestSharedDiffBaseGivesOneCollectorsDiffs replays every recorded scenario through two replicas
// on one real redis-server, batches alternating between them, and requires every span's diff
// (or the reason it has none) to be the one a single collector gives. Without the shared base
// the same alternation gives other diffs, which the control below checks, so the comparison can
// fail.
func TestSharedDiffBaseGivesOneCollectorsDiffs(t *testing.T) {
	requireSharedRedis(t)
	for _, scenario := range scenarios(t) {
		events := scenarioEvents(t, scenario)
		for _, n := range []int{1, 7} {
			t.Run(fmt.Sprintf("%s/batches_of_%d", scenario, n), func(t *testing.T) {
				want := diffsByAuditID(events, n, newConverter(defaultSettings(), "test"))

				s := sharedSettings(t, sharedRedisAddr)
				rd := metric.NewManualReader()
				counter := recordsCounter(t, rd)
				a, b := startedReplica(t, s, counter), startedReplica(t, s, counter)
				got := diffsByAuditID(events, n, a, b)
				compareDiffs(t, want, got)
				counts := records(t, rd)
				if counts[ReasonSharedFailed] != 0 || counts[ReasonSharedUnreadable] != 0 {
					t.Errorf("diff base records %v: none may fail or be unreadable", counts)
				}

				alone := diffsByAuditID(events, n, newConverter(defaultSettings(), "test"), newConverter(defaultSettings(), "test"))
				if differs(want, alone) && counts[ReasonSharedAdopted] == 0 {
					t.Errorf("replicas without a shared base diff otherwise, yet no body was adopted from Redis: %v", counts)
				}
			})
		}
	}
}

// TestTwoReplicasWithoutSharedBaseDiffOtherwise is the control: on the deployment scenario the
// alternation itself changes diffs when nothing is shared (a skipped base, a missing diff).
func TestTwoReplicasWithoutSharedBaseDiffOtherwise(t *testing.T) {
	events := scenarioEvents(t, "deployment")
	want := diffsByAuditID(events, 1, newConverter(defaultSettings(), "test"))
	alone := diffsByAuditID(events, 1, newConverter(defaultSettings(), "test"), newConverter(defaultSettings(), "test"))
	if !differs(want, alone) {
		t.Fatal("two replicas without a shared base gave a single collector's diffs: the shared-base test could not fail")
	}
}

func differs(a, b map[string]string) bool {
	for id, v := range a {
		if b[id] != v {
			return true
		}
	}
	return len(a) != len(b)
}

func compareDiffs(t *testing.T, want, got map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%d spans, a single collector gives %d", len(got), len(want))
	}
	bad := 0
	for id, w := range want {
		if g := got[id]; g != w {
			if bad++; bad <= 5 {
				t.Errorf("audit %s:\n  two replicas: %s\n  one collector: %s", id, g, w)
			}
		}
	}
	if bad > 5 {
		t.Errorf("... %d spans differ in all", bad)
	}
}

func requireSharedRedis(t testing.TB) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: sharedRedisAddr})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("shared diff base tests need redis-server on %s (make redis): %v", sharedRedisAddr, err)
	}
}

// TestSharedDiffBaseKeepsRedactedValuesOut: a Secret's body goes to Redis with its values
// masked, never in clear or base64, and without the replica's tags; the next replica, whose own
// body carries tags, does not take the mask for a change of a value that did not change.
func TestSharedDiffBaseKeepsRedactedValuesOut(t *testing.T) {
	requireSharedRedis(t)
	s := sharedSettings(t, sharedRedisAddr)
	rd := metric.NewManualReader()
	counter := recordsCounter(t, rd)
	a, b := startedReplica(t, s, counter), startedReplica(t, s, counter)
	ref := objectReference{Resource: "secrets", Namespace: "default", Name: "creds", APIVersion: "v1"}
	updated := ref
	updated.UID, updated.ResourceVersion = "s-1", "1"

	convertOne(t, a, event("c", "create", "alice", ref, 201, withRequest(secretBody("", secretValues[0])), withResponse(secretBody("1", secretValues[0]))))
	client := redis.NewClient(&redis.Options{Addr: sharedRedisAddr})
	defer client.Close()
	key := s.SharedDiffBase.Get().Redis.KeyPrefix + sharedKeyPart + "c1/name//secrets/default/creds"
	rec, err := client.Get(context.Background(), key).Bytes()
	if err != nil {
		t.Fatalf("the create's body was not shared under %s: %v", key, err)
	}
	rv, uid, z, ok := parseSharedRecord(rec)
	if !ok || rv != "1" || uid != "s-1" {
		t.Fatalf("record header = %q %q %v", rv, uid, ok)
	}
	body, err := a.shared.dec.DecodeAll(z, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range secretValues {
		for _, form := range []string{v, base64.StdEncoding.EncodeToString([]byte(v))} {
			if bytes.Contains(body, []byte(form)) {
				t.Fatalf("secret value %q (as %q) went to Redis: %s", v, form, body)
			}
		}
	}
	if bytes.Contains(body, []byte(tagPrefix)) || !bytes.Contains(body, []byte(`"password":"<redacted>"`)) {
		t.Fatalf("the shared body must carry the mask, not a tag: %s", body)
	}

	td, _ := convertOne(t, b, event("u", "update", "alice", updated, 200,
		withRequest(secretBody("1", secretValues[0])), withResponse(strings.Replace(secretBody("2", secretValues[0]), `"team":"payments"`, `"team":"billing"`, 1))))
	diff := diffOf(t, allSpans(td)[0])
	if diff["metadata.annotations.team"] != `"payments" -> "billing"` {
		t.Fatalf("the update was not diffed against the shared body: %v", diff)
	}
	for path := range diff {
		if strings.HasPrefix(path, "data.") {
			t.Fatalf("an unchanged secret value shows as changed across replicas: %v", diff)
		}
	}
	if got := records(t, rd); got[ReasonSharedAdopted] != 1 {
		t.Fatalf("records = %v, want one adopted", got)
	}
}

// TestSharedDiffBaseFailures: what Redis cannot give costs diffs, counted, never spans.
func TestSharedDiffBaseFailures(t *testing.T) {
	requireSharedRedis(t)
	update := func(id, rv string, replicas int) Event {
		return event(id, "update", "alice", deployRef(rv), 200, withResponse(deployment(fmt.Sprint(mustAtoi(t, rv)+1), replicas, "nginx:1")))
	}
	create := event("c", "create", "alice", deployRef(""), 201, withResponse(deployment("1", 1, "nginx:1")))

	t.Run("unreachable", func(t *testing.T) {
		s := sharedSettings(t, "127.0.0.1:1") // nothing listens on port 1
		rd := metric.NewManualReader()
		c := startedReplica(t, s, recordsCounter(t, rd)) // an absent Redis does not fail Start
		td, _ := convertOne(t, c, create, update("u", "1", 3))
		if td.SpanCount() != 2 {
			t.Fatalf("spans = %d, want 2: an outage costs no span", td.SpanCount())
		}
		if d := diffOf(t, allSpans(td)[1]); d["spec.replicas"] != "1 -> 3" {
			t.Fatalf("the replica's own body is the base in an outage: %v", d)
		}
		if got := records(t, rd); got[ReasonSharedFailed] != 2 {
			t.Fatalf("records = %v, want the read and the write of the batch failed (2)", got)
		}
	})
	t.Run("a Redis that does not answer is asked again only after a pause", func(t *testing.T) {
		// A server that takes connections and never answers: each round trip costs its timeout.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var accepted atomic.Int32
		go func() {
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				accepted.Add(1)
				t.Cleanup(func() { _ = conn.Close() })
			}
		}()
		t.Cleanup(func() { _ = ln.Close() })
		s := sharedSettings(t, ln.Addr().String())
		s.SharedDiffBase.Get().Redis.Timeout = 100 * time.Millisecond
		rd := metric.NewManualReader()
		c := startedReplica(t, s, recordsCounter(t, rd))
		clock := time.Now()
		c.shared.now = func() time.Time { return clock }
		dialed := accepted.Load() // Start's ping
		for _, id := range []string{"u1", "u2"} {
			if td, _ := convertOne(t, c, create, update(id, "1", 3)); td.SpanCount() != 2 {
				t.Fatalf("spans = %d", td.SpanCount())
			}
		}
		if n := accepted.Load() - dialed; n != 1 {
			t.Fatalf("%d connections for two batches, want 1: after the first timeout Redis waits out its pause", n)
		}
		if got := records(t, rd); got[ReasonSharedFailed] != 4 {
			t.Fatalf("records = %v, want the 4 records of both batches failed", got)
		}
		clock = clock.Add(minPause)
		convertOne(t, c, update("u3", "1", 4))
		if n := accepted.Load() - dialed; n != 2 {
			t.Fatalf("%d connections after the pause, want Redis asked again", n)
		}
	})
	t.Run("a configuration Redis refuses fails Start", func(t *testing.T) {
		s := sharedSettings(t, sharedRedisAddr)
		s.SharedDiffBase.Get().Redis.DB = 99 // a database the server does not have
		c := New(Options{Settings: *s})
		err := c.Start(context.Background())
		if err == nil || !strings.Contains(err.Error(), "shared_diff_base.redis") || !strings.Contains(err.Error(), "DB index") {
			t.Fatalf("Start = %v, want Redis's refusal naming shared_diff_base.redis", err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("unreadable record", func(t *testing.T) {
		s := sharedSettings(t, sharedRedisAddr)
		rd := metric.NewManualReader()
		c := startedReplica(t, s, recordsCounter(t, rd))
		client := redis.NewClient(&redis.Options{Addr: sharedRedisAddr})
		defer client.Close()
		key := s.SharedDiffBase.Get().Redis.KeyPrefix + sharedKeyPart + "c1/name/apps/deployments/default/demo"
		if err := client.Set(context.Background(), key, "150\nd-1\nnot zstd", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		td, _ := convertOne(t, c, update("u", "98", 3))
		if td.SpanCount() != 1 {
			t.Fatalf("spans = %d", td.SpanCount())
		}
		if got := records(t, rd); got[ReasonSharedUnreadable] != 1 {
			t.Fatalf("records = %v, want one unreadable", got)
		}
	})
	t.Run("a record cut short is counted and the replica's own body stays the base", func(t *testing.T) {
		s := sharedSettings(t, sharedRedisAddr)
		rd := metric.NewManualReader()
		c := startedReplica(t, s, recordsCounter(t, rd))
		convertOne(t, c, create) // the replica's own body, resourceVersion 1
		client := redis.NewClient(&redis.Options{Addr: sharedRedisAddr})
		defer client.Close()
		// A newer body of the object, whose zstd frame lost its end on the way.
		body := []byte(deployment("7", 5, strings.Repeat("registry.example/nginx:", 200)))
		z := c.shared.enc.EncodeAll(body, nil)
		key := s.SharedDiffBase.Get().Redis.KeyPrefix + sharedKeyPart + "c1/name/apps/deployments/default/demo"
		if err := client.Set(context.Background(), key, append([]byte("7\nd-1\n"), z[:len(z)-8]...), time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		td, _ := convertOne(t, c, update("u", "1", 3))
		if got := records(t, rd); got[ReasonSharedUnreadable] != 1 {
			t.Fatalf("records = %v, want one unreadable", got)
		}
		if d := diffOf(t, allSpans(td)[0]); d["spec.replicas"] != "1 -> 3" {
			t.Fatalf("the update is diffed against the replica's own body: %v", d)
		}
	})
	t.Run("too large and superseded", func(t *testing.T) {
		s := sharedSettings(t, sharedRedisAddr)
		rd := metric.NewManualReader()
		counter := recordsCounter(t, rd)
		a := startedReplica(t, s, counter)
		small := *s
		sh := *s.SharedDiffBase.Get()
		sh.MaxRecordBytes = 16
		small.SharedDiffBase = configoptional.Some(sh)
		tiny := startedReplica(t, &small, counter)
		convertOne(t, tiny, create)
		if got := records(t, rd); got[ReasonSharedTooLarge] != 1 || got[ReasonSharedWritten] != 0 {
			t.Fatalf("records = %v, want one too_large and nothing written", got)
		}
		convertOne(t, a, create, update("u1", "1", 2), update("u2", "2", 3)) // leaves rv 3
		b := startedReplica(t, s, counter)
		convertOne(t, b, create) // rv 1 after Redis holds rv 3
		if got := records(t, rd); got[ReasonSharedWritten] != 1 || got[ReasonSharedSuperseded] != 1 {
			t.Fatalf("records = %v, want one written and one superseded", got)
		}
	})
}

// A forged or broken record cannot take the diff base over: one whose resourceVersion is
// implausibly far ahead of the write's is not adopted, one over max_record_bytes is not fetched
// whole, one of another Redis type is not read; each is counted, the write is diffed against the
// replica's own body, and the object's next write replaces the record, which other replicas then
// adopt. Against a real redis-server of the test's own, whose output bytes show what was
// fetched.
func TestSharedDiffBaseRefusesAndReplacesHostileRecords(t *testing.T) {
	requireSharedRedis(t) // redis-server is installed
	srv := redistest.Start(t, 0)
	update := func(id, rv string, replicas int) Event {
		return event(id, "update", "alice", deployRef(rv), 200, withResponse(deployment(fmt.Sprint(mustAtoi(t, rv)+1), replicas, "nginx:1")))
	}
	create := event("c", "create", "alice", deployRef(""), 201, withResponse(deployment("1", 1, "nginx:1")))
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	outputBytes := func() int64 {
		info, err := client.Info(ctx, "stats").Result()
		if err != nil {
			t.Fatal(err)
		}
		_, rest, _ := strings.Cut(info, "total_net_output_bytes:")
		n, _ := strconv.ParseInt(strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0]), 10, 64)
		return n
	}
	for _, tc := range []struct {
		name   string
		plant  func(key string, enc func([]byte) []byte) error
		result string
	}{
		{"a record far ahead of the write", func(key string, enc func([]byte) []byte) error {
			rec := append([]byte("999999999\nd-1\n"), enc([]byte(deployment("999999999", 9, "evil:1")))...)
			return client.Set(ctx, key, rec, time.Minute).Err()
		}, ReasonSharedUnreadable},
		{"a record of 4 MB", func(key string, _ func([]byte) []byte) error {
			return client.Set(ctx, key, "999999999\nd-1\n"+strings.Repeat("z", 4<<20), time.Minute).Err()
		}, ReasonSharedTooLarge},
		{"a list under the key", func(key string, _ func([]byte) []byte) error {
			return client.RPush(ctx, key, "999999999").Err()
		}, ReasonSharedUnreadable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := sharedSettings(t, srv.Addr())
			rd := metric.NewManualReader()
			counter := recordsCounter(t, rd)
			a := startedReplica(t, s, counter)
			convertOne(t, a, create) // a's own body, resourceVersion 1; Redis holds it too
			key := s.SharedDiffBase.Get().Redis.KeyPrefix + sharedKeyPart + "c1/name/apps/deployments/default/demo"
			if err := client.Del(ctx, key).Err(); err != nil {
				t.Fatal(err)
			}
			if err := tc.plant(key, func(b []byte) []byte { return a.shared.enc.EncodeAll(b, nil) }); err != nil {
				t.Fatal(err)
			}
			before := outputBytes()
			td, _ := convertOne(t, a, update("u1", "1", 3))
			if sent := outputBytes() - before; sent > 16<<10 { // the record is 4 MB, a real one 1-2 KB
				t.Errorf("Redis sent %d bytes for one batch: the record was fetched whole", sent)
			}
			if got := records(t, rd); got[tc.result] != 1 || got[ReasonSharedAdopted] != 0 || got[ReasonSharedWritten] != 2 {
				t.Fatalf("records = %v, want one %s, none adopted, the create's and the update's written", got, tc.result)
			}
			if d := diffOf(t, allSpans(td)[0]); d["spec.replicas"] != "1 -> 3" {
				t.Fatalf("the update is not diffed against the replica's own body: %v", d)
			}
			head, err := client.GetRange(ctx, key, 0, 1).Result()
			if err != nil || head != "2\n" {
				t.Fatalf("Redis holds %q (%v), want the update's record (resourceVersion 2)", head, err)
			}
			// Another replica adopts the good record; neither says out_of_order.
			b := startedReplica(t, s, counter)
			td, st := convertOne(t, b, update("u2", "2", 4))
			if d := diffOf(t, allSpans(td)[0]); d["spec.replicas"] != "3 -> 4" || st.SkippedDiffs(ReasonDiffOutOfOrder) != 0 {
				t.Fatalf("the next replica's diff is %v, %d out of order: want 3 -> 4 from the replaced record", d, st.SkippedDiffs(ReasonDiffOutOfOrder))
			}
			td, st = convertOne(t, a, update("u3", "3", 5))
			if d := diffOf(t, allSpans(td)[0]); d["spec.replicas"] != "4 -> 5" || st.SkippedDiffs(ReasonDiffOutOfOrder) != 0 {
				t.Fatalf("the first replica's next diff is %v: want 4 -> 5", d)
			}
		})
	}
}

// farAhead takes a record for forged only past maxRVLead, and never when the versions do not
// compare as numbers.
func TestFarAheadIsPastTheLeadOfAWindowOfWrites(t *testing.T) {
	for _, tc := range []struct {
		rv, of string
		want   bool
	}{
		{"100", "50", false},
		{fmt.Sprint(1000 + maxRVLead), "1000", false},
		{fmt.Sprint(1001 + maxRVLead), "1000", true},
		{"999999999", "1200", true},
		{"50", "100", false},
		{strings.Repeat("9", 30), "1200", true},
		{"opaque", "1200", false},
		{"999999999", "opaque", false},
	} {
		if got := farAhead(tc.rv, tc.of); got != tc.want {
			t.Errorf("farAhead(%s, %s) = %v, want %v", tc.rv, tc.of, got, tc.want)
		}
	}
}

func mustAtoi(t testing.TB, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSharedDiffBaseOnARedisCluster: on a Cluster the batch's records live on several nodes, so
// they are read and written key by key in one pipeline; two replicas still diff the recorded
// deployment as one collector.
func TestSharedDiffBaseOnARedisCluster(t *testing.T) {
	addrs := redistest.Cluster(t)
	s := sharedSettings(t, addrs[0])
	sh := *s.SharedDiffBase.Get()
	sh.Redis.Addresses, sh.Redis.Mode = addrs, redisconf.ModeCluster
	s.SharedDiffBase = configoptional.Some(sh)
	events := scenarioEvents(t, "deployment")
	want := diffsByAuditID(events, 7, newConverter(defaultSettings(), "test"))
	rd := metric.NewManualReader()
	counter := recordsCounter(t, rd)
	a, b := startedReplica(t, s, counter), startedReplica(t, s, counter)
	if !a.shared.cluster {
		t.Fatal("mode cluster must be taken for a Cluster")
	}
	compareDiffs(t, want, diffsByAuditID(events, 7, a, b))
	if got := records(t, rd); got[ReasonSharedAdopted] == 0 || got[ReasonSharedWritten] == 0 || got[ReasonSharedFailed] != 0 {
		t.Fatalf("records = %v: bodies must be written and adopted, none failed", got)
	}
}
