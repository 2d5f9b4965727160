package auditconv

import (
	"fmt"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/kubetrail/kubetrail/internal/model"
)

const (
	userContext    = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	changedContext = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
)

// annotatedDeployment is a Deployment body whose annotations hold key: value.
func annotatedDeployment(rv, key, value string) string {
	return fmt.Sprintf(`{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"demo","namespace":"default","uid":"d-1","resourceVersion":%q,
	"annotations":{"deployment.kubernetes.io/revision":"1",%q:%q},"managedFields":[{"manager":"kubectl"}]},"spec":{"replicas":2}}`, rv, key, value)
}

// contextLinks returns the span's trace_context links as "<trace ID>-<span ID>".
func contextLinks(s ptrace.Span) []string {
	var out []string
	for _, l := range s.Links().All() {
		if attrStr(l.Attributes(), model.AttrLinkType) == model.LinkTypeTraceContext {
			out = append(out, l.TraceID().String()+"-"+l.SpanID().String())
		}
	}
	return out
}

func TestTraceContextAnnotation(t *testing.T) {
	const ann = model.AnnotationLegacyTraceContext // still read after KEP-5915's (TestKEP5915TraceContext)
	t.Run("a create whose response carries the annotation links to the given trace", func(t *testing.T) {
		ev := event("a1", "create", "ci", deployRef(""), 201, withResponse(annotatedDeployment("1", ann, userContext)))
		s := onlySpan(t, must(convertOne(t, testConverter(), ev)))
		if got := contextLinks(s); len(got) != 1 || got[0] != "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7" {
			t.Fatalf("links = %v", got)
		}
		if f := s.Links().At(0).Flags(); f != 1 {
			t.Fatalf("link flags = %d, want the traceparent's 01", f)
		}
	})
	t.Run("a create audited without its response links from the request body", func(t *testing.T) {
		ev := event("a1", "create", "ci", deployRef(""), 201, withRequest(annotatedDeployment("", ann, userContext)))
		if got := contextLinks(onlySpan(t, must(convertOne(t, testConverter(), ev)))); len(got) != 1 {
			t.Fatalf("links = %v", got)
		}
	})
	t.Run("a changed context links each write to the context its body carries", func(t *testing.T) {
		c := testConverter()
		first := onlySpan(t, must(convertOne(t, c, event("a1", "create", "ci", deployRef(""), 201, withResponse(annotatedDeployment("1", ann, userContext))))))
		second := onlySpan(t, must(convertOne(t, c, event("a2", "update", "ci", deployRef("1"), 200, at(1), withResponse(annotatedDeployment("2", ann, changedContext))))))
		if a, b := contextLinks(first), contextLinks(second); len(a) != 1 || len(b) != 1 || a[0] == b[0] || b[0] != "0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331" {
			t.Fatalf("links = %v then %v", a, b)
		}
	})
	t.Run("the annotation keys are configurable and other keys are not read", func(t *testing.T) {
		c := testConverter(func(cfg *Settings) { cfg.TraceContextAnnotations = []string{"example.com/traceparent"} })
		own := onlySpan(t, must(convertOne(t, c, event("a1", "create", "ci", deployRef(""), 201, withResponse(annotatedDeployment("1", "example.com/traceparent", userContext))))))
		kep := onlySpan(t, must(convertOne(t, c, event("a2", "update", "ci", deployRef("1"), 200, withResponse(annotatedDeployment("2", ann, userContext))))))
		if len(contextLinks(own)) != 1 || len(contextLinks(kep)) != 0 {
			t.Fatalf("links = %v (configured key), %v (KEP key)", contextLinks(own), contextLinks(kep))
		}
	})
	t.Run("a write without the annotation has no link", func(t *testing.T) {
		ev := event("a1", "create", "ci", deployRef(""), 201, withResponse(deployment("1", 2, "nginx")))
		if s := onlySpan(t, must(convertOne(t, testConverter(), ev))); s.Links().Len() != 0 {
			t.Fatalf("links = %d", s.Links().Len())
		}
	})
	malformed := []struct{ name, value, reason string }{
		{"a truncated value", userContext[:40], model.TraceparentBadLength},
		{"a value with upper-case hex", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", model.TraceparentBadFormat},
		{"a value that is not a traceparent", "trace-me-please-with-some-extra-text-to-reach-length-55", model.TraceparentBadFormat},
		{"version ff", "ff" + userContext[2:], model.TraceparentBadVersion},
		{"an all-zero trace ID", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", model.TraceparentZeroID},
		{"version 00 with trailing data", userContext + "-x", model.TraceparentTrailing},
	}
	for _, m := range malformed {
		t.Run(m.name+" is ignored and counted as "+m.reason, func(t *testing.T) {
			ev := event("a1", "create", "ci", deployRef(""), 201, withResponse(annotatedDeployment("1", ann, m.value)))
			td, st := convertOne(t, testConverter(), ev)
			if s := onlySpan(t, td); s.Links().Len() != 0 {
				t.Fatalf("links = %d", s.Links().Len())
			}
			if st.badContexts[m.reason] != 1 || len(st.badContexts) != 1 {
				t.Fatalf("counted %v, want one %s", st.badContexts, m.reason)
			}
		})
	}
}

// kepDeployment is a Deployment body whose annotations are the given members (key, value, …),
// written in that order, duplicates included.
func kepDeployment(rv string, kv ...string) string {
	var members string
	for i := 0; i+1 < len(kv); i += 2 {
		members += fmt.Sprintf(",%q:%q", kv[i], kv[i+1])
	}
	return fmt.Sprintf(`{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"demo","namespace":"default","uid":"d-1","resourceVersion":%q,
	"annotations":{"deployment.kubernetes.io/revision":"1"%s}},"spec":{"replicas":2}}`, rv, members)
}

// contextOf is a traceparent of trace ID byte b and span ID byte b+1.
func contextOf(b byte) string {
	return fmt.Sprintf("00-%032x-%016x-01", b, b+1)
}

func TestKEP5915TraceContext(t *testing.T) {
	const kep, legacy, state = model.AnnotationTraceparent, model.AnnotationLegacyTraceContext, model.AnnotationTracestate
	links := func(t *testing.T, c *Converter, body string) (ptrace.Span, Stats) {
		t.Helper()
		td, st := convertOne(t, c, event("a1", "create", "ci", deployRef(""), 201, withResponse(body)))
		return onlySpan(t, td), st
	}
	t.Run("tracing.k8s.io/traceparent links, with tracing.k8s.io/tracestate as the link's trace state", func(t *testing.T) {
		s, st := links(t, testConverter(), kepDeployment("1", kep, userContext, state, "vendor=abc,other@tenant=x"))
		if got := contextLinks(s); len(got) != 1 || got[0] != "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7" || len(st.badContexts) != 0 {
			t.Fatalf("links = %v, counted %v", got, st.badContexts)
		}
		if ts := s.Links().At(0).TraceState().AsRaw(); ts != "vendor=abc,other@tenant=x" {
			t.Fatalf("link trace state %q", ts)
		}
	})
	t.Run("KEP-5915's key is linked first, the older one after it, a context both carry once", func(t *testing.T) {
		s, _ := links(t, testConverter(), kepDeployment("1", legacy, changedContext, kep, userContext))
		if got := contextLinks(s); len(got) != 2 || got[0] != "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7" || got[1] != "0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331" {
			t.Fatalf("links = %v, want the KEP key's first", got)
		}
		s, _ = links(t, testConverter(), kepDeployment("1", legacy, userContext, kep, userContext))
		if got := contextLinks(s); len(got) != 1 {
			t.Fatalf("the same context under both keys: links %v", got)
		}
	})
	t.Run("the indexed keys .0 to .7 are further links, in index order, each with its tracestate", func(t *testing.T) {
		s, st := links(t, testConverter(), kepDeployment("1", kep+".1", contextOf(3), kep+".0", contextOf(2), kep, contextOf(1), state+".1", "k=three",
			kep+".8", contextOf(9), kep+".x", contextOf(10), kep+".10", contextOf(11)))
		got := contextLinks(s)
		want := []string{contextOf(1)[3:52], contextOf(2)[3:52], contextOf(3)[3:52]}
		if len(got) != 3 || len(st.badContexts) != 0 {
			t.Fatalf("links = %v, counted %v; want %v", got, st.badContexts, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("links = %v, want %v", got, want)
			}
		}
		if s.Links().At(2).TraceState().AsRaw() != "k=three" || s.Links().At(0).TraceState().AsRaw() != "" {
			t.Fatalf("trace states %q, %q", s.Links().At(0).TraceState().AsRaw(), s.Links().At(2).TraceState().AsRaw())
		}
	})
	t.Run("a duplicate annotation key counts its last value, as the apiserver's map would", func(t *testing.T) {
		s, _ := links(t, testConverter(), kepDeployment("1", kep, changedContext, kep, userContext))
		if got := contextLinks(s); len(got) != 1 || got[0] != "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7" {
			t.Fatalf("links = %v", got)
		}
	})
	t.Run("a malformed tracestate is counted and its link made without it", func(t *testing.T) {
		s, st := links(t, testConverter(), kepDeployment("1", kep, userContext, state, "not a tracestate"))
		if got := contextLinks(s); len(got) != 1 || s.Links().At(0).TraceState().AsRaw() != "" || st.badContexts["tracestate"] != 1 {
			t.Fatalf("links = %v, trace state %q, counted %v", got, s.Links().At(0).TraceState().AsRaw(), st.badContexts)
		}
	})
	t.Run("a malformed KEP traceparent is counted and the older key's context still linked", func(t *testing.T) {
		s, st := links(t, testConverter(), kepDeployment("1", kep, "00-zz", legacy, userContext))
		if got := contextLinks(s); len(got) != 1 || st.badContexts[model.TraceparentBadLength] != 1 {
			t.Fatalf("links = %v, counted %v", got, st.badContexts)
		}
	})
	t.Run("at most 8 links: the rest are counted as too_many", func(t *testing.T) {
		var kv []string
		for i := range 9 {
			k := kep
			if i > 0 {
				k = fmt.Sprintf("%s.%d", kep, i-1)
			}
			kv = append(kv, k, contextOf(byte(1+2*i)))
		}
		kv = append(kv, legacy, contextOf(50))
		s, st := links(t, testConverter(), kepDeployment("1", kv...))
		if got := contextLinks(s); len(got) != 8 || got[0] != contextOf(1)[3:52] || st.badContexts["too_many"] != 2 {
			t.Fatalf("%d links %v, counted %v", len(got), got, st.badContexts)
		}
	})
	t.Run("the deprecated trace_context_annotation is read after trace_context_annotations", func(t *testing.T) {
		c := testConverter(func(cfg *Settings) { cfg.TraceContextAnnotation = "example.com/traceparent" })
		s, _ := links(t, c, kepDeployment("1", "example.com/traceparent", changedContext, kep, userContext))
		if got := contextLinks(s); len(got) != 2 || got[1] != "0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331" {
			t.Fatalf("links = %v", got)
		}
		// example.com/traceparent is named traceparent: its tracestate is example.com/tracestate.
		s, _ = links(t, c, kepDeployment("1", "example.com/traceparent", changedContext, "example.com/tracestate", "a=b"))
		if s.Links().At(0).TraceState().AsRaw() != "a=b" {
			t.Fatalf("trace state %q", s.Links().At(0).TraceState().AsRaw())
		}
	})
}

func TestTraceContextKeysAreValidated(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Settings)
		want string
	}{
		{"a key that is no annotation key", func(s *Settings) { s.TraceContextAnnotations = []string{"trace context"} }, "trace_context_annotations[0]"},
		{"more than 8 keys", func(s *Settings) {
			s.TraceContextAnnotations = []string{"a/1", "a/2", "a/3", "a/4", "a/5", "a/6", "a/7", "a/8", "a/9"}
		}, "trace_context_annotations: 9 keys, at most 8"},
		{"a deprecated key that is no annotation key", func(s *Settings) { s.TraceContextAnnotation = "a//b" }, "trace_context_annotation:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := DefaultSettings()
			tc.set(&s)
			if err := s.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
	s := DefaultSettings()
	s.TraceContextAnnotations = nil // reads no trace context
	if err := s.Validate(); err != nil {
		t.Fatalf("no keys: %v", err)
	}
}

func TestPodNodeName(t *testing.T) {
	podRef := objectReference{Resource: "pods", Namespace: "default", Name: "demo-abc", UID: "p-1", APIVersion: "v1"}
	pod := func(spec string) string {
		return `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"demo-abc","namespace":"default","uid":"p-1","resourceVersion":"5"},"spec":` + spec + `}`
	}
	t.Run("the scheduler's binding names the node", func(t *testing.T) {
		ref := podRef
		ref.Subresource = "binding"
		req := `{"kind":"Binding","apiVersion":"v1","metadata":{"name":"demo-abc","namespace":"default","uid":"p-1"},"target":{"kind":"Node","name":"kwok-node-0"}}`
		resp := `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","code":201}`
		s := onlySpan(t, must(convertOne(t, testConverter(), event("b1", "create", "system:kube-scheduler", ref, 201, withRequest(req), withResponse(resp)))))
		if got := attrStr(s.Attributes(), model.AttrNodeName); got != "kwok-node-0" {
			t.Fatalf("k8s.node.name = %q", got)
		}
	})
	t.Run("a refused binding names no node", func(t *testing.T) {
		ref := podRef
		ref.Subresource = "binding"
		req := `{"kind":"Binding","apiVersion":"v1","metadata":{"name":"demo-abc"},"target":{"kind":"Node","name":"kwok-node-0"}}`
		s := onlySpan(t, must(convertOne(t, testConverter(), event("b1", "create", "system:kube-scheduler", ref, 409, withRequest(req)))))
		if _, ok := s.Attributes().Get(model.AttrNodeName); ok {
			t.Fatalf("attributes = %v", s.Attributes().AsRaw())
		}
	})
	t.Run("a Pod body names its node in spec.nodeName", func(t *testing.T) {
		ref := podRef
		ref.Subresource = "status"
		s := onlySpan(t, must(convertOne(t, testConverter(), event("s1", "patch", "kwok", ref, 200,
			withRequest(`{"status":{"phase":"Running"}}`), withResponse(pod(`{"containers":[{"name":"c"}],"nodeName":"kwok-node-1"}`))))))
		if got := attrStr(s.Attributes(), model.AttrNodeName); got != "kwok-node-1" {
			t.Fatalf("k8s.node.name = %q", got)
		}
	})
	t.Run("an unscheduled Pod names no node", func(t *testing.T) {
		s := onlySpan(t, must(convertOne(t, testConverter(), event("c1", "create", "rs", podRef, 201, withResponse(pod(`{"containers":[{"name":"c"}]}`))))))
		if _, ok := s.Attributes().Get(model.AttrNodeName); ok {
			t.Fatalf("attributes = %v", s.Attributes().AsRaw())
		}
	})
	t.Run("another kind's spec.nodeName is not a node", func(t *testing.T) {
		body := `{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"demo","namespace":"default","uid":"d-1"},"spec":{"nodeName":"n"}}`
		s := onlySpan(t, must(convertOne(t, testConverter(), event("d1", "create", "ci", deployRef(""), 201, withResponse(body)))))
		if _, ok := s.Attributes().Get(model.AttrNodeName); ok {
			t.Fatalf("attributes = %v", s.Attributes().AsRaw())
		}
	})
}
