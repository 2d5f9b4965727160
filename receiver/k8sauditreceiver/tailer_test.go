package k8sauditreceiver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/kubetrail/kubetrail/internal/auditconv/auditconvtest"
	"github.com/kubetrail/kubetrail/internal/storagetest"
	"github.com/kubetrail/kubetrail/receiver/k8sauditreceiver/internal/metadata"
)

// line is one audit log line of a create with the given audit ID.
func line(id string) string {
	return `{"kind":"Event","apiVersion":"audit.k8s.io/v1",` + strings.TrimPrefix(fmt.Sprintf(auditconvtest.OneCreate, id), "{") + "\n"
}

func lines(ids ...string) string {
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(strings.ReplaceAll(line(id), "\n", " ") + "\n")
	}
	return b.String()
}

type tailEnv struct {
	path  string
	next  *switchConsumer
	store *storagetest.MemClient
	rcv   *auditReceiver
	slept []time.Duration
}

func newTailEnv(t *testing.T, startAt string) *tailEnv {
	t.Helper()
	cfg := createDefaultConfig().(*Config)
	cfg.ServerConfig.NetAddr.Endpoint = ""
	cfg.Cluster = "c1"
	cfg.StartAt = startAt
	env := &tailEnv{path: filepath.Join(t.TempDir(), "audit.log"), next: &switchConsumer{}, store: storagetest.NewMemClient()}
	cfg.Files = []string{env.path}
	r, err := newTracesReceiver(receivertest.NewNopSettings(metadata.Type), cfg, env.next)
	if err != nil {
		t.Fatal(err)
	}
	env.rcv = r
	return env
}

// tailer makes a tailer as Start would, with sleeps recorded instead of slept.
func (e *tailEnv) tailer(withStorage bool) *tailer {
	var client storage.Client
	if withStorage {
		client = e.store
	}
	tl := newTailer(e.path, e.rcv.tailerDeps(), client)
	tl.sleep = func(_ context.Context, d time.Duration) bool {
		e.slept = append(e.slept, d)
		if len(e.slept) == 3 {
			e.next.refuse(nil) // the pipeline recovers after three refusals
		}
		return true
	}
	return tl
}

func (e *tailEnv) write(t *testing.T, s string) {
	t.Helper()
	f, err := os.OpenFile(e.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
}

func expectIDs(t *testing.T, next *switchConsumer, want ...string) {
	t.Helper()
	if got := next.ids(); !slices.Equal(got, want) {
		t.Fatalf("spans of audit IDs %v, want %v", got, want)
	}
}

func TestTailerFollowsAppendsAndWaitsForPartialLines(t *testing.T) {
	env := newTailEnv(t, startAtBeginning)
	tl := env.tailer(false)
	defer tl.close()
	ctx := context.Background()
	tl.poll(ctx) // no file yet: nothing, no error
	env.write(t, lines("a", "b"))
	tl.poll(ctx)
	expectIDs(t, env.next, "a", "b")
	whole := strings.TrimSuffix(lines("c"), "\n")
	env.write(t, whole[:40])
	tl.poll(ctx)
	expectIDs(t, env.next, "a", "b")
	env.write(t, whole[40:]+"\n")
	tl.poll(ctx)
	expectIDs(t, env.next, "a", "b", "c")
}

func TestTailerFollowsRenameAndCreateRotation(t *testing.T) {
	env := newTailEnv(t, startAtBeginning)
	tl := env.tailer(false)
	defer tl.close()
	ctx := context.Background()
	env.write(t, lines("a"))
	tl.poll(ctx)
	// The writer finishes the old file, it is renamed away and a new file takes its name.
	env.write(t, lines("b"))
	if err := os.Rename(env.path, env.path+".1"); err != nil {
		t.Fatal(err)
	}
	env.write(t, lines("c", "d"))
	tl.poll(ctx)
	expectIDs(t, env.next, "a", "b", "c", "d")
	env.write(t, lines("e"))
	tl.poll(ctx)
	expectIDs(t, env.next, "a", "b", "c", "d", "e")
}

func TestTailerRereadsATruncatedFile(t *testing.T) {
	env := newTailEnv(t, startAtBeginning)
	tl := env.tailer(false)
	defer tl.close()
	ctx := context.Background()
	env.write(t, lines("a", "b"))
	tl.poll(ctx)
	if err := os.Truncate(env.path, 0); err != nil {
		t.Fatal(err)
	}
	env.write(t, lines("c"))
	tl.poll(ctx)
	expectIDs(t, env.next, "a", "b", "c")
}

func TestTailerNoticesATruncationThatGrewPastTheOffset(t *testing.T) {
	env := newTailEnv(t, startAtBeginning)
	tl := env.tailer(false)
	defer tl.close()
	ctx := context.Background()
	env.write(t, lines("a"))
	tl.poll(ctx)
	// Between two polls the file is truncated and rewritten longer than it was.
	if err := os.Truncate(env.path, 0); err != nil {
		t.Fatal(err)
	}
	env.write(t, lines("b", "c", "d"))
	tl.poll(ctx)
	expectIDs(t, env.next, "a", "b", "c", "d")
}

func TestTailerResumesFromTheCheckpoint(t *testing.T) {
	env := newTailEnv(t, startAtEnd)
	env.write(t, lines("old"))
	ctx := context.Background()
	first := env.tailer(true)
	first.poll(ctx) // no checkpoint: starts at the end, skipping "old"
	env.write(t, lines("a", "b"))
	first.poll(ctx)
	first.close() // the collector stops

	env.write(t, lines("c")) // written while the collector is down
	second := env.tailer(true)
	defer second.close()
	second.poll(ctx)
	expectIDs(t, env.next, "a", "b", "c")

	t.Run("a checkpoint of a file rotated away while stopped reads the new file whole", func(t *testing.T) {
		second.close()
		if err := os.Rename(env.path, env.path+".1"); err != nil {
			t.Fatal(err)
		}
		env.write(t, lines("new-1", "new-2"))
		third := env.tailer(true)
		defer third.close()
		third.poll(ctx)
		expectIDs(t, env.next, "a", "b", "c", "new-1", "new-2")
	})
}

func TestTailerStoppedBeforeItsFirstLineResumesWhereItStarted(t *testing.T) {
	env := newTailEnv(t, startAtEnd)
	env.write(t, lines("old"))
	ctx := context.Background()
	first := env.tailer(true)
	first.poll(ctx) // no checkpoint: starts at the end, skipping "old", and reads nothing
	first.close()   // the collector stops before any line was written

	env.write(t, lines("while-down"))
	second := env.tailer(true)
	defer second.close()
	second.poll(ctx)
	expectIDs(t, env.next, "while-down")
}

func TestTailerWithoutStorageStartsAtTheEnd(t *testing.T) {
	env := newTailEnv(t, startAtEnd)
	env.write(t, lines("before-start"))
	tl := env.tailer(false)
	defer tl.close()
	tl.poll(context.Background())
	env.write(t, lines("after-start"))
	tl.poll(context.Background())
	expectIDs(t, env.next, "after-start")
}

func TestTailerRetriesARefusalWithoutAdvancingTheCheckpoint(t *testing.T) {
	env := newTailEnv(t, startAtBeginning)
	env.write(t, lines("a", "b"))
	env.next.refuse(errors.New("memory limiter: data refused"))
	tl := env.tailer(true)
	defer tl.close()
	tl.sleep = func(_ context.Context, d time.Duration) bool {
		env.slept = append(env.slept, d)
		if data, _ := env.store.Get(context.Background(), tl.key); data != nil && !strings.Contains(string(data), `"offset":0`) {
			t.Fatalf("the checkpoint moved past refused data: %s", data)
		}
		if len(env.slept) == 3 {
			env.next.refuse(nil)
		}
		return true
	}
	tl.poll(context.Background())
	expectIDs(t, env.next, "a", "b")
	if !slices.Equal(env.slept, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}) {
		t.Fatalf("backoff = %v", env.slept)
	}
	data, _ := env.store.Get(context.Background(), tl.key)
	if !strings.Contains(string(data), fmt.Sprintf(`"offset":%d`, len(lines("a", "b")))) {
		t.Fatalf("checkpoint after acceptance = %s", data)
	}

	t.Run("a permanent refusal skips the lines instead of blocking forever", func(t *testing.T) {
		env.next.refuse(consumererror.NewPermanent(errors.New("never")))
		env.write(t, lines("c"))
		tl.poll(context.Background())
		env.next.refuse(nil)
		env.write(t, lines("d"))
		tl.poll(context.Background())
		expectIDs(t, env.next, "a", "b", "d")
	})
}

func TestTailerWarnsOnceAboutALastingProblem(t *testing.T) {
	env := newTailEnv(t, startAtBeginning)
	core, logs := observer.New(zap.DebugLevel)
	env.rcv.set.Logger = zap.New(core)
	if err := os.Mkdir(env.path, 0o700); err != nil { // opens, but every read fails
		t.Fatal(err)
	}
	tl := env.tailer(false)
	defer tl.close()
	var health []string
	tl.health = func(err error) { health = append(health, fmt.Sprint(err)) }
	for range 3 {
		tl.poll(context.Background())
	}
	if n := logs.FilterLevelExact(zap.WarnLevel).Len(); n != 1 || len(health) != 1 || health[0] == "<nil>" {
		t.Fatalf("%d warnings and health %v for one lasting problem, want 1 of each: %v", n, health, logs.All())
	}

	// The problem goes away: the file is readable, which the status says too.
	tl.close()
	if err := os.Remove(env.path); err != nil {
		t.Fatal(err)
	}
	env.write(t, lines("a"))
	tl.poll(context.Background())
	expectIDs(t, env.next, "a")
	if len(health) != 2 || health[1] != "<nil>" {
		t.Fatalf("health = %v, want the problem then its end", health)
	}
}

func TestTailerSkipsLinesThatAreNotAuditEvents(t *testing.T) {
	env := newTailEnv(t, startAtBeginning)
	tl := env.tailer(false)
	defer tl.close()
	env.write(t, "not json\n"+`{"kind":"Pod","apiVersion":"v1"}`+"\n\n"+lines("a"))
	tl.poll(context.Background())
	expectIDs(t, env.next, "a")
}

func TestTailerRunStopsOnShutdown(t *testing.T) {
	env := newTailEnv(t, startAtBeginning)
	env.write(t, lines("a"))
	env.rcv.cfg.PollInterval = time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		env.tailer(false).run(ctx)
		close(done)
	}()
	for deadline := time.Now().Add(10 * time.Second); len(env.next.ids()) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatal("the running tailer never delivered the line")
		}
	}
	cancel()
	<-done
	expectIDs(t, env.next, "a")
}

// The audit log carries the same events as the webhook; tailing it must give the very spans
// the golden files hold for the webhook, whatever the batching.
func TestAuditLogFixturesGiveTheWebhookSpans(t *testing.T) {
	for _, scenario := range auditconvtest.Scenarios(t) {
		t.Run(scenario, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(auditconvtest.FixturesDir(), scenario, "audit.log"))
			if err != nil {
				t.Fatal(err)
			}
			cfg := createDefaultConfig().(*Config)
			cfg.ServerConfig.NetAddr.Endpoint = ""
			cfg.Cluster = auditconvtest.Cluster
			cfg.StartAt = startAtBeginning
			path := filepath.Join(t.TempDir(), "audit.log")
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			cfg.Files = []string{path}
			sink := new(consumertest.TracesSink)
			set := receivertest.NewNopSettings(metadata.Type)
			set.BuildInfo.Version = "test"
			r, err := newTracesReceiver(set, cfg, sink)
			if err != nil {
				t.Fatal(err)
			}
			tl := newTailer(path, r.tailerDeps(), nil)
			defer tl.close()
			tl.poll(context.Background())

			var got []ptrace.Span
			for _, td := range sink.AllTraces() {
				got = append(got, auditconvtest.AllSpans(td)...)
			}
			auditconvtest.AssertGoldenSpans(t, scenario, got)
		})
	}
}

// statusHost records the component statuses reported to it.
type statusHost struct {
	component.Host
	mu       sync.Mutex
	statuses []componentstatus.Status
}

func (h *statusHost) Report(e *componentstatus.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.statuses = append(h.statuses, e.Status())
}

func TestFileProblemsAreTheComponentStatusUntilEveryFileIsFine(t *testing.T) {
	host := &statusHost{Host: componenttest.NewNopHost()}
	h := newFileHealth(host)
	h.report("a.log", errors.New("permission denied"))
	h.report("b.log", errors.New("is a directory"))
	h.report("a.log", nil)
	h.report("c.log", nil) // never failed: nothing to say
	h.report("b.log", nil)
	want := []componentstatus.Status{componentstatus.StatusRecoverableError, componentstatus.StatusRecoverableError, componentstatus.StatusOK}
	if !slices.Equal(host.statuses, want) {
		t.Fatalf("statuses = %v, want %v", host.statuses, want)
	}
}

// ids returns the audit IDs prefix-0 … prefix-(n-1).
func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

func TestTailerFinishesAFileRotatedWhileStopped(t *testing.T) {
	ctx := context.Background()
	// setTime gives a file a modification time, so that the order of rotated files does not
	// depend on how fast the test writes them.
	setTime := func(t *testing.T, path string, at time.Time) {
		t.Helper()
		if err := os.Chtimes(path, at, at); err != nil {
			t.Fatal(err)
		}
	}
	base := time.Date(2026, 11, 25, 1, 0, 0, 0, time.UTC)

	for _, tc := range []struct {
		name    string
		rotated []string // the names the old file gets, oldest rotation first
	}{
		{name: "the apiserver's own rotation (audit-<timestamp>.log)", rotated: []string{"audit-2026-11-25T01-02-03.000.log"}},
		{name: "logrotate numbering (audit.log.1)", rotated: []string{"audit.log.1"}},
		{name: "two rotations while stopped", rotated: []string{"audit-2026-11-25T01-02-03.000.log", "audit-2026-11-25T01-05-00.000.log"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newTailEnv(t, startAtBeginning)
			dir := filepath.Dir(env.path)
			// An earlier rotation, read long ago, and files that are no rotation of audit.log:
			// none of them may be read.
			if err := os.WriteFile(filepath.Join(dir, "audit.log.9"), []byte(lines(ids("ancient", 3)...)), 0o600); err != nil {
				t.Fatal(err)
			}
			setTime(t, filepath.Join(dir, "audit.log.9"), base.Add(-time.Hour))
			for _, other := range []string{"audit-policy.yaml", "other.log", "audit.log.1.gz"} {
				if err := os.WriteFile(filepath.Join(dir, other), []byte(lines("unrelated-"+other)), 0o600); err != nil {
					t.Fatal(err)
				}
				setTime(t, filepath.Join(dir, other), base.Add(time.Hour))
			}

			var want []string
			write := func(prefix string, n int) {
				env.write(t, lines(ids(prefix, n)...))
				want = append(want, ids(prefix, n)...)
			}
			write("read", 600)
			first := env.tailer(true)
			first.poll(ctx) // checkpoint after the 600th line
			first.close()   // the collector stops
			write("unread", 450)
			for i, name := range tc.rotated {
				setTime(t, env.path, base.Add(time.Duration(i)*time.Minute))
				if err := os.Rename(env.path, filepath.Join(dir, name)); err != nil {
					t.Fatal(err)
				}
				write(fmt.Sprintf("next%d", i), 300)
			}
			setTime(t, env.path, base.Add(30*time.Minute))

			second := env.tailer(true)
			second.poll(ctx)
			expectSameIDs(t, env.next, want)
			write("later", 5)
			second.poll(ctx)
			expectSameIDs(t, env.next, want)
			second.close()

			// Another restart goes on from the current file: nothing is read twice.
			write("after-restart", 2)
			third := env.tailer(true)
			defer third.close()
			third.poll(ctx)
			expectSameIDs(t, env.next, want)
		})
	}
}

// expectSameIDs is expectIDs for long lists: it names the first difference instead of both lists.
func expectSameIDs(t *testing.T, next *switchConsumer, want []string) {
	t.Helper()
	got := next.ids()
	for i := range max(len(got), len(want)) {
		if i >= len(got) || i >= len(want) || got[i] != want[i] {
			g, w := "<none>", "<none>"
			if i < len(got) {
				g = got[i]
			}
			if i < len(want) {
				w = want[i]
			}
			t.Fatalf("span %d of %d is audit ID %s, want %s (of %d)", i, len(got), g, w, len(want))
		}
	}
}
