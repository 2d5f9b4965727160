package trail

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// Source is a trace backend: it returns whole traces by ID and searches for traces by the
// object attributes of their spans.
type Source interface {
	// Trace returns the spans of one trace, or nil when the backend does not know it.
	Trace(ctx context.Context, id pcommon.TraceID) ([]*Span, error)
	// Search returns the IDs of traces holding a span of service (an object kind) whose
	// attributes equal tags and which overlaps [start, end].
	Search(ctx context.Context, service string, tags map[string]string, start, end time.Time) ([]pcommon.TraceID, error)
	// String names the source in messages.
	String() string
}

// Unreader is a Source that left out spans of a span model this tool does not read.
type Unreader interface {
	Unread() Unreadable
}

// Unread implements Unreader.
func (f *File) Unread() Unreadable { return f.Unreadable }

// ErrUnreachable wraps every failure to talk to a backend.
var ErrUnreachable = errors.New("backend unreachable")

// OpenSource parses --source: "jaeger=URL" or "file=PATH".
func OpenSource(spec string) (Source, error) {
	kind, arg, ok := strings.Cut(spec, "=")
	if !ok || arg == "" {
		return nil, fmt.Errorf("--source %q: want jaeger=URL (a Jaeger query endpoint, e.g. jaeger=http://localhost:16686) or file=PATH (OTLP JSON lines of the collector's file exporter)", spec)
	}
	switch kind {
	case "file":
		return OpenFile(arg)
	case "jaeger":
		u, err := url.Parse(arg)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("--source jaeger=%s: want an http(s) URL of Jaeger's query service, e.g. jaeger=http://localhost:16686", arg)
		}
		return &Jaeger{Base: strings.TrimRight(arg, "/"), Client: &http.Client{Timeout: 30 * time.Second}}, nil
	}
	return nil, fmt.Errorf("--source %q: unknown source %q; want jaeger=URL or file=PATH", spec, kind)
}

// File is a file of OTLP JSON lines, one ExportTraceServiceRequest per line, as the collector's
// file exporter writes them. It is read whole at open.
type File struct {
	Path string
	// Lines is the number of non-blank lines read. Skipped of them were not OTLP JSON trace data
	// (a last line cut short by an exporter killed mid-write, a corrupt line) and were left out;
	// FirstSkipped is the first one's number (counting from 1), SkipErr why it was refused.
	Lines, Skipped, FirstSkipped int
	SkipErr                      error
	// Unreadable counts the spans of a span model this tool does not read, left out.
	Unreadable Unreadable
	byTrace    map[pcommon.TraceID][]*Span
}

// maxResponse bounds one answer of the Jaeger query service.
const maxResponse = 256 << 20

// OpenFile reads path.
func OpenFile(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--source file=%s: %w (point it at the file exporter's output, e.g. file=build/run/traces.jsonl)", path, err)
	}
	defer f.Close()
	return ReadFile(path, f)
}

// maxLine bounds one line of the file (one exporter batch).
const maxLine = 256 << 20

// ReadFile reads OTLP JSON lines from r; path names it in errors. A line that is not OTLP JSON
// trace data is skipped and counted (File.Skipped), so that one truncated or corrupt line does
// not hide the rest of the file; a file whose lines are all such is an error.
func ReadFile(path string, r io.Reader) (*File, error) {
	fs := &File{Path: path, byTrace: map[pcommon.TraceID][]*Span{}}
	var u ptrace.JSONUnmarshaler
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), maxLine)
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		fs.Lines++
		td, err := u.UnmarshalTraces(b)
		if err != nil {
			if fs.Skipped == 0 {
				fs.FirstSkipped, fs.SkipErr = line, err
			}
			fs.Skipped++
			continue
		}
		for _, s := range readable(SpansFromTraces(td), &fs.Unreadable) {
			fs.byTrace[s.TraceID] = append(fs.byTrace[s.TraceID], s)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: line %d: %w", path, line+1, err)
	}
	if fs.Lines > 0 && fs.Skipped == fs.Lines {
		return nil, fmt.Errorf("%s: not OTLP JSON trace lines as the file exporter writes them: none of its %d lines is (line %d: %w); point file= at the file exporter's output, in JSON (not format: proto) and not compressed", path, fs.Lines, fs.FirstSkipped, fs.SkipErr)
	}
	return fs, nil
}

// AddSpans adds spans to the file's index (tests build sources from recorded traces).
func (f *File) AddSpans(spans []*Span) {
	if f.byTrace == nil {
		f.byTrace = map[pcommon.TraceID][]*Span{}
	}
	for _, s := range spans {
		f.byTrace[s.TraceID] = append(f.byTrace[s.TraceID], s)
	}
}

func (f *File) String() string { return "file=" + f.Path }

// Trace implements Source.
func (f *File) Trace(_ context.Context, id pcommon.TraceID) ([]*Span, error) {
	return f.byTrace[id], nil
}

// Kinds implements Kinder: the kinds of the objects the file holds spans of.
func (f *File) Kinds(context.Context) ([]string, error) {
	set := map[string]bool{}
	for _, spans := range f.byTrace {
		for _, s := range spans {
			if s.Object.Kind != "" {
				set[s.Object.Kind] = true
			}
		}
	}
	return sortedSet(set), nil
}

func sortedSet(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Search implements Source: services are kinds (the resource's service.name), as in a backend.
func (f *File) Search(_ context.Context, service string, tags map[string]string, start, end time.Time) ([]pcommon.TraceID, error) {
	var ids []pcommon.TraceID
	for id, spans := range f.byTrace {
		for _, s := range spans {
			if s.Object.Kind != service || !overlaps(s, start, end) || !tagsMatch(s, tags) {
				continue
			}
			ids = append(ids, id)
			break
		}
	}
	sortIDs(ids)
	return ids, nil
}

func overlaps(s *Span, start, end time.Time) bool {
	return (start.IsZero() || !s.End.Before(start)) && (end.IsZero() || !s.Start.After(end))
}

// tagsMatch matches tags against the span's and its resource's attributes, as a backend's tag
// search does.
func tagsMatch(s *Span, tags map[string]string) bool {
	for k, v := range tags {
		if s.Str(k) != v {
			return false
		}
	}
	return true
}

// Jaeger is a Jaeger query service. Traces come from its OTLP-shaped API
// (/api/v3/traces/{id}), which keeps links and span events as the collector exported them;
// searches use /api/traces?service=…&tags=….
type Jaeger struct {
	Base   string
	Client *http.Client
	// unreadable counts the spans its traces held of a span model this tool does not read.
	unreadable Unreadable
}

func (j *Jaeger) String() string { return "jaeger=" + j.Base }

func (j *Jaeger) get(ctx context.Context, path string, q url.Values) ([]byte, int, error) {
	u := j.Base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := j.Client.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %s: %v (is Jaeger's query service running there? check the URL and port, usually 16686)", ErrUnreachable, j.Base, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %s: %v", ErrUnreachable, u, err)
	}
	return b, resp.StatusCode, nil
}

// Trace implements Source.
func (j *Jaeger) Trace(ctx context.Context, id pcommon.TraceID) ([]*Span, error) {
	path := "/api/v3/traces/" + id.String()
	b, code, err := j.get(ctx, path, nil)
	if err != nil {
		return nil, err
	}
	if code == http.StatusNotFound {
		return nil, nil
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("%w: GET %s%s answered %d: %s (%s)", ErrUnreachable, j.Base, path, code, snippet(b), statusHint(code))
	}
	var env struct {
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(b, &env); err != nil || len(env.Result) == 0 {
		return nil, fmt.Errorf("GET %s%s: not a Jaeger v3 trace response (is this Jaeger v2's query API?): %s", j.Base, path, snippet(b))
	}
	td, err := (&ptrace.JSONUnmarshaler{}).UnmarshalTraces(env.Result)
	if err != nil {
		return nil, fmt.Errorf("GET %s%s: decoding OTLP JSON: %w", j.Base, path, err)
	}
	return readable(SpansFromTraces(td), &j.unreadable), nil
}

// Unread implements Unreader.
func (j *Jaeger) Unread() Unreadable { return j.unreadable }

// Kinds implements Kinder: Jaeger's services, which are the kinds of kubetrail's spans (and the
// names of other services, whose searches find nothing of kubetrail's).
func (j *Jaeger) Kinds(ctx context.Context) ([]string, error) {
	b, code, err := j.get(ctx, "/api/services", nil)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("%w: GET %s/api/services answered %d: %s (%s)", ErrUnreachable, j.Base, code, snippet(b), statusHint(code))
	}
	var r struct {
		Data []string `json:"data"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("GET %s/api/services: not Jaeger's list of services: %w", j.Base, err)
	}
	set := map[string]bool{}
	for _, s := range r.Data {
		set[s] = true
	}
	return sortedSet(set), nil
}

// Search implements Source.
func (j *Jaeger) Search(ctx context.Context, service string, tags map[string]string, start, end time.Time) ([]pcommon.TraceID, error) {
	q := url.Values{"service": {service}, "limit": {strconv.Itoa(SearchLimit)}}
	if !start.IsZero() {
		q.Set("start", strconv.FormatInt(start.UnixMicro(), 10))
	}
	if !end.IsZero() {
		q.Set("end", strconv.FormatInt(end.UnixMicro(), 10))
	}
	if len(tags) > 0 {
		t, _ := json.Marshal(tags)
		q.Set("tags", string(t))
	}
	b, code, err := j.get(ctx, "/api/traces", q)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		// Jaeger answers 500 "service not found" style errors for services it never saw.
		if bytes.Contains(b, []byte("not found")) {
			return nil, nil
		}
		return nil, fmt.Errorf("%w: GET %s/api/traces?%s answered %d: %s (%s)", ErrUnreachable, j.Base, q.Encode(), code, snippet(b), statusHint(code))
	}
	var r struct {
		Data []struct {
			TraceID string `json:"traceID"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("GET %s/api/traces: %w", j.Base, err)
	}
	var ids []pcommon.TraceID
	for _, d := range r.Data {
		if id, ok := parseTraceID(d.TraceID); ok {
			ids = append(ids, id)
		}
	}
	sortIDs(ids)
	return ids, nil
}

// statusHint says what to try next when Jaeger, or what answers at its URL, answered an HTTP
// error status.
func statusHint(code int) string {
	switch {
	case code == http.StatusUnauthorized || code == http.StatusForbidden || code == http.StatusProxyAuthRequired:
		return "something in front of Jaeger refused the request: check the proxy's credentials, or point --source at the query service itself"
	case code >= 500:
		return "Jaeger's query service is up but failing: check its logs and its storage backend, then retry; a smaller --since/--until asks less of it"
	}
	return "is the URL Jaeger's query service (usually port 16686, plus its --query.base-path if set) and not the collector or another service?"
}

func parseTraceID(s string) (pcommon.TraceID, bool) {
	var id pcommon.TraceID
	if len(s) > 32 {
		return id, false
	}
	s = strings.Repeat("0", 32-len(s)) + s // Jaeger drops leading zeros
	for i := 0; i < 16; i++ {
		v, err := strconv.ParseUint(s[2*i:2*i+2], 16, 8)
		if err != nil {
			return id, false
		}
		id[i] = byte(v)
	}
	return id, true
}

func snippet(b []byte) string {
	if len(b) > 200 {
		b = b[:200]
	}
	return strings.TrimSpace(string(b))
}
