package model

import (
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// TracesBuilder assembles spans into ptrace.Traces with one ResourceSpans per object: the
// Resource carries the object's identity (Object.PutResource), where trace-to-logs and
// trace-to-metrics links look for it, and service.name is the object's kind
// (docs/span-model.md), so backends list "Pod", "Deployment", … as services. Resource and
// scope carry the span model's schema URL.
type TracesBuilder struct {
	scopeName    string
	scopeVersion string
	td           ptrace.Traces
	index        map[Object]ptrace.SpanSlice
}

// NewTracesBuilder starts an empty batch whose spans carry the given instrumentation scope.
func NewTracesBuilder(scopeName, scopeVersion string) *TracesBuilder {
	return &TracesBuilder{
		scopeName:    scopeName,
		scopeVersion: scopeVersion,
		td:           ptrace.NewTraces(),
		index:        make(map[Object]ptrace.SpanSlice),
	}
}

// AppendSpan adds an empty span to the resource of obj's identity and returns it. The owner is
// not part of the identity: it is what one write or one body said, and goes on the span
// (Object.PutOwner).
func (b *TracesBuilder) AppendSpan(obj Object) ptrace.Span {
	id := obj.Identity()
	spans, ok := b.index[id]
	if !ok {
		rs := b.td.ResourceSpans().AppendEmpty()
		rs.SetSchemaUrl(SchemaURL)
		id.PutResource(rs.Resource().Attributes())
		ss := rs.ScopeSpans().AppendEmpty()
		ss.SetSchemaUrl(SchemaURL)
		ss.Scope().SetName(b.scopeName)
		ss.Scope().SetVersion(b.scopeVersion)
		spans = ss.Spans()
		b.index[id] = spans
	}
	return spans.AppendEmpty()
}

// SpanCount is the number of spans appended so far.
func (b *TracesBuilder) SpanCount() int { return b.td.SpanCount() }

// Traces returns the batch built so far. The builder must not be used afterwards.
func (b *TracesBuilder) Traces() ptrace.Traces { return b.td }
