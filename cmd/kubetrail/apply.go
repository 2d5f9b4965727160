package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/kubetrail/kubetrail/cmd/kubetrail/internal/trail"
	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/pkg/objecttrace"
)

// defaultFieldManager is apply's field manager, kubectl's own for its server-side apply being
// "kubectl".
const defaultFieldManager = "kubectl-trail"

// rootSpanName is the name of the span of the whole command.
const rootSpanName = "kubectl trail apply"

// pollInterval is how often --wait reads each object; tests shorten it.
var pollInterval = time.Second

// settleEvery is how often the backend is read again while the rollout's spans arrive, and
// settleQuiet how long the tree must stay unchanged to be taken as whole when the spans do not
// tell readiness; tests shorten them.
var settleEvery, settleQuiet = 2 * time.Second, 6 * time.Second

type applyFlags struct {
	kube           kubeFlags
	files          []string
	fieldManager   string
	force, wait    bool
	timeout        time.Duration
	cluster        string
	source         string
	window, settle time.Duration
	origin         resolved // where --source, --cluster and --window came from
}

// applyCommand is apply's command line; cmd is the command as the user typed it.
func applyCommand(cmd string, f *applyFlags) *command {
	c := newCommand(cmd,
		"Apply objects server-side inside a trace: a root span (a child of $TRACEPARENT when set) exported over OTLP,\nthe trace context on every object and every request, and with --wait the rollout followed to its end.",
		`Every object gets the `+objecttrace.AnnotationTraceparent+` annotation (the root span's W3C traceparent) and is
applied with server-side apply in a client span whose context the request carries (traceparent, tracestate),
so the apiserver's spans and kubetrail's spans of the objects join the trace. The OTLP exporter is configured
by the standard variables (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL http/protobuf or grpc,
OTEL_EXPORTER_OTLP_HEADERS, OTEL_SERVICE_NAME, ...). The trace ID is printed on stderr first.`,
		fmt.Sprintf(`  # Apply a file and wait for the rollout, inside the CI step's trace
  TRACEPARENT=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 \
    OTEL_EXPORTER_OTLP_ENDPOINT=http://otel-collector:4318 %[1]s -f deploy.yaml --wait

  # A directory's manifests into a namespace; then the rollout's tree and why it was slow, from Jaeger
  %[1]s -f manifests/ -n shop --wait --timeout 5m --cluster prod-eu-1 --source jaeger=http://jaeger:16686

  # From stdin
  kustomize build overlays/prod | %[1]s -f - --wait
`, cmd),
		"-f (FILENAME | DIRECTORY | -) [--wait] [options]")
	c.group("Objects", func(fs *pflag.FlagSet) {
		fs.StringSliceVarP(&f.files, "filename", "f", nil, "The objects to apply: a YAML or JSON file (several documents, Lists), a directory's .yaml, .yml and .json files (not its subdirectories), or - for stdin. Repeatable.")
	})
	c.group("Cluster", func(fs *pflag.FlagSet) {
		f.kube.add(fs, "The namespace of objects that name none (default: the kubeconfig context's, then \"default\"). An object naming another is refused, as kubectl refuses it.")
	})
	c.group("Apply", func(fs *pflag.FlagSet) {
		fs.StringVar(&f.fieldManager, "field-manager", defaultFieldManager, "The field manager of server-side apply.")
		fs.BoolVar(&f.force, "force-conflicts", false, "Take over fields another field manager owns, instead of failing on the conflict.")
	})
	c.group("Wait", func(fs *pflag.FlagSet) {
		fs.BoolVar(&f.wait, "wait", false, "Wait until every applied workload reaches its desired state: a Deployment, StatefulSet, DaemonSet or ReplicaSet rolled out, a Job complete, a Pod ready (other kinds are ready once applied).")
		fs.DurationVar(&f.timeout, "timeout", 10*time.Minute, "How long --wait waits, from the end of the apply.")
	})
	c.group("Report (after --wait: the tree and why it was slow, as trace prints them)", func(fs *pflag.FlagSet) {
		fs.StringVar(&f.source, "source", "", "Where the collector's traces are: jaeger=URL or file=PATH, as for trace. Default $KUBETRAIL_SOURCE, then the config file's for the context (kubetrail config view); without one, a line says which trace command to run.")
		fs.StringVar(&f.cluster, "cluster", "", "The collector's cluster setting (k8s.cluster.name; default $KUBETRAIL_CLUSTER, then the config file's for the context), from which the traces' IDs are computed.")
		fs.DurationVar(&f.window, "window", model.DefaultWindow, "The collector's window (k8s_object_link's window setting; default: the config file's for the context, else 30m).")
		fs.DurationVar(&f.settle, "settle", 30*time.Second, "How long to read the backend again until the rollout's spans have arrived.")
	})
	return c
}

// stdin is what -f - reads; tests replace it.
var stdin io.Reader = os.Stdin

// applied is one object as the apiserver answered its apply.
type applied struct {
	m       mapping
	obj     *unstructured.Unstructured
	display string // "deployment.apps/web", as kubectl prints it
	at      time.Time
}

// runApply is `kubetrail apply`; prog is the program as the user typed it, cmd the command,
// traceCmd the command that traces an object ("kubectl trail", "kubetrail trace").
func runApply(ctx context.Context, prog, cmd, traceCmd string, args []string, stdout, stderr io.Writer) (err error) {
	var f applyFlags
	c := applyCommand(cmd, &f)
	pos, err := c.parse(args, stdout)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return usagef("%s takes its objects from files, with -f: got arguments %s", cmd, strings.Join(pos, " "))
	case len(f.files) == 0:
		return usagef("-f is required: a file, a directory of .yaml, .yml and .json files, or - for stdin")
	case f.timeout <= 0:
		return usagef("--timeout %s: want a positive duration, e.g. 10m", f.timeout)
	case f.window < time.Second:
		return usagef("--window %s: want the collector's window, e.g. 30m", f.window)
	case f.settle < 0:
		return usagef("--settle %s: want a duration, 0 to read the backend once", f.settle)
	case f.fieldManager == "":
		return usagef("--field-manager: want a name, e.g. %s", defaultFieldManager)
	}
	r, err := resolveDefaults(&f.kube, c.fs, &f.source, &f.cluster, &f.window)
	if err != nil {
		return err
	}
	f.origin = r
	var src trail.Source
	if f.source != "" {
		if src, err = trail.OpenSource(f.source); err != nil {
			if r.source.fromFile() {
				return r.sourceError(err)
			}
			return usageError{err}
		}
	}
	manifests, err := readManifests(f.files, stdin)
	if err != nil {
		return err
	}
	if len(manifests) == 0 {
		return fmt.Errorf("-f %s: no objects", strings.Join(f.files, ","))
	}

	tr, err := startTracing(ctx)
	if err != nil {
		return err
	}
	if tr.warning != nil {
		fmt.Fprintf(stderr, "%s: warning: the trace's resource: %s\n", prog, trail.Escape(tr.warning.Error()))
	}
	pctx, _, perr := parentFromEnv(ctx)
	if perr != nil {
		fmt.Fprintf(stderr, "%s: warning: %s; starting a new trace\n", prog, trail.Escape(perr.Error()))
	}
	rctx, root := tr.tracer.Start(pctx, rootSpanName, trace.WithSpanKind(trace.SpanKindInternal))
	traceID := root.SpanContext().TraceID().String()
	fmt.Fprintf(stderr, "%s: trace %s\n", prog, traceID)
	defer func() {
		if err != nil {
			root.SetStatus(codes.Error, err.Error())
		}
		root.End()
		if e := tr.shutdown(); e != nil {
			fmt.Fprintf(stderr, "%s: warning: the trace's spans were not all exported (%s): check OTEL_EXPORTER_OTLP_ENDPOINT\n", prog, trail.Escape(e.Error()))
		}
	}()

	f.kube.wrap = objecttrace.WrapTransport
	cl, err := connect(&f.kube, stderr)
	if err != nil {
		return err
	}
	if _, lists, err := cl.disc.ServerGroupsAndResources(); err != nil && len(lists) == 0 {
		return fmt.Errorf("cluster (context %s) unreachable: %w", cl.context, err)
	}
	// Every object is mapped and placed before the first is applied: a typo applies nothing.
	type planned struct {
		manifest
		m mapping
	}
	plan := make([]planned, 0, len(manifests))
	for _, mf := range manifests {
		gvk := mf.obj.GroupVersionKind()
		rm, err := cl.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		switch {
		case meta.IsNoMatchError(err):
			return fmt.Errorf("%s: the cluster (context %s) serves no kind %s in %s", mf.where, cl.context, gvk.Kind, mf.obj.GetAPIVersion())
		case err != nil:
			return fmt.Errorf("%s: %w", mf.where, err)
		}
		m := mapping{gvr: rm.Resource, kind: gvk.Kind, namespaced: rm.Scope.Name() == meta.RESTScopeNameNamespace}
		if !m.namespaced {
			mf.obj.SetNamespace("")
		} else if ns := mf.obj.GetNamespace(); ns == "" {
			mf.obj.SetNamespace(f.kube.namespaceFor(true, cl))
		} else if f.kube.namespaceSet() && f.kube.namespace != ns {
			return fmt.Errorf("%s: the object's namespace %q does not match -n %q: pass -n %s, or none", mf.where, ns, f.kube.namespace, ns)
		}
		plan = append(plan, planned{manifest: mf, m: m})
	}

	start := now()
	var done []*applied
	var failed []string
	for _, p := range plan {
		a, err := applyOne(rctx, tr.tracer, cl, p.obj, p.m, f)
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", p.where, err))
			continue
		}
		fmt.Fprintf(stdout, "%s serverside-applied\n", trail.Escape(a.display))
		done = append(done, a)
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d objects not applied:\n  %s", len(failed), len(plan), strings.Join(failed, "\n  "))
	}
	shown := reported(done)
	waitErr := error(nil)
	if f.wait {
		waitErr = waitAll(rctx, tr.tracer, cl, done, f.timeout, stdout)
	}
	if src == nil || !f.wait {
		for _, a := range shown {
			fmt.Fprintf(stderr, "%s: %s's story: %s; trace %s\n", prog, trail.Escape(a.display), trail.Escape(traceCommandLine(traceCmd, a, f, start)), traceID)
		}
		return waitErr
	}
	for i, a := range shown {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		report(ctx, a, f, start, stdout, stderr, prog, traceCmd)
	}
	return waitErr
}

// applyOne applies one object in a client span, with the trace context annotation of ctx's span
// (the root span).
func applyOne(ctx context.Context, tracer trace.Tracer, cl *cluster, obj *unstructured.Unstructured, m mapping, f applyFlags) (*applied, error) {
	objecttrace.EncodeContextIntoObject(ctx, obj)
	attrs := []attribute.KeyValue{
		attribute.String(model.AttrObjectAPIVersion, obj.GetAPIVersion()),
		attribute.String(model.AttrObjectKind, obj.GetKind()),
		attribute.String(model.AttrObjectResource, m.gvr.Resource),
		attribute.String(model.AttrObjectName, obj.GetName()),
	}
	if ns := obj.GetNamespace(); ns != "" {
		attrs = append(attrs, attribute.String(model.AttrNamespaceName, ns))
	}
	sctx, span := tracer.Start(ctx, "apply "+resourceName(m), trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	defer span.End()
	data, err := json.Marshal(obj.Object)
	if err != nil {
		return nil, err
	}
	var res dynamic.ResourceInterface = cl.dynamic.Resource(m.gvr)
	if ns := obj.GetNamespace(); ns != "" {
		res = cl.dynamic.Resource(m.gvr).Namespace(ns)
	}
	out, err := res.Patch(sctx, obj.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: f.fieldManager, Force: &f.force})
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		if apierrors.IsConflict(err) && !f.force {
			err = fmt.Errorf("%w (take the fields over with --force-conflicts)", err)
		}
		return nil, err
	}
	span.SetAttributes(attribute.String(model.AttrObjectUID, string(out.GetUID())))
	if g := out.GetGeneration(); g > 0 {
		span.SetAttributes(attribute.Int64(model.AttrObjectGeneration, g))
	}
	return &applied{m: m, obj: out, display: displayName(m, obj.GetName()), at: now()}, nil
}

// resourceName is the resource with its group, as kubectl names it: deployments.apps, pods.
func resourceName(m mapping) string {
	if m.gvr.Group == "" {
		return m.gvr.Resource
	}
	return m.gvr.Resource + "." + m.gvr.Group
}

// displayName is an object as kubectl's apply prints it: deployment.apps/web, configmap/cfg.
func displayName(m mapping, name string) string {
	kind := strings.ToLower(m.kind)
	if m.gvr.Group != "" {
		kind += "." + m.gvr.Group
	}
	return kind + "/" + name
}

// reported are the applied objects whose story apply tells: the workloads --wait follows, or
// every object when none is one.
func reported(done []*applied) []*applied {
	var out []*applied
	for _, a := range done {
		if _, ok := rolloutOf(a.obj); ok {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return done
	}
	return out
}

// traceCommandLine is the trace command that shows a's story since the apply began.
func traceCommandLine(traceCmd string, a *applied, f applyFlags, start time.Time) string {
	parts := []string{traceCmd, a.display}
	if ns := a.obj.GetNamespace(); ns != "" {
		parts = append(parts, "-n", ns)
	}
	if f.kube.context != "" {
		parts = append(parts, "--context", f.kube.context)
	}
	if f.cluster != "" {
		parts = append(parts, "--cluster", f.cluster)
	}
	parts = append(parts, "--since", start.UTC().Format(time.RFC3339))
	if f.source != "" {
		parts = append(parts, "--source", f.source)
	} else {
		parts = append(parts, "--source", "jaeger=URL")
	}
	return strings.Join(parts, " ")
}

// waited is one object's --wait.
type waited struct {
	a     *applied
	end   time.Time
	state rollout
	err   error // the last read's failure
}

// waitAll follows every applied object with a readiness rule until it is ready, one fails, or
// timeout passes; each in a span "wait <object>" from its apply until then. The reads are sent
// without the trace context: one a second per object would bury the rollout in read spans.
func waitAll(ctx context.Context, tracer trace.Tracer, cl *cluster, done []*applied, timeout time.Duration, stdout io.Writer) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var mu sync.Mutex
	var ws []*waited
	var wg sync.WaitGroup
	for _, a := range done {
		if _, ok := rolloutOf(a.obj); !ok {
			continue
		}
		w := &waited{a: a}
		ws = append(ws, w)
		wg.Go(func() {
			waitOne(wctx, tracer, cl, w, stdout, &mu)
			if w.state.failed {
				cancel() // one failure fails the apply: stop waiting for the others
			}
		})
	}
	wg.Wait()
	var failed, pending []*waited
	for _, w := range ws {
		switch {
		case w.state.failed:
			failed = append(failed, w)
		case !w.state.done:
			pending = append(pending, w)
		}
	}
	// The one that waited longest first: the earliest applied.
	sort.SliceStable(pending, func(i, j int) bool { return pending[i].a.at.Before(pending[j].a.at) })
	describe := func(w *waited) string {
		s := w.a.display + " " + w.state.lack
		if w.err != nil {
			s += fmt.Sprintf(" (its last read failed: %v)", w.err)
		}
		return s
	}
	var more string
	if len(pending) > 0 {
		var names []string
		for _, w := range pending {
			names = append(names, describe(w))
		}
		more = names[0] + " (waited longest)"
		if len(names) > 1 {
			more += "; also not ready: " + strings.Join(names[1:], ", ")
		}
	}
	switch {
	case len(failed) > 0:
		w := failed[0]
		msg := fmt.Sprintf("%s failed after %s: %s", w.a.display, trail.FormatDuration(w.end.Sub(w.a.at)), w.state.lack)
		if more != "" {
			msg += "; not ready when it failed: " + more
		}
		return errors.New(msg)
	case len(pending) > 0 && ctx.Err() != nil:
		return fmt.Errorf("interrupted while waiting: %s", more)
	case len(pending) > 0:
		return fmt.Errorf("timed out after %s: %s", timeout, more)
	}
	return nil
}

// waitOne polls one object until it is ready, fails or ctx ends.
func waitOne(ctx context.Context, tracer trace.Tracer, cl *cluster, w *waited, stdout io.Writer, mu *sync.Mutex) {
	a := w.a
	sctx, span := tracer.Start(ctx, "wait "+a.display, trace.WithTimestamp(a.at), trace.WithAttributes(
		attribute.String(model.AttrObjectKind, a.m.kind),
		attribute.String(model.AttrObjectName, a.obj.GetName()),
		attribute.String(model.AttrNamespaceName, a.obj.GetNamespace()),
		attribute.String(model.AttrObjectUID, string(a.obj.GetUID())),
	))
	// Reads outside any span: no traceparent on them.
	rctx := trace.ContextWithSpanContext(sctx, trace.SpanContext{})
	w.state, _ = rolloutOf(a.obj)
	for !w.state.done && !w.state.failed {
		select {
		case <-ctx.Done():
			w.end = now()
			span.SetStatus(codes.Error, "not ready: "+w.state.lack)
			span.End()
			return
		case <-time.After(pollInterval):
		}
		obj, err := cl.get(rctx, a.m.gvr, a.obj.GetNamespace(), a.obj.GetName())
		switch {
		case apierrors.IsNotFound(err):
			w.state = rollout{failed: true, lack: "deleted while waiting"}
		case err != nil && ctx.Err() == nil:
			w.err = err
		case err == nil:
			if obj.GetUID() != a.obj.GetUID() {
				w.state = rollout{failed: true, lack: "deleted and created again while waiting"}
				break
			}
			w.err = nil
			w.state, _ = rolloutOf(obj)
		}
	}
	w.end = now()
	if w.state.failed {
		span.SetStatus(codes.Error, w.state.lack)
	} else {
		mu.Lock()
		fmt.Fprintf(stdout, "%s ready after %s\n", trail.Escape(a.display), trail.FormatDuration(w.end.Sub(a.at)))
		mu.Unlock()
	}
	span.End()
}

// report prints an applied object's tree and summary as trace prints them, from start on. The
// collector exports the rollout's spans a while after they happen: the backend is read again,
// for up to --settle, until the spans tell the tree was ready, or it stops changing. A backend
// that does not show it is a warning: the apply itself went as the exit status says.
func report(ctx context.Context, a *applied, f applyFlags, start time.Time, stdout, stderr io.Writer, prog, traceCmd string) {
	k := a.m
	target := trail.Target{Kind: k.kind, Group: k.gvr.Group, Resource: k.gvr.Resource, Namespace: a.obj.GetNamespace(),
		Name: a.obj.GetName(), Cluster: f.cluster, UID: string(a.obj.GetUID())}
	deadline := now().Add(f.settle)
	var v view
	var err error
	var warnings bytes.Buffer
	lastCount, stableSince := -1, time.Time{}
	complete := false
	pw := startProgress(stderr, progressLabel(f.source), terminal(stderr), realClock)
	for {
		warnings.Reset()
		// Opened again each time: a file source is read whole when opened.
		var src trail.Source
		if src, err = trail.OpenSource(f.source); err == nil {
			v, err = readView(ctx, src, target, viewOptions{Since: start, Window: f.window, Depth: -1}, &warnings, func(string, ...any) {})
		}
		if err == nil {
			if sum, ok := trail.Summarize(v.root); ok && sum.Ready {
				complete = true
				break
			}
			n := spanCount(v.root)
			if n != lastCount {
				lastCount, stableSince = n, now()
			} else if now().Sub(stableSince) >= settleQuiet {
				complete = true
				break
			}
		}
		if !now().Add(settleEvery).Before(deadline) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(settleEvery):
		}
	}
	pw.stop()
	_, _ = stderr.Write(warnings.Bytes())
	if err != nil {
		if errors.Is(err, trail.ErrUnreachable) {
			err = f.origin.sourceError(err)
		}
		fmt.Fprintf(stderr, "%s: warning: %s: %s; later: %s\n", prog, trail.Escape(a.display), trail.Escape(err.Error()), trail.Escape(traceCommandLine(traceCmd, a, f, start)))
		return
	}
	trail.WriteTree(stdout, v.root, v.header)
	if !complete {
		fmt.Fprintf(stderr, "%s: %s: its spans were still arriving after --settle %s; the rest: %s\n", prog, trail.Escape(a.display), f.settle, trail.Escape(traceCommandLine(traceCmd, a, f, start)))
	}
}

func spanCount(n *trail.Node) int {
	c := 0
	n.Walk(func(x *trail.Node) { c += len(x.Spans) + len(x.Windows) })
	return c
}
