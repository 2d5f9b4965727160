//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
)

// Jaeger is a Jaeger v2 process with in-memory storage: the real OTLP backend the collector
// exports to. Tests read traces back through its query APIs, as a user's UI would.
type Jaeger struct {
	// OTLPGRPC is the host:port of its OTLP gRPC receiver.
	OTLPGRPC string
	// QueryURL is the base URL of its query API (http://127.0.0.1:port).
	QueryURL string
	proc     *Process
	client   *http.Client
}

func startJaeger(bin, dir, pidDir string) (*Jaeger, error) {
	grpcPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	httpPort, _ := FreePort()
	queryPort, _ := FreePort()
	queryGRPCPort, _ := FreePort()
	healthPort, _ := FreePort()
	// enable_tracing false: otherwise Jaeger traces itself to localhost:4317 and takes ~10 s to stop.
	cfg := fmt.Sprintf(`service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    resource: {service.name: jaeger}
    metrics: {level: none}
    logs: {level: info}
extensions:
  jaeger_query:
    storage: {traces: memstore}
    enable_tracing: false
    http: {endpoint: "127.0.0.1:%d"}
    grpc: {endpoint: "127.0.0.1:%d"}
  jaeger_storage:
    backends:
      memstore:
        memory: {max_traces: 100000}
  healthcheckv2:
    use_v2: true
    http: {endpoint: "127.0.0.1:%d"}
receivers:
  otlp:
    protocols:
      grpc: {endpoint: "127.0.0.1:%d"}
      http: {endpoint: "127.0.0.1:%d"}
processors:
  batch: {timeout: 100ms}
exporters:
  jaeger_storage_exporter: {trace_storage: memstore}
`, queryPort, queryGRPCPort, healthPort, grpcPort, httpPort)
	path := filepath.Join(dir, "jaeger.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	p, err := StartProcess("jaeger", filepath.Join(dir, "jaeger.log"), pidDir, nil, bin, "--config", path)
	if err != nil {
		return nil, err
	}
	j := &Jaeger{
		OTLPGRPC: fmt.Sprintf("127.0.0.1:%d", grpcPort),
		QueryURL: fmt.Sprintf("http://127.0.0.1:%d", queryPort),
		proc:     p,
		client:   &http.Client{Timeout: 30 * time.Second},
	}
	for _, addr := range []string{j.OTLPGRPC, fmt.Sprintf("127.0.0.1:%d", queryPort)} {
		if err := WaitTCP(addr, p, 30*time.Second); err != nil {
			_ = p.Stop(5 * time.Second)
			return nil, fmt.Errorf("jaeger: %w", err)
		}
	}
	return j, nil
}

// Stop stops the Jaeger process.
func (j *Jaeger) Stop() error {
	if j == nil {
		return nil
	}
	return j.proc.Stop(10 * time.Second)
}

func (j *Jaeger) get(ctx context.Context, path string, q url.Values) ([]byte, int, error) {
	u := j.QueryURL + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := j.client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return b, resp.StatusCode, err
}

// Services returns the service names Jaeger knows (kubetrail: one per Kind).
func (j *Jaeger) Services(ctx context.Context) ([]string, error) {
	b, code, err := j.get(ctx, "/api/services", nil)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET /api/services: %d %s", code, b)
	}
	var r struct {
		Data []string `json:"data"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("GET /api/services: %w", err)
	}
	sort.Strings(r.Data)
	return r.Data, nil
}

// TraceIDs returns the IDs of traces that have a span of service starting in [start, end],
// through the search API (/api/traces?service=…). tags narrows the search to spans with those
// attribute values (Jaeger matches tags exactly).
func (j *Jaeger) TraceIDs(ctx context.Context, service string, start, end time.Time, tags map[string]string) ([]string, error) {
	q := url.Values{
		"service": {service},
		"start":   {strconv.FormatInt(start.UnixMicro(), 10)},
		"end":     {strconv.FormatInt(end.UnixMicro(), 10)},
		"limit":   {"10000"},
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
		return nil, fmt.Errorf("GET /api/traces?%s: %d %s", q.Encode(), code, b)
	}
	var r struct {
		Data []struct {
			TraceID string `json:"traceID"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("GET /api/traces: %w", err)
	}
	ids := make([]string, 0, len(r.Data))
	for _, d := range r.Data {
		ids = append(ids, d.TraceID)
	}
	return ids, nil
}

// SearchRaw returns the raw /api/traces response (Jaeger's own JSON model) for service.
func (j *Jaeger) SearchRaw(ctx context.Context, service string, start, end time.Time) ([]byte, error) {
	q := url.Values{
		"service": {service},
		"start":   {strconv.FormatInt(start.UnixMicro(), 10)},
		"end":     {strconv.FormatInt(end.UnixMicro(), 10)},
		"limit":   {"10000"},
	}
	b, code, err := j.get(ctx, "/api/traces", q)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("GET /api/traces: %d", code)
	}
	return b, err
}

// Trace fetches one trace through the OTLP-shaped v3 API (/api/v3/traces/{id}) and returns its
// spans and the raw response body. A trace Jaeger does not know yields (nil, nil, nil).
func (j *Jaeger) Trace(ctx context.Context, traceID string) (Spans, []byte, error) {
	b, code, err := j.get(ctx, "/api/v3/traces/"+traceID, nil)
	if err != nil {
		return nil, nil, err
	}
	if code == http.StatusNotFound {
		return nil, nil, nil
	}
	if code != http.StatusOK {
		return nil, b, fmt.Errorf("GET /api/v3/traces/%s: %d %s", traceID, code, b)
	}
	var env struct {
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, b, fmt.Errorf("trace %s: %w", traceID, err)
	}
	td, err := (&ptrace.JSONUnmarshaler{}).UnmarshalTraces(env.Result)
	if err != nil {
		return nil, b, fmt.Errorf("trace %s: decode OTLP JSON: %w", traceID, err)
	}
	return SpansFromTraces(td), b, nil
}

// Window is everything Jaeger holds with a span starting in [Start, End].
type Window struct {
	Start, End time.Time
}

// apiserverService is the service.name of kube-apiserver's request spans.
const apiserverService = "apiserver"

// Fetch returns every span of every trace that has at least one span (of any service but the
// apiserver's own request traces, which a test fetches by audit ID) starting within w, each
// trace fetched whole through the v3 API. raw receives every response body, for
// byte-level checks (nil to skip).
func (j *Jaeger) Fetch(ctx context.Context, w Window, raw func([]byte)) (Spans, error) {
	services, err := j.Services(ctx)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var all Spans
	for _, svc := range services {
		if svc == "jaeger" || svc == apiserverService {
			continue
		}
		ids, err := j.TraceIDs(ctx, svc, w.Start, w.End, nil)
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			if seen[id] {
				continue
			}
			seen[id] = true
			spans, b, err := j.Trace(ctx, id)
			if err != nil {
				return nil, err
			}
			if raw != nil {
				raw(b)
			}
			all = append(all, spans...)
		}
	}
	all.sortByStart()
	return all, nil
}
