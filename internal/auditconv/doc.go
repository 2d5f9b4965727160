// Package auditconv is kubetrail's one audit conversion: it decodes apiserver audit events
// (audit.k8s.io/v1 Event and EventList JSON) and turns them into audit spans, with identity,
// filtering, field diffs against a bounded cache of recent bodies, snapshots, redaction,
// admission annotations and trace-context links (docs/design.md, Spans).
//
// Every door audit events come in by is a thin adapter over this package: the k8s_audit
// receiver's webhook and file tailers, and the k8s_audit connector's log records. Each decodes
// its envelope, hands the events to one Converter and reports its Stats through its own
// telemetry, so the same audit event gives the same span whichever way it came.
package auditconv
