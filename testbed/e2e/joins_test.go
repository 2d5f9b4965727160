//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kubetrail/kubetrail/internal/model"
)

// TestDeploymentJoinsTraces checks the joins with other traces on the deployment scenario: the
// Deployment created with a trace context has its window span linked to that trace and, the
// context being fresh, its first window placed in it (a pointer left in its derived trace); every
// kubectl write's audit span is joined with the apiserver's own request trace (KEP-647), which
// holds the etcd call of a create or an update.
func TestDeploymentJoinsTraces(t *testing.T) {
	env := Testbed(t)
	requireObjectLink(t, env)
	run := env.Run(t, "deployment")
	spans := ofClusterName(env.Spans(t, run), ClusterName)

	t.Run("the Deployment's window span links to the trace context it was created with", func(t *testing.T) {
		uids := createdUIDs(spans, run.Window(), "Deployment", "default", "demo")
		if !Check(t, "the run created one Deployment default/demo", len(uids) == 1, "created UIDs %v", uids) {
			return
		}
		want := strings.Split(run.Traceparent, "-")
		objects := spans.OfType(model.SpanTypeObject).WithAttr(model.AttrObjectUID, uids[0])
		linked := objects.Where(func(s *Span) bool { return hasLink(s, model.LinkTypeTraceContext, want[1], want[2]) })
		Check(t, "the Deployment's object span links to the given trace", len(objects) > 0 && len(linked) == len(objects),
			"%d of %d object spans of Deployment default/demo link to %s: %v", len(linked), len(objects), run.Traceparent, linksOf(objects))
		create := spans.OfType(model.SpanTypeAudit).WithAttr(model.AttrObjectUID, uids[0]).WithAttr(model.AttrAuditVerb, "create")
		Check(t, "the create's audit span links to the given trace", len(create) == 1 && hasLink(create[0], model.LinkTypeTraceContext, want[1], want[2]),
			"create spans %v, links %v", create.Names(), linksOf(create))
	})

	t.Run("the Deployment's first window is placed in the context's trace, and its derived trace points there", func(t *testing.T) {
		uids := createdUIDs(spans, run.Window(), "Deployment", "default", "demo")
		if len(uids) != 1 {
			return // the sub-test above says why
		}
		want := strings.Split(run.Traceparent, "-")
		objects := spans.OfType(model.SpanTypeObject).WithAttr(model.AttrObjectUID, uids[0])
		placed := objects.Where(func(s *Span) bool { return s.TraceID == want[1] && s.ParentSpanID == want[2] })
		if !Check(t, "the Deployment's first window is under the context's span", len(placed) > 0, "object spans %v", linksOf(objects)) {
			return
		}
		first := placed[0]
		derived := model.ObjectTraceID(model.UIDKey(ClusterName, uids[0]), first.Start).String()
		// The pointer starts at the window's start, before the run: read its trace by ID.
		got, err := waitTrace(t, env, derived, 30*time.Second, func(ss Spans) error {
			if p := ss.WithAttr(model.AttrTracePlacedIn, want[1]); len(p) != 1 || p[0].ParentSpanID != "" {
				return fmt.Errorf("%d pointers to %s", len(p), want[1])
			}
			return nil
		})
		Check(t, "the window's derived trace holds a pointer to the context's trace", err == nil, "%v; derived trace %s: %v", err, derived, got.Names())
	})

	t.Run("kubectl's writes are joined with the apiserver's request traces", func(t *testing.T) {
		if !Check(t, "the collector receives the apiserver's traces", env.TracingAddr != "", "the collector has no otlp receiver") {
			return
		}
		// The scenario's own writes (its window may also hold the last writes of the scenario
		// before it).
		writes := spans.OfType(model.SpanTypeAudit).Where(func(s *Span) bool {
			name := s.Attr(model.AttrObjectName)
			return strings.HasPrefix(s.Attr(model.AttrUserAgent), "kubectl") && s.Attr(model.AttrNamespaceName) == "default" &&
				(name == "demo" || strings.HasPrefix(name, "demo-"))
		})
		if !Check(t, "kubectl wrote during the run", len(writes) >= 5, "kubectl audit spans: %v", writes.Names()) {
			return
		}
		defer func() {
			if t.Failed() {
				logAPIServerTraces(t, env, run.Window())
			}
		}()
		for _, w := range writes {
			id := w.Attr(model.AttrAuditID)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			req, err := apiserverTrace(ctx, env, run.Window(), id)
			cancel()
			if !Check(t, "an apiserver trace for "+w.Name, err == nil, "audit ID %s: %v", id, err) {
				continue
			}
			// The otelhttp server span (under the filter-latency span "authentication").
			server := req.Where(func(s *Span) bool { return s.Attr("audit-id") == id && s.Attr("http.request.method") != "" })
			if !Check(t, "the apiserver trace of "+w.Name+" has its server span", len(server) == 1, "spans %v", req.Names()) {
				continue
			}
			joined := hasLink(w, model.LinkTypeAPIServerRequest, server[0].TraceID, server[0].SpanID) ||
				hasLink(server[0], model.LinkTypeAPIServerRequest, w.TraceID, w.SpanID)
			Check(t, w.Name+" is linked with its apiserver request span", joined,
				"audit span links %v, request span links %v", w.Links, server[0].Links)
			// The storage layer's spans ("Create etcd3", "GuaranteedUpdate etcd3") and the etcd
			// client's gRPC calls (etcdserverpb.KV/Txn, …; the only ones of a delete).
			etcd := req.Where(func(s *Span) bool {
				return strings.HasSuffix(s.Name, " etcd3") || strings.HasPrefix(s.Name, "etcdserverpb.KV/")
			})
			Check(t, "the apiserver trace of "+w.Name+" holds its etcd calls", len(etcd) > 0, "spans %v", req.Names())
		}
	})
}

// apiserverTrace polls Jaeger for the apiserver's trace of the request with this audit ID.
func apiserverTrace(ctx context.Context, env *Env, w Window, auditID string) (Spans, error) {
	for {
		ids, err := env.Jaeger.TraceIDs(ctx, apiserverService, w.Start, w.End.Add(time.Minute), map[string]string{"audit-id": auditID})
		if err == nil && len(ids) == 1 {
			spans, _, err := env.Jaeger.Trace(ctx, ids[0])
			if err == nil && len(spans) > 0 {
				return spans, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no apiserver trace with audit-id %s (last: %d traces, %v)", auditID, len(ids), err)
		case <-time.After(time.Second):
		}
	}
}

func hasLink(s *Span, typ, traceID, spanID string) bool {
	for _, l := range s.Links {
		if l.TraceID == traceID && l.SpanID == spanID && fmt.Sprint(l.Attributes[model.AttrLinkType]) == typ {
			return true
		}
	}
	return false
}

func linksOf(ss Spans) []string {
	var out []string
	for _, s := range ss {
		for _, l := range s.Links {
			out = append(out, fmt.Sprintf("%s -> %s/%s %v", s.Name, l.TraceID, l.SpanID, l.Attributes[model.AttrLinkType]))
		}
	}
	return out
}

// logAPIServerTraces says what Jaeger holds of the apiserver's traces in w, for a failed check.
func logAPIServerTraces(t *testing.T, env *Env, w Window) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	services, err := env.Jaeger.Services(ctx)
	t.Logf("jaeger services: %v (%v)", services, err)
	ids, err := env.Jaeger.TraceIDs(ctx, apiserverService, w.Start, w.End.Add(time.Minute), nil)
	t.Logf("apiserver traces in the run's window: %d (%v)", len(ids), err)
	for _, id := range ids[:min(3, len(ids))] {
		spans, _, err := env.Jaeger.Trace(ctx, id)
		for _, s := range spans {
			t.Logf("  %s %s parent=%q attrs=%v links=%v (%v)", id, s.Name, s.ParentSpanID, s.Attributes, s.Links, err)
		}
	}
}
