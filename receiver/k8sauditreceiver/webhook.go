package k8sauditreceiver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"go.opentelemetry.io/collector/config/confighttp"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.uber.org/zap"

	"github.com/kubetrail/kubetrail/receiver/k8sauditreceiver/internal/metadata"
)

// retryAfterSeconds is what a refused batch asks its sender to wait. The apiserver's audit
// webhook backend retries every failure on its own backoff (5 attempts from
// --audit-webhook-initial-backoff); other senders learn from Retry-After that the refusal is
// temporary. One second lets a memory limiter recover.
const retryAfterSeconds = 1

// webhook serves the audit webhook: POST /audit and POST /audit/{cluster}.
type webhook struct {
	r       *auditReceiver
	maxBody int64
}

func (w *webhook) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/audit", w.serveAudit)
	mux.HandleFunc("/audit/{cluster}", w.serveAudit)
	mux.HandleFunc("/", func(rw http.ResponseWriter, req *http.Request) {
		w.reject(req.Context(), rw, http.StatusNotFound, metadata.ReasonNotFound, "", "no such path: POST audit events to /audit or /audit/{cluster}")
	})
	return mux
}

func (w *webhook) serveAudit(rw http.ResponseWriter, req *http.Request) {
	ctx := req.Context()
	if req.Method != http.MethodPost {
		rw.Header().Set("Allow", http.MethodPost)
		w.reject(ctx, rw, http.StatusMethodNotAllowed, metadata.ReasonMethod, "MethodNotAllowed", "only POST is accepted")
		return
	}
	cluster := req.PathValue("cluster")
	switch {
	case cluster == "" && w.r.cfg.Cluster == "":
		w.reject(ctx, rw, http.StatusNotFound, metadata.ReasonNoCluster, "NotFound",
			"no cluster: POST to /audit/{cluster}, or set cluster in the receiver's configuration")
		return
	case cluster == "":
		cluster = w.r.cfg.Cluster
	case !validClusterName(cluster):
		w.reject(ctx, rw, http.StatusNotFound, metadata.ReasonNotFound, "NotFound",
			fmt.Sprintf("%q is not a valid cluster name", cluster))
		return
	}

	limit := w.maxBody
	if limit <= 0 {
		limit = 20 << 20
	}
	data, err := io.ReadAll(http.MaxBytesReader(rw, req.Body, limit))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			w.reject(ctx, rw, http.StatusRequestEntityTooLarge, metadata.ReasonTooLarge, "RequestEntityTooLarge",
				fmt.Sprintf("body larger than max_request_body_size (%d bytes)", limit))
			return
		}
		w.reject(ctx, rw, http.StatusBadRequest, metadata.ReasonReadError, "BadRequest", "reading the body: "+err.Error())
		return
	}
	events, err := decodeBody(data)
	if err != nil {
		reason := metadata.ReasonMalformedJSON
		if errors.Is(err, errWrongKind) {
			reason = metadata.ReasonWrongKind
		}
		w.reject(ctx, rw, http.StatusBadRequest, reason, "BadRequest", err.Error())
		return
	}

	n, err := w.r.consume(ctx, w.r.obsHTTP, cluster, events)
	if err != nil {
		if consumererror.IsPermanent(err) {
			w.reject(ctx, rw, http.StatusInternalServerError, metadata.ReasonPipelineFailure, "InternalError",
				"the pipeline refused the batch permanently: "+err.Error())
			return
		}
		code := http.StatusServiceUnavailable
		if consumererror.ToHTTPStatus(err) == http.StatusTooManyRequests {
			code = http.StatusTooManyRequests
		}
		rw.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds))
		w.reject(ctx, rw, code, metadata.ReasonPipelineBusy, "ServiceUnavailable", "the pipeline refused the batch, retry: "+err.Error())
		return
	}
	w.r.set.Logger.Debug("Audit batch accepted", zap.String("cluster", cluster),
		zap.Int("events", len(events)), zap.Int("spans", n))
	rw.WriteHeader(http.StatusOK)
}

// reject answers with a metav1.Status body, which the apiserver's webhook client logs as is.
func (w *webhook) reject(ctx context.Context, rw http.ResponseWriter, code int, reason, statusReason, msg string) {
	w.r.telemetry.RejectedRequests.Add(ctx, 1, metadata.Reason(reason))
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
		reason := metadata.ReasonBadEncoding
		if code == http.StatusRequestEntityTooLarge {
			reason = metadata.ReasonTooLarge
		}
		w.reject(req.Context(), rw, code, reason, "", msg)
	})
}
