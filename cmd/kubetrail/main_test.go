package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/golden"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.uber.org/goleak"

	"github.com/kubetrail/kubetrail/cmd/kubetrail/internal/trail"
	"github.com/kubetrail/kubetrail/internal/model"
)

var update = flag.Bool("update", false, "regenerate testdata/golden from the processor's recorded goldens")

// TestMain keeps the tests off the developer's clusters: the kubeconfig is one that does not
// exist (no kubeconfig, as on a machine without a cluster), unless a test gives its own or
// replaces connect with fake clients.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kubetrail-test")
	if err != nil {
		panic(err)
	}
	os.Setenv("KUBECONFIG", filepath.Join(dir, "no-kubeconfig"))
	os.Unsetenv("KUBERNETES_SERVICE_HOST") // no in-cluster config either
	os.Unsetenv("KUBETRAIL_CLUSTER")
	os.Setenv("KUBETRAIL_CONFIG", filepath.Join(dir, "no-config.yaml")) // not the developer's defaults
	defer os.RemoveAll(dir)
	goleak.VerifyTestMain(m)
}

// recorded is where the processor's golden traces are: its output for the testbed's fixtures,
// recorded from the real control plane. They are this command's input, never hand-typed spans.
const recorded = "../../processor/k8sobjectlinkprocessor/testdata/golden"

// recordedFile writes a scenario's recorded traces as OTLP JSON lines, as the collector's file
// exporter would, and returns the path: the file source reads them like any exporter output.
func recordedFile(t *testing.T, scenario string) string {
	t.Helper()
	td, err := golden.ReadTraces(filepath.Join(recorded, scenario+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return writeJSONL(t, td)
}

func writeJSONL(t *testing.T, batches ...ptrace.Traces) string {
	t.Helper()
	var buf bytes.Buffer
	for _, td := range batches {
		b, err := (&ptrace.JSONMarshaler{}).MarshalTraces(td)
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	path := filepath.Join(t.TempDir(), "traces.jsonl")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// kubetrail runs the command as bin/kubetrail and returns its exit code, stdout and stderr.
func kubetrail(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return invoke(t, "/usr/local/bin/kubetrail", args...)
}

// invoke runs the command with argv[0] set to prog, as an exec would.
func invoke(t *testing.T, prog string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), append([]string{prog}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

func compareGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (regenerate with: go test ./cmd/kubetrail -run %s -update)", err, t.Name())
	}
	if string(want) != got {
		t.Fatalf("%s differs from the output (regenerate with -update and review the diff):\n--- got ---\n%s", path, head(got, 60))
	}
}

func head(s string, lines int) string {
	l := strings.SplitN(s, "\n", lines+1)
	if len(l) > lines {
		l = l[:lines]
	}
	return strings.Join(l, "\n")
}

var goldenCases = []struct {
	scenario, target string
	formats          []string
	args             []string // more flags; the golden file is named after them
	name             string   // the golden's name, the scenario's without args
}{
	{"deployment", "deployment/demo", []string{"tree", "timeline"}, nil, ""},
	// The rollout of the new image: the deployment scenario patches it in generation 3.
	{"deployment", "deployment/demo", []string{"tree", "json"}, []string{"--generation", "3"}, "deployment.generation-3"},
	{"conflict", "deploy/contended", []string{"tree", "timeline", "json"}, nil, ""},
	{"job", "cronjob/nightly", []string{"tree", "timeline"}, nil, ""},
	{"unschedulable", "pod/pending", []string{"tree", "timeline", "json"}, nil, ""},
	{"recreate", "pods/phoenix", []string{"tree"}, nil, ""},
}

func TestRecordedTracesRenderAsTheGoldenTreeTimelineAndJSON(t *testing.T) {
	for _, c := range goldenCases {
		src := "file=" + recordedFile(t, c.scenario)
		for _, format := range c.formats {
			name := c.name
			if name == "" {
				name = c.scenario
			}
			t.Run(name+"/"+format, func(t *testing.T) {
				args := append([]string{"trace", c.target, "-n", "default", "--cluster", "testbed", "--source", src, "-o", format}, c.args...)
				code, out, errOut := kubetrail(t, args...)
				if code != 0 {
					t.Fatalf("exit %d: %s", code, errOut)
				}
				ext := map[string]string{"tree": "tree.txt", "timeline": "timeline.txt", "json": "json"}[format]
				compareGolden(t, name+"."+ext, out)
			})
		}
	}
}

// The merged tree holds every span of the traces it was built from: nothing is lost by merging.
func TestTheTreeHoldsEverySpanOfTheObjectsTrace(t *testing.T) {
	td, err := golden.ReadTraces(filepath.Join(recorded, "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := kubetrail(t, "trace", "deployment/demo", "-n", "default", "--source", "file="+writeJSONL(t, td), "-o", "json")
	if code != 0 {
		t.Fatal(errOut)
	}
	root := decodeTree(t, out)
	got := countTree(root)
	// Every span of the Deployment's trace(s): the recording has other roots (none here) in
	// other traces, so count the spans that share a trace ID with the root's windows.
	traces := map[string]bool{}
	for _, w := range root.Windows {
		traces[w.TraceID] = true
	}
	want := 0
	for _, s := range trail.SpansFromTraces(td) {
		if traces[s.TraceID.String()] {
			want++
		}
	}
	if got != want || want < 100 {
		t.Fatalf("the tree holds %d spans, the Deployment's traces %d", got, want)
	}
}

func decodeTree(t *testing.T, s string) *trail.JSONNode {
	t.Helper()
	var n trail.JSONNode
	if err := json.Unmarshal([]byte(s), &n); err != nil {
		t.Fatalf("-o json is not JSON: %v", err)
	}
	return &n
}

func countTree(n *trail.JSONNode) int {
	c := len(n.Windows) + len(n.Spans)
	for _, k := range n.Children {
		c += countTree(k)
	}
	return c
}

func TestFiltersNarrowTheTree(t *testing.T) {
	src := "file=" + recordedFile(t, "conflict")
	tests := []struct {
		name string
		args []string
		ok   func(*trail.JSONNode) bool
	}{
		{"--only errors keeps only failed requests", []string{"--only", "errors"}, func(n *trail.JSONNode) bool {
			all := spansOf(n)
			for _, s := range all {
				if !s.Error {
					return false
				}
			}
			return len(all) > 0
		}},
		{"--only writes keeps only writes", []string{"--only", "writes"}, func(n *trail.JSONNode) bool {
			for _, s := range spansOf(n) {
				if !strings.Contains("create update patch delete deletecollection", strings.Fields(s.Verb)[0]) {
					return false
				}
			}
			return true
		}},
		{"--depth 0 shows the object alone", []string{"--depth", "0"}, func(n *trail.JSONNode) bool {
			return len(n.Children) == 0 && len(n.Spans) > 0
		}},
		{"--depth 1 shows the owned objects but not theirs", []string{"--depth", "1"}, func(n *trail.JSONNode) bool {
			for _, c := range n.Children {
				if len(c.Children) > 0 {
					return false
				}
			}
			return len(n.Children) > 0
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := kubetrail(t, append([]string{"trace", "deployment/contended", "-n", "default", "--source", src, "-o", "json"}, tc.args...)...)
			if code != 0 {
				t.Fatal(errOut)
			}
			if !tc.ok(decodeTree(t, out)) {
				t.Fatalf("unexpected tree:\n%s", head(out, 40))
			}
		})
	}
}

func spansOf(n *trail.JSONNode) []trail.JSONSpan {
	out := append([]trail.JSONSpan(nil), n.Spans...)
	for _, c := range n.Children {
		out = append(out, spansOf(c)...)
	}
	return out
}

func TestErrorsSayWhatToTryNext(t *testing.T) {
	src := "file=" + recordedFile(t, "deployment")
	closed := closedPort(t)
	tests := []errorCase{
		{"an unknown object names the range and suggests --since", []string{"trace", "deployment/nope", "-n", "default", "--source", src},
			1, []string{"unknown object", "Deployment default/nope", "--since"}},
		{"an object in another cluster is unknown", []string{"trace", "deployment/demo", "-n", "default", "--cluster", "prod", "--source", src},
			1, []string{"unknown object", "cluster prod", "--cluster"}},
		{"a range after the object's last activity has no spans", []string{"trace", "deployment/demo", "-n", "default", "--source", src,
			"--since", "2026-11-21T10:50:00Z", "--until", "2026-11-21T10:55:00Z"}, 1, []string{"no spans in range", "widen --since"}},
		{"an unreachable backend says so and what to check", []string{"trace", "deployment/demo", "-n", "default", "--source", "jaeger=http://" + closed, "--since", "1h"},
			1, []string{"backend unreachable", closed, "is Jaeger's query service running"}},
		{"a missing file names the file exporter", []string{"trace", "deployment/demo", "--source", "file=/nonexistent/traces.jsonl"},
			2, []string{"/nonexistent/traces.jsonl", "file exporter"}},
		{"an unknown output is a usage error", []string{"trace", "deployment/demo", "--source", src, "-o", "xml"}, 2, []string{"tree, timeline, json or html"}},
		{"no source is a usage error", []string{"trace", "deployment/demo"}, 2, []string{"--source is required"}},
		{"a target without a name is a usage error", []string{"trace", "deployment", "--source", src}, 2, []string{"want TYPE/NAME or TYPE NAME", "See 'kubetrail trace -h' for help and examples."}},
		{"two objects are a usage error", []string{"trace", "deploy/a", "deploy/b", "--source", src}, 2, []string{"takes one object", "got 2 arguments"}},
		{"a long flag with one dash is a usage error that names the right one", []string{"trace", "deployment/demo", "--source", src, "-generation", "3"}, 2, []string{"-generation: a long flag takes two dashes, as in kubectl: --generation"}},
		{"an unknown flag is a usage error", []string{"trace", "deployment/demo", "--source", src, "--colour"}, 2, []string{"unknown flag: --colour", "See 'kubetrail trace -h'"}},
		{"a flag without its value is a usage error", []string{"trace", "deployment/demo", "--source", src, "-n"}, 2, []string{"flag needs an argument", "'n' in -n"}},
		{"a named kubeconfig that does not load is an error", []string{"trace", "deployment/demo", "--source", src, "--kubeconfig", "/nonexistent/kubeconfig"}, 1, []string{"kubeconfig:", "/nonexistent/kubeconfig"}},
		{"a bad --since is a usage error", []string{"trace", "deployment/demo", "--source", src, "--since", "yesterday"}, 2, []string{"RFC 3339"}},
		{"an unknown --only is a usage error", []string{"trace", "deployment/demo", "--source", src, "--only", "pods"}, 2, []string{"errors, writes or events"}},
		{"an unknown command is a usage error", []string{"frobnicate"}, 2, []string{"unknown command"}},
	}
	checkErrorCases(t, tests)
}

// errorCase is a command line the command refuses: its exit code (1 an error, 2 a usage error)
// and what its stderr says.
type errorCase struct {
	name     string
	args     []string
	code     int
	contains []string
}

// checkErrorCases runs each case without a source from the environment: the exit code is the
// case's, stderr says what it should, and an error (exit 1) is one line.
func checkErrorCases(t *testing.T, cases []errorCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("KUBETRAIL_SOURCE", "")
			code, _, errOut := kubetrail(t, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d: %s", code, tc.code, errOut)
			}
			for _, s := range tc.contains {
				if !strings.Contains(errOut, s) {
					t.Fatalf("stderr %q lacks %q", errOut, s)
				}
			}
			if n := strings.Count(strings.TrimSpace(errOut), "\n"); tc.code == 1 && n > 0 {
				t.Errorf("stderr has %d lines, want one:\n%s", n+1, errOut)
			}
		})
	}
}

// A file exporter killed mid-write leaves its last line cut short, and a line can be corrupt: the
// command shows the tree of the valid lines, as from a file of them alone, and says on stderr how
// many lines it skipped and where the first is. A file without a valid line is still refused.
func TestAFileWithATruncatedAndACorruptLineShowsTheRest(t *testing.T) {
	t.Setenv("KUBETRAIL_SOURCE", "")
	line := func(scenario string) string {
		td, err := golden.ReadTraces(filepath.Join(recorded, scenario+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		b, err := (&ptrace.JSONMarshaler{}).MarshalTraces(td)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	write := func(content string) string {
		path := filepath.Join(t.TempDir(), "traces.jsonl")
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	valid, last := line("deployment"), line("conflict")
	args := []string{"trace", "deployment/demo", "-n", "default", "--cluster", "testbed", "--source"}
	code, want, errOut := kubetrail(t, append(args, "file="+write(valid+"\n"))...)
	if code != 0 || errOut != "" {
		t.Fatalf("the valid line alone: exit %d: %s", code, errOut)
	}

	dirty := write(valid + "\n" + "\x00\x00 not json {\n" + last[:len(last)/2])
	code, got, errOut := kubetrail(t, append(args, "file="+dirty)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if got != want {
		t.Errorf("the tree differs from the valid line's alone:\n%s", head(got, 20))
	}
	for _, s := range []string{dirty, "skipped 2 of 3 lines", "first line 2"} {
		if !strings.Contains(errOut, s) {
			t.Errorf("stderr %q lacks %q", errOut, s)
		}
	}

	broken := write("\x00\x00 not json {\n" + last[:len(last)/2])
	code, got, errOut = kubetrail(t, append(args, "file="+broken)...)
	if code == 0 || got != "" {
		t.Fatalf("a file without a valid line: exit %d, output %q", code, head(got, 5))
	}
	for _, s := range []string{broken, "not OTLP JSON trace lines", "none of its 2 lines"} {
		if !strings.Contains(errOut, s) {
			t.Errorf("stderr %q lacks %q", errOut, s)
		}
	}
}

func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// fakeJaeger serves recorded spans through the two Jaeger query endpoints the command uses, and
// counts the calls of each.
type fakeJaeger struct {
	byTrace                  map[string]ptrace.Traces
	gets, searches, services int
	tags                     []string
}

func newFakeJaeger(t *testing.T, td ptrace.Traces) *httptest.Server {
	f := &fakeJaeger{byTrace: map[string]ptrace.Traces{}}
	for _, rs := range td.ResourceSpans().All() {
		for _, ss := range rs.ScopeSpans().All() {
			for _, s := range ss.Spans().All() {
				id := s.TraceID().String()
				out, ok := f.byTrace[id]
				if !ok {
					out = ptrace.NewTraces()
					f.byTrace[id] = out
				}
				nrs := out.ResourceSpans().AppendEmpty()
				rs.Resource().CopyTo(nrs.Resource())
				s.CopyTo(nrs.ScopeSpans().AppendEmpty().Spans().AppendEmpty())
			}
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v3/traces/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.gets++
		td, ok := f.byTrace[r.PathValue("id")]
		if !ok {
			http.Error(w, `{"error":{"httpCode":404,"message":"trace not found"}}`, http.StatusNotFound)
			return
		}
		b, _ := (&ptrace.JSONMarshaler{}).MarshalTraces(td)
		_, _ = w.Write([]byte(`{"result":` + string(b) + `}`))
	})
	mux.HandleFunc("GET /api/services", func(w http.ResponseWriter, _ *http.Request) {
		f.services++
		set := map[string]bool{}
		for _, td := range f.byTrace {
			for _, s := range trail.SpansFromTraces(td) {
				set[s.Str(model.AttrServiceName)] = true
			}
		}
		data := []string{}
		for s := range set {
			data = append(data, s)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"data": data})
	})
	mux.HandleFunc("GET /api/traces", func(w http.ResponseWriter, r *http.Request) {
		f.searches++
		f.tags = append(f.tags, r.URL.Query().Get("tags"))
		var tags map[string]string
		_ = json.Unmarshal([]byte(r.URL.Query().Get("tags")), &tags)
		var data []map[string]string
		for id, td := range f.byTrace {
			for _, s := range trail.SpansFromTraces(td) {
				match := s.Str(model.AttrServiceName) == r.URL.Query().Get("service") // Jaeger's service is service.name
				for k, v := range tags {
					match = match && s.Str(k) == v
				}
				if match {
					data = append(data, map[string]string{"traceID": strings.TrimLeft(id, "0")})
					break
				}
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"data": data})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { jaegerCalls[srv.URL] = nil })
	jaegerCalls[srv.URL] = f
	return srv
}

var jaegerCalls = map[string]*fakeJaeger{}

func TestJaegerSourceComputesTheWindowsTraceIDsFromTheUID(t *testing.T) {
	td, err := golden.ReadTraces(filepath.Join(recorded, "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var uid string
	for _, s := range trail.SpansFromTraces(td) {
		if s.IsObject() && s.Object.DisplayName() == "Deployment default/demo" {
			uid = s.Object.UID
		}
	}
	args := []string{"trace", "deployment/demo", "-n", "default", "--cluster", "testbed", "-o", "json",
		"--since", "2026-11-21T10:00:00Z", "--until", "2026-11-21T11:30:00Z"}

	t.Run("with --uid: no search, one GET per window, the recorded trace among them", func(t *testing.T) {
		srv := newFakeJaeger(t, td)
		code, out, errOut := kubetrail(t, append(args, "--uid", uid, "--source", "jaeger="+srv.URL)...)
		if code != 0 {
			t.Fatal(errOut)
		}
		f := jaegerCalls[srv.URL]
		// Windows 10:00, 10:30, 11:00, 11:30, and the continuation of the one trace found (of
		// more spans than the processor's smallest bound), which the recording does not have.
		if f.searches != 0 || f.gets != 5 {
			t.Fatalf("searches %d, trace GETs %d: the trace IDs must be computed, one per window and one continuation", f.searches, f.gets)
		}
		if n := decodeTree(t, out); countTree(n) < 100 || len(n.Children) != 2 {
			t.Fatalf("the tree read by computed IDs is incomplete: %d spans, %d children", countTree(n), len(n.Children))
		}
	})
	t.Run("without --uid: a tag search finds the object, then its windows are computed", func(t *testing.T) {
		srv := newFakeJaeger(t, td)
		code, out, errOut := kubetrail(t, append(args, "--source", "jaeger="+srv.URL)...)
		if code != 0 {
			t.Fatal(errOut)
		}
		f := jaegerCalls[srv.URL]
		if f.searches != 1 || !strings.Contains(f.tags[0], `"k8s.object.name":"demo"`) {
			t.Fatalf("searches %d with tags %v", f.searches, f.tags)
		}
		if n := decodeTree(t, out); n.UID != uid {
			t.Fatalf("uid %s, want %s", n.UID, uid)
		}
	})
	t.Run("a ReplicaSet is found by search and read from its Deployment's trace", func(t *testing.T) {
		srv := newFakeJaeger(t, td)
		var rs string
		for _, s := range trail.SpansFromTraces(td) {
			if s.IsObject() && s.Object.Kind == "ReplicaSet" {
				rs = s.Object.Name
			}
		}
		code, out, errOut := kubetrail(t, "trace", "rs/"+rs, "-n", "default", "--source", "jaeger="+srv.URL, "-o", "json",
			"--since", "2026-11-21T10:40:00Z", "--until", "2026-11-21T10:50:00Z")
		if code != 0 {
			t.Fatal(errOut)
		}
		if n := decodeTree(t, out); n.Kind != "ReplicaSet" || len(n.Children) == 0 {
			t.Fatalf("got %s %s with %d children", n.Kind, n.Name, len(n.Children))
		}
	})
}

// Derived IDs are what make the computation possible: the recorded root's trace is the
// ObjectTraceID of its UID key and window.
func TestRecordedRootTraceIsTheDerivedTraceID(t *testing.T) {
	td, err := golden.ReadTraces(filepath.Join(recorded, "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range trail.SpansFromTraces(td) {
		if s.IsObject() && s.ParentID.IsEmpty() && s.Object.Kind == "Deployment" {
			if want := model.ObjectTraceID(model.UIDKey(s.Cluster, s.Object.UID), s.Start); s.TraceID != want {
				t.Fatalf("trace %s, derived %s", s.TraceID, want)
			}
			return
		}
	}
	t.Fatal("no Deployment root")
}

// The Event spans of a scenario, as the k8s_event_spans receiver recorded them from the same run
// as the audit capture, joined with the audit spans by the real processor: --only events keeps
// them and nothing else, under the objects they are about.
func TestOnlyEventsKeepsTheEventSpans(t *testing.T) {
	events, err := golden.ReadTraces("../../receiver/k8seventsreceiver/testdata/golden/deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	src := "file=" + writeJSONL(t, replayWithWindow(t, "deployment", 30*time.Minute, events)...)
	code, out, errOut := kubetrail(t, "trace", "deployment/demo", "-n", "default", "--source", src, "-o", "json")
	if code != 0 {
		t.Fatal(errOut)
	}
	all := spansOf(decodeTree(t, out))
	code, out, errOut = kubetrail(t, "trace", "deployment/demo", "-n", "default", "--source", src, "-o", "json", "--only", "events")
	if code != 0 {
		t.Fatal(errOut)
	}
	root := decodeTree(t, out)
	only := spansOf(root)
	var wantEvents int
	for _, s := range all {
		if s.Type == "event" {
			wantEvents++
		}
	}
	reasons := map[string]bool{}
	for _, s := range only {
		if s.Type != "event" || s.Verb != "event" {
			t.Fatalf("--only events kept a %s span %q", s.Type, s.Name)
		}
		reasons[s.Attributes["k8s.event.reason"].(string)] = true
	}
	t.Logf("%d of %d spans are Events; reasons %v", len(only), len(all), reasons)
	if len(only) != wantEvents || len(only) == 0 || len(only) == len(all) {
		t.Fatalf("--only events kept %d spans; the tree has %d Events among %d spans", len(only), wantEvents, len(all))
	}
	// The Pods' Scheduled Events are under the Pods, below the ReplicaSets.
	var podEvents int
	for _, rs := range root.Children {
		for _, pod := range rs.Children {
			if pod.Kind == "Pod" {
				podEvents += len(pod.Spans)
			}
		}
	}
	if !reasons["Scheduled"] || podEvents == 0 {
		t.Fatalf("no Scheduled Events under the Pods (%d Pod Events)", podEvents)
	}
}

// A Jaeger that answers but with an error status: the message names the status and, like the
// connection failure, says what to check next.
func TestJaegerAnsweringAnErrorSaysWhatToTryNext(t *testing.T) {
	tests := []struct {
		code int
		body string
		hint string
	}{
		{http.StatusInternalServerError, `{"error":{"httpCode":500,"message":"storage: context deadline exceeded"}}`, "check its logs and its storage backend"},
		{http.StatusServiceUnavailable, "upstream connect error", "check its logs and its storage backend"},
		{http.StatusForbidden, "forbidden", "check the proxy's credentials"},
		{http.StatusBadRequest, "bad request", "is the URL Jaeger's query service (usually port 16686"},
	}
	for _, tc := range tests {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, tc.body, tc.code)
		}))
		t.Cleanup(srv.Close)
		for _, how := range [][]string{{"--uid", "1a8e24cf-7024-43fb-9ae8-16151a19b473"}, nil} { // trace GETs, then the tag search
			args := append([]string{"trace", "deployment/demo", "-n", "default", "--source", "jaeger=" + srv.URL, "--since", "1h"}, how...)
			code, _, errOut := kubetrail(t, args...)
			if code != 1 {
				t.Fatalf("%d %v: exit %d: %s", tc.code, how, code, errOut)
			}
			for _, want := range []string{"backend unreachable", srv.URL, fmt.Sprintf("answered %d", tc.code), tc.hint} {
				if !strings.Contains(errOut, want) {
					t.Errorf("%d %v: stderr %q lacks %q", tc.code, how, errOut, want)
				}
			}
		}
	}
}

// TestSpansOfAnEarlierModel: spans written before span model 1.0 (identity on every span, no
// schema URL) are not read as 1.0 spans; the command says which model they are and what to do,
// from a file and from Jaeger, and a window that holds both models shows the 1.0 spans.
func TestSpansOfAnEarlierModel(t *testing.T) {
	old, err := golden.ReadTraces(filepath.Join("testdata", "model-0", "unschedulable.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"trace", "pod/pending", "-n", "default", "--cluster", "testbed", "--since", "2026-11-21T10:00:00Z", "--until", "2026-11-21T11:30:00Z"}
	for name, src := range map[string]string{
		"file":   "file=" + writeJSONL(t, old),
		"jaeger": "jaeger=" + newFakeJaeger(t, old).URL,
	} {
		t.Run(name, func(t *testing.T) {
			code, out, errOut := kubetrail(t, append(args, "--source", src)...)
			if code != 1 || out != "" || !strings.Contains(errOut, "before span model 1.0") || !strings.Contains(errOut, "reads span model 1.x") {
				t.Fatalf("exit %d, stdout %q, stderr %q: want exit 1 naming the earlier model", code, out, errOut)
			}
		})
	}
	t.Run("a file holding both models shows the 1.0 spans and says what it left out", func(t *testing.T) {
		cur, err := golden.ReadTraces(filepath.Join(recorded, "unschedulable.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		code, out, errOut := kubetrail(t, append(args, "--source", "file="+writeJSONL(t, old, cur))...)
		if code != 0 || !strings.Contains(out, "Pod default/pending") || !strings.Contains(errOut, "left out") || !strings.Contains(errOut, "before span model 1.0") {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		_, want, _ := kubetrail(t, append(args, "--source", "file="+writeJSONL(t, cur))...)
		if out != want {
			t.Fatalf("the tree differs from the 1.0 spans' alone:\n%s\nwant\n%s", out, want)
		}
	})
	t.Run("a later major version is named", func(t *testing.T) {
		cur, err := golden.ReadTraces(filepath.Join(recorded, "unschedulable.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for _, rs := range cur.ResourceSpans().All() {
			rs.SetSchemaUrl("https://kubetrail.dev/schemas/2.0.0")
		}
		code, _, errOut := kubetrail(t, append(args, "--source", "file="+writeJSONL(t, cur))...)
		if code != 1 || !strings.Contains(errOut, "span model 2.0.0") {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
	})
}

// --generation picks one rollout: its spans are those from the write that began it until the
// next generation's first write, the summary is of that rollout alone, and a generation not in
// range is an error that lists those that are.
func TestGenerationSelectsOneRollout(t *testing.T) {
	src := "file=" + recordedFile(t, "deployment")
	base := []string{"trace", "deployment/demo", "-n", "default", "--cluster", "testbed", "--source", src, "-o", "json"}
	code, out, errOut := kubetrail(t, append(base, "--generation", "3")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var root trail.JSONNode
	if err := json.Unmarshal([]byte(out), &root); err != nil {
		t.Fatal(err)
	}
	if len(root.Generations) != 1 || root.Generations[0].N != 3 || root.Generations[0].Revision != "2" || root.Generations[0].TemplateHash == "" {
		t.Fatalf("generations %+v, want generation 3 alone, of revision 2", root.Generations)
	}
	g := root.Generations[0]
	spans := spansOf(&root)
	var newPods int
	for _, s := range spans {
		if s.Start.Before(g.Start) || !s.Start.Before(g.End) {
			t.Errorf("span %s at %s outside generation 3's [%s, %s)", s.Name, s.Start, g.Start, g.End)
		}
		if s.Name == "create pods" && s.Attributes[model.AttrObjectTemplateHash] == g.TemplateHash {
			newPods++
		}
	}
	if newPods == 0 || len(spans) < 20 {
		t.Fatalf("%d spans, %d Pods created from the new template: want the rollout's", len(spans), newPods)
	}
	code, _, errOut = kubetrail(t, append(base, "--generation", "9")...)
	if code != 1 || !strings.Contains(errOut, "no generation 9") || !strings.Contains(errOut, "1, 2, 3, 4") {
		t.Fatalf("exit %d, stderr %q: want the generations in range listed", code, errOut)
	}
}
