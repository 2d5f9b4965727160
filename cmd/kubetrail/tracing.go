package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// serviceName is the service.name of the spans the command exports, unless OTEL_SERVICE_NAME
// or OTEL_RESOURCE_ATTRIBUTES say otherwise.
const serviceName = "kubectl-trail"

// shutdownTimeout bounds the export of the spans at the end: a collector that does not answer
// must not hold a CI step.
const shutdownTimeout = 5 * time.Second

// tracing is the command's own OpenTelemetry SDK: a tracer provider exporting over OTLP as the
// standard environment variables say (OTEL_EXPORTER_OTLP_ENDPOINT, …_PROTOCOL, …_HEADERS, the
// …_TRACES_ variants), every span sampled.
type tracing struct {
	// warning is what the Resource's detection could not read (a malformed
	// OTEL_RESOURCE_ATTRIBUTES): the rest is used.
	warning error
	tp      *sdktrace.TracerProvider
	tracer  trace.Tracer
	exp     *recordingExporter // nil with OTEL_TRACES_EXPORTER=none
}

// otlpProtocol is the OTLP protocol the environment asks for: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
// else OTEL_EXPORTER_OTLP_PROTOCOL, else the specification's default, http/protobuf.
func otlpProtocol() string {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v := strings.TrimSpace(os.Getenv(k)); v != "" {
			return v
		}
	}
	return "http/protobuf"
}

// startTracing makes the tracer provider. The exporters read the OTEL_EXPORTER_OTLP_* variables
// themselves; OTEL_TRACES_EXPORTER=none exports nothing (the context is still made and sent).
func startTracing(ctx context.Context) (*tracing, error) {
	// The SDK reports export failures to the global handler, which logs them unescaped to
	// stderr; the recording exporter reports them once, at the end, as a warning.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {}))
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(serviceName)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES: last, so they win
	)
	if err != nil && res == nil {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	t := &tracing{warning: err}
	opts := []sdktrace.TracerProviderOption{
		sdktrace.WithResource(res),
		// Always sampled, even under a TRACEPARENT whose flags say not: the user asked for this
		// trace by running the command.
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
	}
	if exporter := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")); exporter != "none" {
		if exporter != "" && exporter != "otlp" {
			return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: want otlp (the default) or none", exporter)
		}
		var exp sdktrace.SpanExporter
		switch p := otlpProtocol(); p {
		case "http/protobuf":
			exp, err = otlptracehttp.New(ctx)
		case "grpc":
			exp, err = otlptracegrpc.New(ctx)
		default:
			return nil, fmt.Errorf("OTLP protocol %q (OTEL_EXPORTER_OTLP_PROTOCOL or OTEL_EXPORTER_OTLP_TRACES_PROTOCOL): want http/protobuf (the default) or grpc", p)
		}
		if err != nil {
			return nil, fmt.Errorf("OTLP exporter: %w", err)
		}
		t.exp = &recordingExporter{SpanExporter: exp}
		opts = append(opts, sdktrace.WithBatcher(t.exp))
	}
	t.tp = sdktrace.NewTracerProvider(opts...)
	t.tracer = t.tp.Tracer("github.com/kubetrail/kubetrail/cmd/kubetrail")
	return t, nil
}

// shutdown exports what is left, within shutdownTimeout; an error is what to warn about.
func (t *tracing) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err := t.tp.Shutdown(ctx)
	if t.exp != nil {
		if e := t.exp.failure(); e != nil {
			err = e
		}
	}
	return err
}

// recordingExporter keeps the first export failure.
type recordingExporter struct {
	sdktrace.SpanExporter
	mu  sync.Mutex
	err error
}

func (r *recordingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := r.SpanExporter.ExportSpans(ctx, spans)
	if err != nil {
		r.mu.Lock()
		if r.err == nil {
			r.err = err
		}
		r.mu.Unlock()
	}
	return err
}

func (r *recordingExporter) failure() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// parentFromEnv is the span context of TRACEPARENT (and TRACESTATE), the convention CI systems
// and otel-cli follow to hand a trace to the commands of a step; ok is false when TRACEPARENT is
// unset, and err says why a set one cannot be read.
func parentFromEnv(ctx context.Context) (context.Context, bool, error) {
	tp := strings.TrimSpace(os.Getenv("TRACEPARENT"))
	if tp == "" {
		return ctx, false, nil
	}
	carrier := propagation.MapCarrier{"traceparent": tp}
	if ts := os.Getenv("TRACESTATE"); ts != "" {
		carrier["tracestate"] = ts
	}
	pctx := propagation.TraceContext{}.Extract(ctx, carrier)
	if !trace.SpanContextFromContext(pctx).IsValid() {
		return ctx, false, errors.New("TRACEPARENT is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)")
	}
	return pctx, true, nil
}
