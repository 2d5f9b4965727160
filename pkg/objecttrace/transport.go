package objecttrace

import (
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// WrapTransport returns a round tripper that sends, with each request whose context holds a
// valid span context, that context in the W3C traceparent and tracestate headers, whatever the
// global propagator is; a nil rt is http.DefaultTransport. The kubetrail trace-state member
// travels in tracestate, so the apiserver's spans of the controller's requests inherit it and
// land in the object's trace. Its signature is client-go's transport.WrapperFunc:
//
//	cfg.Wrap(objecttrace.WrapTransport) // cfg is a *rest.Config
//
// It starts no span of its own.
func WrapTransport(rt http.RoundTripper) http.RoundTripper {
	if rt == nil {
		rt = http.DefaultTransport
	}
	return &transport{next: rt}
}

type transport struct {
	next http.RoundTripper
}

// RoundTrip adds the headers to a copy of req: a round tripper must not change its request.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return t.next.RoundTrip(req)
	}
	out := req.Clone(ctx)
	if out.Header == nil {
		out.Header = make(http.Header)
	}
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(out.Header))
	return t.next.RoundTrip(out)
}

// WrappedRoundTripper returns the round tripper t wraps, as apimachinery's
// net.RoundTripperWrapper asks, so that client-go finds the TLS settings and dialer beneath.
func (t *transport) WrappedRoundTripper() http.RoundTripper { return t.next }
