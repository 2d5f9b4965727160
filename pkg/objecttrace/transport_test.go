package objecttrace

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kubetrail/kubetrail/internal/objid"
)

// roundTripFunc records the requests it is given.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestTheTransportSendsTraceparentAndTracestate(t *testing.T) {
	tp, _ := recorded(t)
	ctx, span := New(WithTracerProvider(tp), WithCluster("c")).StartSpanFromObject(context.Background(), deployment(), deployGVK, "reconcile")
	defer span.End()

	var sent *http.Request
	rt := WrapTransport(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent = r
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
	}))
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "https://apiserver/api/v1/namespaces/shop/configmaps", nil)
	req.Header.Set("Accept", "application/json")
	if _, err := rt.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	sc := span.SpanContext()
	if got, want := sent.Header.Get("traceparent"), "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-01"; got != want {
		t.Errorf("traceparent %q, want %q", got, want)
	}
	if member, ok := objid.FindTraceState(sent.Header.Get("tracestate")); !ok || member != sc.TraceState().Get(objid.TraceStateKey) {
		t.Errorf("tracestate %q", sent.Header.Get("tracestate"))
	}
	if sent.Header.Get("Accept") != "application/json" {
		t.Error("the request's own header was lost")
	}
	if req.Header.Get("traceparent") != "" || len(req.Header) != 1 {
		t.Errorf("the caller's request was changed: %v", req.Header)
	}
}

func TestTheTransportLeavesRequestsWithoutASpanAlone(t *testing.T) {
	var sent *http.Request
	rt := WrapTransport(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent = r
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
	}))
	req := httptest.NewRequest(http.MethodGet, "https://apiserver/version", nil)
	if _, err := rt.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	if sent != req {
		t.Error("the request was copied without need")
	}
	if sent.Header.Get("traceparent") != "" {
		t.Error("a traceparent without a span")
	}
}

func TestTheTransportOverARealServer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(r.Header.Get("traceparent")))
	}))
	defer srv.Close()
	tp, _ := recorded(t)
	ctx, span := New(WithTracerProvider(tp)).StartSpanFromObject(context.Background(), deployment(), deployGVK, "reconcile")
	defer span.End()

	client := &http.Client{Transport: WrapTransport(nil)}
	defer client.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	req.Header = nil
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || !strings.Contains(string(body), span.SpanContext().SpanID().String()) {
		t.Errorf("the server saw traceparent %q (%v)", body, err)
	}
	if w, ok := WrapTransport(nil).(interface{ WrappedRoundTripper() http.RoundTripper }); !ok || w.WrappedRoundTripper() != http.DefaultTransport {
		t.Error("the wrapped round tripper is not exposed")
	}
}
