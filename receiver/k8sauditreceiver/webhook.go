package k8sauditreceiver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"go.opentelemetry.io/collector/config/confighttp"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.uber.org/zap"

	"github.com/kubetrail/kubetrail/internal/auditconv"
	"github.com/kubetrail/kubetrail/internal/bytebudget"
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
	// inFlight is max_in_flight_bytes: what requests hold at once, their decoders, bodies as
	// they arrive and an estimate of their decoded events (see reservation); the budget type
	// every door shares.
	inFlight *bytebudget.Budget
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

// batch is one request's EventList as the outputs take it: its cluster, its body's bytes and
// the request's share of max_in_flight_bytes.
type batch struct {
	cluster   string
	data      []byte
	res       *reservation
	maxEvents int
	buf       *[]byte // the pooled buffer data is in
	ownsRes   bool    // res was made here (not by chargesDecoders), and is released with the batch
}

// release gives back what the batch holds, once the outputs are through with it: its buffer, and
// its reservation when it made it.
func (b *batch) release() {
	if b.buf != nil {
		putBodyBuffer(b.buf)
		b.buf = nil
	}
	if b.ownsRes {
		b.res.release()
	}
}

// serveAudit takes a request's body (intake) and hands it to each output the receiver has: the
// edge output first (the events as received, see serveEdge), then the traces output (spans, see
// serveTraces). Each output answers the request itself when it refuses it; 200 means every
// output took the batch.
func (w *webhook) serveAudit(rw http.ResponseWriter, req *http.Request) {
	ctx := req.Context()
	b, ok := w.intake(rw, req)
	if !ok {
		return
	}
	defer b.release()
	if w.r.edge != nil && !w.serveEdge(ctx, rw, b) {
		return
	}
	if w.r.next != nil && !w.serveTraces(ctx, rw, b) {
		return
	}
	rw.WriteHeader(http.StatusOK)
}

// intake checks a request's method and cluster and reads its body within max_request_body_size
// and max_in_flight_bytes. It answers a request it refuses (then ok is false, and nothing is
// held); the caller releases an accepted batch once the outputs are through with it.
func (w *webhook) intake(rw http.ResponseWriter, req *http.Request) (b batch, ok bool) {
	ctx := req.Context()
	if req.Method != http.MethodPost {
		rw.Header().Set("Allow", http.MethodPost)
		w.reject(ctx, rw, http.StatusMethodNotAllowed, reasonMethod, "MethodNotAllowed", "only POST is accepted")
		return b, false
	}
	cluster := req.PathValue("cluster")
	switch {
	case cluster == "" && w.r.cfg.Cluster == "":
		w.reject(ctx, rw, http.StatusNotFound, reasonNoCluster, "NotFound",
			"no cluster: POST to /audit/{cluster}, or set cluster in the receiver's configuration")
		return b, false
	case cluster == "":
		cluster = w.r.cfg.Cluster
	case !validClusterName(cluster):
		w.reject(ctx, rw, http.StatusNotFound, reasonNotFound, "NotFound",
			fmt.Sprintf("%q is not a valid cluster name", cluster))
		return b, false
	}

	limit := w.maxBody
	if limit <= 0 {
		limit = defaultMaxRequestBodySize
	}
	tooLarge := func() {
		w.reject(ctx, rw, http.StatusRequestEntityTooLarge, reasonTooLarge, "RequestEntityTooLarge",
			fmt.Sprintf("body larger than max_request_body_size (%d bytes)", limit))
	}
	// A body declared longer than the limit is refused unread (a compressed one is measured
	// after decompression, as it is read).
	declared := req.ContentLength
	if req.Header.Get("Content-Encoding") != "" {
		declared = -1
	}
	if declared > limit {
		rw.Header().Set("Connection", "close")
		tooLarge()
		return b, false
	}
	// What the request holds of max_in_flight_bytes: its decoder (chargesDecoders made the
	// reservation then), its body as it arrives, not its declared length (a sender that
	// declares 20 MiB and sends a byte a second holds 64 KiB), then an estimate of its decoded
	// events, until the handler returns.
	res, fromDecoders := req.Context().Value(reservationKey{}).(*reservation)
	if !fromDecoders {
		res = &reservation{w: w, ctx: ctx}
	}
	b = batch{cluster: cluster, res: res, ownsRes: !fromDecoders}

	body := http.MaxBytesReader(rw, req.Body, limit)
	var err error
	b.buf, err = readBody(body, declared, limit, res)
	if errors.Is(err, errBodyOverBudget) {
		// The rest of the body is read and dropped (no memory held, max_request_body_size
		// bytes at most, within read_timeout), so that the answer says what the body is: over
		// the limit, a 413 the sender must not retry (a gzip bomb under a flood of them), else
		// a 429. Answered mid-body, the connection would be closed with bytes unread and reset
		// under the client's write, the answer lost. What was read goes back first, and so
		// does its share of the budget: a request draining its body holds nothing but its
		// decoder.
		putBodyBuffer(b.buf)
		b.buf = nil
		res.shrink()
		_, err = io.Copy(io.Discard, body)
		if err == nil {
			w.busy(ctx, rw, "no room for the body")
			b.release()
			return b, false
		}
	}
	if err != nil {
		// Answered first, released after, as a handler's deferred release would.
		switch _, over := errors.AsType[*http.MaxBytesError](err); {
		case over:
			tooLarge()
		case bodyCutForRate(ctx):
			rw.Header().Set("Connection", "close")
			w.reject(ctx, rw, http.StatusRequestTimeout, reasonTooSlow, "Timeout",
				fmt.Sprintf("the body arrived slower than min_body_rate (%d bytes a second)", w.r.cfg.MinBodyRate))
		default:
			w.reject(ctx, rw, http.StatusBadRequest, reasonReadError, "BadRequest", "reading the body: "+err.Error())
		}
		b.release()
		return b, false
	}
	b.maxEvents = w.r.cfg.MaxEventsPerRequest
	if b.maxEvents <= 0 {
		b.maxEvents = defaultMaxEventsPerRequest
	}
	// The events refer to the buffer's bytes until they are converted: it goes back to the
	// pool only when the outputs are done (release).
	b.data = *b.buf
	return b, true
}

// serveTraces decodes the batch's events and hands them to the traces output, converted to
// spans. It answers the request itself when it refuses the batch or the pipeline refuses the
// spans (then false); true means the spans were taken and nothing was written yet.
func (w *webhook) serveTraces(ctx context.Context, rw http.ResponseWriter, b batch) bool {
	var alone bool // the decoded events would pass the budget on their own
	pooled := auditconv.GetEvents()
	events, err := w.r.conv.DecodeBodyLimited(b.data, *pooled, auditconv.DecodeLimits{
		MaxItems: b.maxEvents,
		Charge: func(n int64) bool {
			alone = b.res.alone(n)
			return b.res.grow(n)
		},
	})
	defer auditconv.PutEvents(pooled, events)
	if err != nil {
		if errors.Is(err, auditconv.ErrOverBudget) {
			if alone && errors.Is(err, auditconv.ErrValuesOverBudget) {
				w.reject(ctx, rw, http.StatusRequestEntityTooLarge, reasonTooManyValues, "RequestEntityTooLarge",
					fmt.Sprintf("indexed, the values of its object bodies would hold more than max_in_flight_bytes (%d bytes, %d per value)",
						w.inFlight.Max(), auditconv.ValueBytes))
				return false
			}
			w.overBudget(ctx, rw, alone, "decoded, the body", "the decoded events")
			return false
		}
		w.unreadable(ctx, rw, err, b.maxEvents)
		return false
	}
	n, err := w.r.consume(ctx, w.r.obsHTTP, inputWebhook, b.cluster, events)
	if err != nil {
		w.refused(ctx, rw, err)
		return false
	}
	w.r.set.Logger.Debug("Audit batch accepted", zap.String("cluster", b.cluster),
		zap.Int("events", len(events)), zap.Int("spans", n))
	return true
}

// edgeRecordBytes is what a log record of the edge output holds besides its body (record,
// resource and attribute headers), charged to max_in_flight_bytes.
const edgeRecordBytes = 256

// serveEdge hands the batch's events, as received (split by the scanner, not decoded), to the
// edge output. It answers the request itself when it refuses the batch or the pipeline refuses
// the records (then false); true means the records were taken and nothing was written yet.
func (w *webhook) serveEdge(ctx context.Context, rw http.ResponseWriter, b batch) bool {
	pooled := edgeEventsPool.Get().(*[]auditconv.RawEvent)
	defer func() {
		clear(*pooled)
		edgeEventsPool.Put(pooled)
	}()
	raws, err := auditconv.ScanEventList(b.data, b.maxEvents, *pooled)
	if err != nil {
		w.unreadable(ctx, rw, err, b.maxEvents)
		return false
	}
	*pooled = raws
	// The records share one copy of the body: its bytes, and a record's overhead each, are
	// charged.
	charge := int64(len(b.data)) + int64(len(raws))*edgeRecordBytes
	if alone := b.res.alone(charge); !b.res.grow(charge) {
		w.overBudget(ctx, rw, alone, "as log records, the body", "the log records")
		return false
	}
	shareCopy(b.data, raws)
	n, err := w.r.consumeEdge(ctx, w.r.obsHTTP, b.cluster, raws)
	if err != nil {
		w.refused(ctx, rw, err)
		return false
	}
	w.r.set.Logger.Debug("Audit batch forwarded", zap.String("cluster", b.cluster), zap.Int("records", n))
	return true
}

// shareCopy points each event's Raw, a slice of data, at the same bytes of one copy of data,
// made here, that nothing writes to: the records may outlive the request (an exporter's queue),
// and data's pooled buffer goes back to the pool when the request ends. One copy of the exact
// size for the whole body, where a copy per record, and another per record in the kafka
// exporter (edgeLogs), were made before.
func shareCopy(data []byte, raws []auditconv.RawEvent) {
	text := string(data)
	own := auditconv.BytesView(text)
	for i := range raws {
		off := cap(data) - cap(raws[i].Raw) // Raw is data[off:end]
		raws[i].Raw = own[off : off+len(raws[i].Raw) : off+len(raws[i].Raw)]
	}
}

// edgeEventsPool keeps the scanned events of a request for the next one.
var edgeEventsPool = sync.Pool{New: func() any { return new([]auditconv.RawEvent) }}

// The refusal path, shared by both outputs: every answer but 200 is a metav1.Status written by
// reject and counted by reason.

// unreadable answers a body whose events could not be taken out of it: more than
// max_events_per_request (413), not an EventList (400, wrong_kind) or not JSON (400).
func (w *webhook) unreadable(ctx context.Context, rw http.ResponseWriter, err error, maxEvents int) {
	if _, ok := errors.AsType[*auditconv.TooManyItemsError](err); ok {
		w.reject(ctx, rw, http.StatusRequestEntityTooLarge, reasonTooManyEvents, "RequestEntityTooLarge",
			fmt.Sprintf("the EventList has more than %d events (max_events_per_request): split the batch (--audit-webhook-batch-max-size)", maxEvents))
		return
	}
	reason := reasonMalformedJSON
	if auditconv.IsWrongKind(err) {
		reason = reasonWrongKind
	}
	w.reject(ctx, rw, http.StatusBadRequest, reason, "BadRequest", err.Error())
}

// overBudget answers a batch whose next form (what) would pass max_in_flight_bytes: 413 when it
// would on its own (alone; as form, the batch can never fit), else 429 (busy).
func (w *webhook) overBudget(ctx context.Context, rw http.ResponseWriter, alone bool, as, what string) {
	if alone {
		w.reject(ctx, rw, http.StatusRequestEntityTooLarge, reasonTooLarge, "RequestEntityTooLarge",
			fmt.Sprintf("%s would hold more than max_in_flight_bytes (%d bytes)", as, w.inFlight.Max()))
		return
	}
	w.busy(ctx, rw, "no room for "+what)
}

// refused answers a batch the pipeline refused: 500 for a permanent refusal (the same batch
// would be refused again), else 503 (or 429 when the pipeline said so) with Retry-After.
func (w *webhook) refused(ctx context.Context, rw http.ResponseWriter, err error) {
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
}

// busy answers 429 with Retry-After: the request would pass max_in_flight_bytes.
func (w *webhook) busy(ctx context.Context, rw http.ResponseWriter, what string) {
	rw.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds))
	w.reject(ctx, rw, http.StatusTooManyRequests, reasonInFlightBytes, "TooManyRequests",
		fmt.Sprintf("%s: %d bytes of bodies, decoders and decoded events are held already (max_in_flight_bytes %d), retry",
			what, w.inFlight.InUse(), w.inFlight.Max()))
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
// runs (unsupported or corrupt Content-Encoding). A snappy body (block format) that declares a
// decoded length over max_request_body_size is refused by confighttp with a 400 before it is
// decoded; it is a 413, as a body of any other encoding that inflates past the limit.
func confighttpErrorHandler(w *webhook) confighttp.ToServerOption {
	return confighttp.WithErrorHandler(func(rw http.ResponseWriter, req *http.Request, msg string, code int) {
		if bodyCutForRate(req.Context()) {
			// The decoder's header (gzip's first 10 bytes) did not arrive in time.
			rw.Header().Set("Connection", "close")
			w.reject(req.Context(), rw, http.StatusRequestTimeout, reasonTooSlow, "Timeout",
				fmt.Sprintf("the body arrived slower than min_body_rate (%d bytes a second)", w.r.cfg.MinBodyRate))
			return
		}
		reason := reasonBadEncoding
		if code == http.StatusBadRequest && strings.Contains(msg, "decoded size exceeds max request body size") {
			code = http.StatusRequestEntityTooLarge
		}
		if code == http.StatusRequestEntityTooLarge {
			reason = reasonTooLarge
		}
		w.reject(req.Context(), rw, code, reason, "", msg)
	})
}
