// Package auditconv is kubetrail's one audit conversion: it decodes apiserver audit events
// (audit.k8s.io/v1 Event and EventList JSON) and turns them into audit spans, with identity,
// filtering, field diffs against a bounded cache of recent bodies, snapshots, redaction,
// admission annotations and trace-context links (docs/design.md, Spans).
//
// Every door audit events come in by is a thin adapter over this package: the k8s_audit
// receiver's webhook and file tailers, and the k8s_audit connector's log records. Each decodes
// its envelope, hands the events to one Converter and reports its Stats through its own
// telemetry, so the same audit event gives the same span whichever way it came.
//
// Its files refer only to files listed before them here, but for the Converter's own methods
// (convert.go, shareddiffbase.go, api.go), so that a body can be followed from its bytes to its span:
//
//   - JSON: internal/jsonscan (the scanner and trees, knowing nothing of Kubernetes), symbols.go
//     (recurring strings), budget.go (what decoding a body may hold), flat.go (a body indexed in
//     place) and flatwork.go (sorting and encoding an index);
//   - what a body says of its object: objectmeta.go (identity, owner, rollout, trace context);
//   - decode: event.go (the Event), envelope.go (the Event or EventList document), rawscan.go
//     (the edge's split of a body into raw events), filter.go (which events become spans, asked
//     before a body is read) and decode.go (a body into Events, in one pass);
//   - convert: settings.go, redact.go, bounds.go, diff.go (the changes between two bodies),
//     cache.go (the bodies last seen), spans.go and annotations.go (span attributes and events),
//     shareddiffbase.go (the diff base shared through Redis), convert.go (an Event into a span)
//     and api.go (what the doors call).
package auditconv
