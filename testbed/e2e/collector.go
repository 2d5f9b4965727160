//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Components lists the component types the collector binary was built with, by kind
// ("receivers", "processors", "exporters", "extensions", "connectors"), as
// `otelcol-kubetrail components` prints them.
type Components map[string][]string

// Has reports whether kind (e.g. "receivers") includes typ (e.g. "k8s_audit").
func (c Components) Has(kind, typ string) bool { return slices.Contains(c[kind], typ) }

func readComponents(bin string) (Components, error) {
	out, err := exec.Command(bin, "components").Output()
	if err != nil {
		return nil, fmt.Errorf("%s components: %w", bin, err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(out, &doc); err != nil {
		return nil, fmt.Errorf("%s components: %w", bin, err)
	}
	c := Components{}
	for _, kind := range []string{"receivers", "processors", "exporters", "extensions", "connectors"} {
		list, _ := doc[kind].([]any)
		for _, item := range list {
			if m, ok := item.(map[string]any); ok {
				if name, ok := m["name"].(string); ok {
					c[kind] = append(c[kind], name)
				}
			}
		}
	}
	return c, nil
}

// Config is a collector configuration as a YAML-shaped map, built by Env.CollectorConfig and
// adjusted by tests with Set/Delete before StartCollector writes it.
type Config map[string]any

// Set assigns value at a dotted path ("processors.k8s_object_link.id_map.backend"), creating
// intermediate maps. Component IDs containing dots are not supported (none here has one).
func (c Config) Set(path string, value any) Config {
	keys := strings.Split(path, ".")
	m := map[string]any(c)
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			if cfg, ok := m[k].(Config); ok {
				next = cfg
			} else {
				next = map[string]any{}
				m[k] = next
			}
		}
		m = next
	}
	m[keys[len(keys)-1]] = value
	return c
}

// Get returns the value at a dotted path, or nil.
func (c Config) Get(path string) any {
	var cur any = map[string]any(c)
	for _, k := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}

// Delete removes the value at a dotted path.
func (c Config) Delete(path string) Config {
	keys := strings.Split(path, ".")
	if parent, ok := c.Get(strings.Join(keys[:len(keys)-1], ".")).(map[string]any); ok || len(keys) == 1 {
		if len(keys) == 1 {
			delete(c, keys[0])
		} else {
			delete(parent, keys[len(keys)-1])
		}
	}
	return c
}

// Pipeline returns the component IDs of the traces pipeline's stage ("receivers",
// "processors", "exporters").
func (c Config) Pipeline(stage string) []string {
	list, _ := c.Get("service.pipelines.traces." + stage).([]any)
	out := make([]string, 0, len(list))
	for _, v := range list {
		out = append(out, fmt.Sprint(v))
	}
	return out
}

// SetPipeline replaces the traces pipeline's stage.
func (c Config) SetPipeline(stage string, ids ...string) Config {
	list := make([]any, len(ids))
	for i, id := range ids {
		list[i] = id
	}
	return c.Set("service.pipelines.traces."+stage, list)
}

// YAML renders the configuration.
func (c Config) YAML() ([]byte, error) { return yaml.Marshal(map[string]any(c)) }

// otlpExporter is the OTLP gRPC exporter's type in this build: otlp_grpc since core v0.160,
// otlp before.
func (c Components) otlpExporter() string {
	if c.Has("exporters", "otlp_grpc") {
		return "otlp_grpc"
	}
	return "otlp"
}

// CollectorConfig returns the configuration the harness runs: every kubetrail component the
// binary has, in one traces pipeline, exporting to Jaeger. The k8s_audit endpoint is filled in by
// StartCollector. Tests copy and adjust it for extra collectors.
func (e *Env) CollectorConfig() Config {
	c := Config{}
	var receivers, processors []string
	if e.Components.Has("receivers", "k8s_audit") {
		c.Set("receivers.k8s_audit.cluster", ClusterName)
		receivers = append(receivers, "k8s_audit")
	}
	if e.Components.Has("receivers", "k8s_event_spans") {
		c.Set("receivers.k8s_event_spans.auth_type", "kubeConfig")
		c.Set("receivers.k8s_event_spans.cluster", ClusterName)
		receivers = append(receivers, "k8s_event_spans")
	}
	if len(receivers) == 0 {
		// A binary without kubetrail receivers still gets a valid pipeline, so the harness
		// itself can be exercised; every kubetrail check then fails, as it should.
		c.Set("receivers.otlp.protocols.grpc.endpoint", "127.0.0.1:0")
		receivers = append(receivers, "otlp")
	}
	if e.Components.Has("processors", "k8s_object_link") {
		c.Set("processors.k8s_object_link", map[string]any{})
		processors = append(processors, "k8s_object_link")
	}
	c.Set("processors.batch.timeout", "200ms")
	processors = append(processors, "batch")
	exp := e.Components.otlpExporter()
	c.Set("exporters."+exp+".endpoint", e.Jaeger.OTLPGRPC)
	c.Set("exporters."+exp+".tls.insecure", true)
	c.SetPipeline("receivers", receivers...)
	c.SetPipeline("processors", processors...)
	c.SetPipeline("exporters", exp)
	// The collector's own metrics would listen on 8888 in every instance: off.
	c.Set("service.telemetry.metrics.level", "none")
	c.Set("service.telemetry.logs.level", "info")
	return c
}

// Collector is a running otelcol-kubetrail process.
type Collector struct {
	Name string
	// AuditURL is the base URL of its k8s_audit webhook (http://127.0.0.1:port), "" without one.
	AuditURL   string
	ConfigPath string
	LogPath    string
	proc       *Process
	env        *Env
	auditAddr  string
	opts       CollectorOptions
}

// CollectorOptions change how a collector process starts.
type CollectorOptions struct {
	// Kubeconfig replaces the testbed's admin kubeconfig (e.g. one that names a fault proxy).
	Kubeconfig string
	// FeatureGates are passed as --feature-gates (e.g. +extension.healthcheck.useComponentStatus).
	FeatureGates []string
}

// StartCollector writes cfg (with a free port for k8s_audit when it has that receiver) and starts
// otelcol-kubetrail on it, with KUBECONFIG pointing at the testbed. It returns once the webhook
// port accepts connections. name must be unique; files go to <out>/collector-<name>.*.
func (e *Env) StartCollector(name string, cfg Config) (*Collector, error) {
	return e.StartCollectorWith(name, cfg, CollectorOptions{})
}

// StartCollectorWith is StartCollector with options.
func (e *Env) StartCollectorWith(name string, cfg Config, opts CollectorOptions) (*Collector, error) {
	c := &Collector{Name: name, env: e, opts: opts,
		ConfigPath: filepath.Join(e.OutDir, "collector-"+name+".yaml"),
		LogPath:    filepath.Join(e.OutDir, "collector-"+name+".log")}
	if cfg.Get("receivers.k8s_audit") != nil {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		c.auditAddr = fmt.Sprintf("127.0.0.1:%d", port)
		cfg.Set("receivers.k8s_audit.endpoint", c.auditAddr)
		c.AuditURL = "http://" + c.auditAddr
	}
	b, err := cfg.YAML()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(c.ConfigPath, b, 0o644); err != nil {
		return nil, err
	}
	return c, c.start()
}

func (c *Collector) start() error {
	kubeconfig, args := c.env.Kubeconfig, []string{"--config", c.ConfigPath}
	if c.opts.Kubeconfig != "" {
		kubeconfig = c.opts.Kubeconfig
	}
	if len(c.opts.FeatureGates) > 0 {
		args = append(args, "--feature-gates="+strings.Join(c.opts.FeatureGates, ","))
	}
	p, err := StartProcess("collector-"+c.Name, c.LogPath, c.env.pidDir, []string{"KUBECONFIG=" + kubeconfig},
		c.env.CollectorBin, args...)
	if err != nil {
		return err
	}
	c.proc = p
	if c.auditAddr != "" {
		if err := WaitTCP(c.auditAddr, p, 30*time.Second); err != nil {
			_ = p.Stop(5 * time.Second)
			return fmt.Errorf("collector %s: %w", c.Name, err)
		}
		return nil
	}
	// Without a webhook port there is nothing to probe: give it a moment to fail on bad config.
	time.Sleep(time.Second)
	if done, err := p.Exited(); done {
		return fmt.Errorf("collector %s exited (%v):\n%s", c.Name, err, p.LogTail(20))
	}
	return nil
}

// Stop stops the collector (SIGTERM: it flushes its batch and exporters).
func (c *Collector) Stop() error {
	if c == nil {
		return nil
	}
	return c.proc.Stop(15 * time.Second)
}

// Kill stops the collector with SIGKILL: nothing is flushed (a crash).
func (c *Collector) Kill() {
	_ = c.proc.Cmd.Process.Kill()
	<-c.proc.done
}

// Restart stops the collector (gracefully) and starts it again on the same config and ports.
func (c *Collector) Restart() error {
	if err := c.Stop(); err != nil {
		return err
	}
	return c.start()
}

// Running reports whether the process is alive.
func (c *Collector) Running() bool {
	done, _ := c.proc.Exited()
	return !done
}

// LogContains reports whether the collector's log contains s (e.g. an error it should not log).
func (c *Collector) LogContains(s string) bool {
	b, _ := os.ReadFile(c.LogPath)
	return bytes.Contains(b, []byte(s))
}

// LogTail returns the last n lines of the collector's log.
func (c *Collector) LogTail(n int) string { return c.proc.LogTail(n) }
