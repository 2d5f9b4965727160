package auditconv

import (
	"fmt"
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
	const ann = model.DefaultTraceContextAnnotation
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
	t.Run("the annotation key is configurable and other keys are not read", func(t *testing.T) {
		c := testConverter(func(cfg *Settings) { cfg.TraceContextAnnotation = "example.com/traceparent" })
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
