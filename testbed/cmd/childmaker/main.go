// Command childmaker is the testbed's example controller, and the example of pkg/objecttrace: a
// client-go controller (informers and a work queue, no framework) whose reconcile spans land in
// the kubetrail trace of the object they work on.
//
// It watches ConfigMaps. One with the annotation kubetrail.dev/children: "N" (0 to 20) is a
// parent: childmaker keeps N child ConfigMaps <parent>-child-0 … <parent>-child-<N-1> in its
// namespace, each controlled by the parent (ownerReference controller, blockOwnerDeletion), and
// deletes the other children it controls. After each reconcile it writes
// kubetrail.dev/children-ready: "N" on the parent, and, with -end-trace, removes the parent's
// trace.kubernetes.io/context annotation: the parent reached the state it asked for.
//
// Every reconcile is a span started with objecttrace's StartSpanFromObject on the parent, with a
// child span per child created or deleted; the children carry that span's context in
// trace.kubernetes.io/context, and every API request carries traceparent and tracestate
// (objecttrace.WrapTransport), so the apiserver's spans of the requests join the trace too.
//
//	childmaker [-kubeconfig FILE] [-namespace NS] [-cluster NAME] [-window 30m] [-batch-timeout 1s] [-end-trace=true]
//
// Spans are exported over OTLP/gRPC, configured by the standard variables
// (OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317 for a local collector without TLS,
// OTEL_EXPORTER_OTLP_HEADERS, …), with service.name childmaker unless OTEL_SERVICE_NAME says
// otherwise. -cluster and -window must match the collector's cluster and window settings; they
// default to $KUBETRAIL_CLUSTER and $KUBETRAIL_WINDOW (else 30m). The kubeconfig is -kubeconfig,
// else $KUBECONFIG or ~/.kube/config, else the in-cluster service account. SIGTERM or SIGINT
// stops it after flushing the spans it holds.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubetrail/kubetrail/pkg/objecttrace"
)

// name is the controller's name: its service.name, user agent, field manager and
// kubetrail.controller.name.
const name = "childmaker"

type config struct {
	kubeconfig   string
	namespace    string
	cluster      string
	window       time.Duration
	batchTimeout time.Duration
	endTrace     bool
}

func main() {
	var cfg config
	flag.StringVar(&cfg.kubeconfig, "kubeconfig", "", "kubeconfig file (default $KUBECONFIG, ~/.kube/config, or in-cluster)")
	flag.StringVar(&cfg.namespace, "namespace", "", "namespace to watch (default all)")
	flag.StringVar(&cfg.cluster, "cluster", "", "cluster name, as the collector's cluster setting (default $KUBETRAIL_CLUSTER)")
	flag.DurationVar(&cfg.window, "window", 0, "window size, as k8s_object_link's window (default $KUBETRAIL_WINDOW, else 30m)")
	flag.DurationVar(&cfg.batchTimeout, "batch-timeout", time.Second, "longest time a span waits in the batch before export")
	flag.BoolVar(&cfg.endTrace, "end-trace", true, "remove the parent's trace.kubernetes.io/context once its children are ready")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		log.Fatalf("%s: %v", name, err)
	}
}

func run(ctx context.Context, cfg config) error {
	exporter, err := otlptracegrpc.New(ctx) // the OTEL_EXPORTER_OTLP_* variables configure it
	if err != nil {
		return fmt.Errorf("OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(name)), resource.WithFromEnv())
	if err != nil {
		return fmt.Errorf("resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res),
		sdktrace.WithBatcher(exporter, sdktrace.WithBatchTimeout(cfg.batchTimeout)))
	defer func() {
		// The signal cancelled ctx: flush with a context of its own.
		flushCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(flushCtx); err != nil {
			log.Printf("%s: flushing spans: %v", name, err)
		}
	}()

	rest, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: cfg.kubeconfig, Precedence: clientcmd.NewDefaultClientConfigLoadingRules().Precedence},
		&clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	rest.UserAgent = name
	rest.Wrap(objecttrace.WrapTransport) // traceparent and tracestate on every request
	client, err := kubernetes.NewForConfig(rest)
	if err != nil {
		return err
	}

	opts := []objecttrace.Option{objecttrace.WithTracerProvider(tp), objecttrace.WithControllerName(name)}
	if cfg.cluster != "" {
		opts = append(opts, objecttrace.WithCluster(cfg.cluster))
	}
	if cfg.window > 0 {
		opts = append(opts, objecttrace.WithWindow(cfg.window))
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(cfg.namespace))
	c := newController(client, factory.Core().V1().ConfigMaps(), objecttrace.New(opts...), tp.Tracer(name), cfg.endTrace)
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	log.Printf("%s: watching ConfigMaps in %s", name, orAll(cfg.namespace))
	return c.run(ctx, 2)
}

func orAll(namespace string) string {
	if namespace == "" {
		return "all namespaces"
	}
	return "namespace " + namespace
}
