// Package door tells kubetrail's processor which spans came through one of kubetrail's own
// doors (docs/design.md, Doors). The k8s_audit receiver and connector and the k8s_event_spans
// receiver hand their spans on with a context marked by Trusted; k8s_object_link lets only
// spans of a marked context (or of a trusted hop between kubetrail collectors) write the trail.
//
// The mark is a context value of an unexported type: only code in this module's process can set
// it, and no byte an OTLP sender controls (a header, an attribute, a trace state) reaches it. It
// travels as far as the context does: through processors that pass their context on
// (memory_limiter, filter, transform), not through one that re-batches spans under a context of
// its own (batch), after which spans are untrusted, the safe side.
package door

import "context"

type trustedKey struct{}

// Trusted returns ctx marked as carrying spans kubetrail's own receivers or connector made.
func Trusted(ctx context.Context) context.Context {
	return context.WithValue(ctx, trustedKey{}, true)
}

// IsTrusted reports whether ctx was marked by Trusted.
func IsTrusted(ctx context.Context) bool {
	v, _ := ctx.Value(trustedKey{}).(bool)
	return v
}
