package model

import (
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// TracesBuilder assembles spans into ptrace.Traces with one ResourceSpans per (cluster, kind):
// service.name is the object's kind (docs/design.md, Object identity), so backends list "Pod", "Deployment", … as
// services.
type TracesBuilder struct {
	scopeName    string
	scopeVersion string
	td           ptrace.Traces
	index        map[[2]string]ptrace.SpanSlice
}

// NewTracesBuilder starts an empty batch whose spans carry the given instrumentation scope.
func NewTracesBuilder(scopeName, scopeVersion string) *TracesBuilder {
	return &TracesBuilder{
		scopeName:    scopeName,
		scopeVersion: scopeVersion,
		td:           ptrace.NewTraces(),
		index:        make(map[[2]string]ptrace.SpanSlice),
	}
}

// AppendSpan adds an empty span to the resource of (cluster, kind) and returns it.
func (b *TracesBuilder) AppendSpan(cluster, kind string) ptrace.Span {
	k := [2]string{cluster, kind}
	spans, ok := b.index[k]
	if !ok {
		rs := b.td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr(AttrClusterName, cluster)
		rs.Resource().Attributes().PutStr(AttrServiceName, kind)
		ss := rs.ScopeSpans().AppendEmpty()
		ss.Scope().SetName(b.scopeName)
		ss.Scope().SetVersion(b.scopeVersion)
		spans = ss.Spans()
		b.index[k] = spans
	}
	return spans.AppendEmpty()
}

// SpanCount is the number of spans appended so far.
func (b *TracesBuilder) SpanCount() int { return b.td.SpanCount() }

// Traces returns the batch built so far. The builder must not be used afterwards.
func (b *TracesBuilder) Traces() ptrace.Traces { return b.td }
