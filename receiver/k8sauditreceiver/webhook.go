package k8sauditreceiver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"

	"go.opentelemetry.io/collector/config/confighttp"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.uber.org/zap"

	"github.com/kubetrail/kubetrail/internal/auditconv"
)

// retryAfterSeconds is what a refused batch asks its sender to wait. The apiserver's audit
// webhook backend retries every failure on its own backoff (5 attempts from
// --audit-webhook-initial-backoff); other senders learn from Retry-After that the refusal is
// temporary. One second lets a memory limiter recover.
const retryAfterSeconds = 1

// webhook serves the audit webhook: POST /audit and POST /audit/{cluster}.
type webhook struct {
	r        *auditReceiver
	maxBody  int64
	inFlight *byteBudget
}

// byteBudget bounds the bytes held by requests in flight.
type byteBudget struct {
	mu   sync.Mutex
	used int64
	max  int64
}

func newByteBudget(maxBytes int64) *byteBudget { return &byteBudget{max: maxBytes} }

// acquire reserves n bytes, or reports false when that would pass the bound.
func (b *byteBudget) acquire(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.max {
		return false
	}
	b.used += n
	return true
}

func (b *byteBudget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}

func (b *byteBudget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// maxPooledBuffer is the largest body buffer kept for reuse: the pool serves the common
// batch sizes, a rare large body is left to the garbage collector instead of pinning its size.
const maxPooledBuffer = 4 << 20

var bodyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func getBodyBuffer(size int64) *bytes.Buffer {
	buf := bodyBuffers.Get().(*bytes.Buffer)
	buf.Reset()
	// ReadFrom wants MinRead bytes free before it reads the end of the body.
	buf.Grow(int(size) + bytes.MinRead)
	return buf
}

func putBodyBuffer(buf *bytes.Buffer) {
	if buf.Cap() <= maxPooledBuffer {
		bodyBuffers.Put(buf)
	}
}

func (w *webhook) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/audit", w.serveAudit)
	mux.HandleFunc("/audit/{cluster}", w.serveAudit)
	mux.HandleFunc("/", func(rw http.ResponseWriter, req *http.Request) {
		w.reject(req.Context(), rw, http.StatusNotFound, reasonNotFound, "", "no such path: POST audit events to /audit or /audit/{cluster}")
	})
	return mux
}

func (w *webhook) serveAudit(rw http.ResponseWriter, req *http.Request) {
	ctx := req.Context()
	if req.Method != http.MethodPost {
		rw.Header().Set("Allow", http.MethodPost)
		w.reject(ctx, rw, http.StatusMethodNotAllowed, reasonMethod, "MethodNotAllowed", "only POST is accepted")
		return
	}
	cluster := req.PathValue("cluster")
	switch {
	case cluster == "" && w.r.cfg.Cluster == "":
		w.reject(ctx, rw, http.StatusNotFound, reasonNoCluster, "NotFound",
			"no cluster: POST to /audit/{cluster}, or set cluster in the receiver's configuration")
		return
	case cluster == "":
		cluster = w.r.cfg.Cluster
	case !validClusterName(cluster):
		w.reject(ctx, rw, http.StatusNotFound, reasonNotFound, "NotFound",
			fmt.Sprintf("%q is not a valid cluster name", cluster))
		return
	}

	limit := w.maxBody
	if limit <= 0 {
		limit = defaultMaxRequestBodySize
	}
	// The body is reserved against max_in_flight_bytes before a byte of it is read: its
	// declared length, or the largest allowed body when it declares none (chunked, compressed).
	reserve := limit
	if req.ContentLength >= 0 && req.ContentLength < limit && req.Header.Get("Content-Encoding") == "" {
		reserve = req.ContentLength
	}
	if !w.inFlight.acquire(reserve) {
		rw.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds))
		w.reject(ctx, rw, http.StatusTooManyRequests, reasonInFlightBytes, "TooManyRequests",
			fmt.Sprintf("%d body bytes are being processed already (max_in_flight_bytes %d), retry", w.inFlight.inUse(), w.inFlight.max))
		return
	}
	w.r.telemetry.K8sAuditInFlightBytes.Add(ctx, reserve)
	defer func() {
		w.inFlight.release(reserve)
		w.r.telemetry.K8sAuditInFlightBytes.Add(ctx, -reserve)
	}()

	hint := int64(64 << 10)
	if req.ContentLength > 0 && req.ContentLength <= limit {
		hint = req.ContentLength
	}
	buf := getBodyBuffer(hint)
	defer putBodyBuffer(buf)
	_, err := buf.ReadFrom(http.MaxBytesReader(rw, req.Body, limit))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			w.reject(ctx, rw, http.StatusRequestEntityTooLarge, reasonTooLarge, "RequestEntityTooLarge",
				fmt.Sprintf("body larger than max_request_body_size (%d bytes)", limit))
			return
		}
		w.reject(ctx, rw, http.StatusBadRequest, reasonReadError, "BadRequest", "reading the body: "+err.Error())
		return
	}
	// The events refer to the buffer's bytes until they are converted: it goes back to the
	// pool only when this handler returns.
	data := buf.Bytes()
	pooled := auditconv.GetEvents()
	events, err := w.r.conv.DecodeBody(data, *pooled)
	defer auditconv.PutEvents(pooled, events)
	if err != nil {
		reason := reasonMalformedJSON
		if auditconv.IsWrongKind(err) {
			reason = reasonWrongKind
		}
		w.reject(ctx, rw, http.StatusBadRequest, reason, "BadRequest", err.Error())
		return
	}

	n, err := w.r.consume(ctx, w.r.obsHTTP, inputWebhook, cluster, events)
	if err != nil {
		if consumererror.IsPermanent(err) {
			w.reject(ctx, rw, http.StatusInternalServerError, reasonPipelineFailure, "InternalError",
				"the pipeline refused the batch permanently: "+err.Error())
			return
		}
		code := http.StatusServiceUnavailable
		if consumererror.ToHTTPStatus(err) == http.StatusTooManyRequests {
			code = http.StatusTooManyRequests
		}
		rw.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds))
		w.reject(ctx, rw, code, reasonPipelineBusy, "ServiceUnavailable", "the pipeline refused the batch, retry: "+err.Error())
		return
	}
	w.r.set.Logger.Debug("Audit batch accepted", zap.String("cluster", cluster),
		zap.Int("events", len(events)), zap.Int("spans", n))
	rw.WriteHeader(http.StatusOK)
}

// reject answers with a metav1.Status body, which the apiserver's webhook client logs as is.
func (w *webhook) reject(ctx context.Context, rw http.ResponseWriter, code int, reason, statusReason, msg string) {
	w.r.telemetry.K8sAuditRejectedRequests.Add(ctx, 1, auditconv.WithReason(reason))
	w.r.set.Logger.Debug("Audit webhook request rejected", zap.Int("code", code), zap.String("reason", reason), zap.String("message", msg))
	st := map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": msg, "code": code}
	if statusReason != "" {
		st["reason"] = statusReason
	}
	if v := rw.Header().Get("Retry-After"); v != "" {
		st["details"] = map[string]any{"retryAfterSeconds": retryAfterSeconds}
	}
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(code)
	_ = json.NewEncoder(rw).Encode(st)
}

// confighttpErrorHandler counts and answers the errors confighttp raises before our handler
// runs (unsupported or corrupt Content-Encoding).
func confighttpErrorHandler(w *webhook) confighttp.ToServerOption {
	return confighttp.WithErrorHandler(func(rw http.ResponseWriter, req *http.Request, msg string, code int) {
		reason := reasonBadEncoding
		if code == http.StatusRequestEntityTooLarge {
			reason = reasonTooLarge
		}
		w.reject(req.Context(), rw, code, reason, "", msg)
	})
}
