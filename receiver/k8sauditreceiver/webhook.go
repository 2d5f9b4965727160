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

// reservation is what one request holds of the in-flight budget. It grows as the request's
// body arrives and as its events are decoded, and is given back whole when the request ends.
type reservation struct {
	w    *webhook
	ctx  context.Context
	held int64
	// floor is what the request holds besides its body and events (its decoder, see
	// chargesDecoders), which shrink leaves.
	floor int64
}

// grow reserves n bytes more, or reports false when the budget cannot spare them.
func (r *reservation) grow(n int64) bool {
	if !r.w.inFlight.Acquire(n) {
		return false
	}
	r.held += n
	r.w.r.telemetry.K8sAuditInFlightBytes.Add(r.ctx, n)
	return true
}

func (r *reservation) release() {
	r.w.inFlight.Release(r.held)
	r.w.r.telemetry.K8sAuditInFlightBytes.Add(r.ctx, -r.held)
	r.held = 0
}

// shrink gives back what the request holds for its body and events, once they are dropped.
func (r *reservation) shrink() {
	if n := r.held - r.floor; n > 0 {
		r.w.inFlight.Release(n)
		r.w.r.telemetry.K8sAuditInFlightBytes.Add(r.ctx, -n)
		r.held = r.floor
	}
}

// alone reports whether n bytes more than the request holds would pass the whole budget, even
// with no other request in flight: asking again later would not help.
func (r *reservation) alone(n int64) bool { return r.held+n > r.w.inFlight.Max() }

// bodyChunk is the size of the chunks a body of unknown length is read into, and what a body's
// reservation grows by once it holds that much.
const bodyChunk = 64 << 10

// bodyFirstStep is what a body's reservation starts with, its first chunk's size: the server's
// read buffer, which holds what arrived with the headers. A sender that declares a large body
// and sends it slowly holds what it has sent, rounded up to this while it is small, not what it
// declared: 1,100 senders of a byte a second held 64 KiB each, the whole 64 MiB bound, when
// every body started with a full chunk.
const bodyFirstStep = 4 << 10

// errBodyOverBudget says the in-flight budget could not hold more of a body being read.
var errBodyOverBudget = errors.New("the in-flight budget is spent")

// maxPooledBuffer is the largest body buffer kept for reuse: the pool serves the common
// batch sizes, a rare large body is left to the garbage collector instead of pinning its size.
const maxPooledBuffer = 4 << 20

var bodyBuffers = sync.Pool{New: func() any { return new([]byte) }}

// chunkPool holds the fixed-size chunks bodies are read into as they arrive. A body that fails
// (over max_request_body_size, over the budget, a broken connection) leaves nothing behind but
// its chunks, which the next body reuses: a flood of gzip bombs, each read up to the limit
// and refused, allocated 1.4 GB in bodies grown by copying before this.
var chunkPool = sync.Pool{New: func() any { c := make([]byte, bodyChunk); return &c }}

// firstChunkPool holds the first, small chunk of each body of unknown length (bodyFirstStep).
var firstChunkPool = sync.Pool{New: func() any { c := make([]byte, bodyFirstStep); return &c }}

// readBody reads a body of at most limit bytes into a pooled buffer, which the caller gives back
// with putBodyBuffer: straight into the buffer when the body declared a length below the limit
// (the apiserver's batches: no copy; see readDeclared), else into chunks (readChunked).
func readBody(body io.Reader, declared, limit int64, res *reservation) (*[]byte, error) {
	if declared >= 0 && declared < limit {
		return readDeclared(body, declared, limit, res)
	}
	return readChunked(body, res)
}

// readDeclared reads a body that declared its length (declared bytes, less than limit) into a
// pooled buffer, which the caller gives back with putBodyBuffer. The reservation grows as the
// bytes arrive: bodyFirstStep first, then by what it holds up to bodyChunk, then by half of what
// it holds, never past the declared length (plus the byte that sees the end), and the buffer
// with it: a body read to its end is held at its size, and one still arriving holds at most
// twice what has arrived, or bodyFirstStep. When the budget cannot grow, it returns
// errBodyOverBudget.
func readDeclared(body io.Reader, declared, limit int64, res *reservation) (*[]byte, error) {
	p := bodyBuffers.Get().(*[]byte)
	buf := (*p)[:0]
	defer func() { *p = buf }()
	ceiling := limit + 1 // MaxBytesReader fails on the byte past the limit
	if declared >= 0 && declared < limit {
		ceiling = declared + 1
	}
	var room int64 // bytes of the reservation not yet filled
	for {
		if room == 0 {
			held := int64(len(buf))
			step := min(max(bodyFirstStep, min(held, bodyChunk), held/2), ceiling-held)
			if step <= 0 {
				// A body longer than it declared: the server's reader fails on it, let it.
				step = bodyChunk
			}
			if !res.grow(step) {
				return p, errBodyOverBudget
			}
			room = step
			if need := len(buf) + int(room); need > cap(buf) {
				grown := make([]byte, len(buf), need)
				copy(grown, buf)
				buf = grown
			}
		}
		n, err := body.Read(buf[len(buf) : len(buf)+int(room)])
		buf = buf[:len(buf)+n]
		room -= int64(n)
		if errors.Is(err, io.EOF) {
			return p, nil
		}
		if err != nil {
			return p, err
		}
	}
}

// readChunked reads a body of unknown length (compressed, or sent in chunks; the reader bounds
// it) into a pooled buffer. The body arrives into chunks, the first of bodyFirstStep bytes, the
// others of bodyChunk, the reservation growing by one chunk at a time, and is copied into the
// buffer, whole, once it has ended; the chunks go back to their pools. A body refused on the way
// (past max_request_body_size, past the budget) leaves no outgrown buffers behind, only chunks
// the next body reuses. When the budget cannot grow, it returns errBodyOverBudget.
func readChunked(body io.Reader, res *reservation) (*[]byte, error) {
	p := bodyBuffers.Get().(*[]byte)
	var chunks []*[]byte
	defer func() {
		for i, c := range chunks {
			if i == 0 {
				firstChunkPool.Put(c)
			} else {
				chunkPool.Put(c)
			}
		}
	}()
	total := 0
	for {
		pool, size := &chunkPool, int64(bodyChunk)
		if len(chunks) == 0 {
			pool, size = &firstChunkPool, bodyFirstStep
		}
		if !res.grow(size) {
			return p, errBodyOverBudget
		}
		c := pool.Get().(*[]byte)
		chunks = append(chunks, c)
		n, err := io.ReadFull(body, *c)
		total += n
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break // the body ended within this chunk
		}
		if err != nil {
			return p, err
		}
	}
	buf := (*p)[:0]
	if total > cap(buf) {
		buf = make([]byte, 0, total)
	}
	for _, c := range chunks {
		buf = append(buf, (*c)[:min(len(*c), total-len(buf))]...)
	}
	*p = buf
	return p, nil
}

func putBodyBuffer(p *[]byte) {
	if cap(*p) <= maxPooledBuffer {
		*p = (*p)[:0]
		bodyBuffers.Put(p)
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
		return
	}
	// What the request holds of max_in_flight_bytes: its decoder (chargesDecoders made the
	// reservation then), its body as it arrives, not its declared length (a sender that
	// declares 20 MiB and sends a byte a second holds 64 KiB), then an estimate of its decoded
	// events, until the handler returns.
	res, ok := ctx.Value(reservationKey{}).(*reservation)
	if !ok {
		res = &reservation{w: w, ctx: ctx}
		defer res.release()
	}
	busy := func(what string) { w.busy(ctx, rw, what) }

	body := http.MaxBytesReader(rw, req.Body, limit)
	buf, err := readBody(body, declared, limit, res)
	if errors.Is(err, errBodyOverBudget) {
		// The rest of the body is read and dropped (no memory held, max_request_body_size
		// bytes at most, within read_timeout), so that the answer says what the body is: over
		// the limit, a 413 the sender must not retry (a gzip bomb under a flood of them), else
		// a 429. Answered mid-body, the connection would be closed with bytes unread and reset
		// under the client's write, the answer lost. What was read goes back first, and so
		// does its share of the budget: a request draining its body holds nothing but its
		// decoder.
		putBodyBuffer(buf)
		buf = nil
		res.shrink()
		_, err = io.Copy(io.Discard, body)
		if err == nil {
			busy("no room for the body")
			return
		}
	}
	if buf != nil {
		defer putBodyBuffer(buf)
	}
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			tooLarge()
			return
		}
		if bodyCutForRate(ctx) {
			rw.Header().Set("Connection", "close")
			w.reject(ctx, rw, http.StatusRequestTimeout, reasonTooSlow, "Timeout",
				fmt.Sprintf("the body arrived slower than min_body_rate (%d bytes a second)", w.r.cfg.MinBodyRate))
			return
		}
		w.reject(ctx, rw, http.StatusBadRequest, reasonReadError, "BadRequest", "reading the body: "+err.Error())
		return
	}
	// The events refer to the buffer's bytes until they are converted: it goes back to the
	// pool only when this handler returns.
	data := *buf
	maxEvents := w.r.cfg.MaxEventsPerRequest
	if maxEvents <= 0 {
		maxEvents = defaultMaxEventsPerRequest
	}
	if w.r.logs != nil {
		// The logs output first (an edge collector's): the events as received, split by the
		// scanner and not decoded. With no traces output that is all.
		if !w.serveRaw(ctx, rw, res, cluster, data, maxEvents) || w.r.next == nil {
			return
		}
	}
	var alone bool // the decoded events would pass the budget on their own
	pooled := auditconv.GetEvents()
	events, err := w.r.conv.DecodeBodyLimited(data, *pooled, auditconv.DecodeLimits{
		MaxItems: maxEvents,
		Charge: func(n int64) bool {
			alone = res.alone(n)
			return res.grow(n)
		},
	})
	defer auditconv.PutEvents(pooled, events)
	if err != nil {
		if _, ok := errors.AsType[*auditconv.TooManyItemsError](err); ok {
			w.reject(ctx, rw, http.StatusRequestEntityTooLarge, reasonTooManyEvents, "RequestEntityTooLarge",
				fmt.Sprintf("the EventList has more than %d events (max_events_per_request): split the batch (--audit-webhook-batch-max-size)", maxEvents))
			return
		}
		if errors.Is(err, auditconv.ErrOverBudget) {
			if alone && errors.Is(err, auditconv.ErrValuesOverBudget) {
				w.reject(ctx, rw, http.StatusRequestEntityTooLarge, reasonTooManyValues, "RequestEntityTooLarge",
					fmt.Sprintf("indexed, the values of its object bodies would hold more than max_in_flight_bytes (%d bytes, %d per value)",
						w.inFlight.Max(), auditconv.ValueBytes))
				return
			}
			if alone {
				w.reject(ctx, rw, http.StatusRequestEntityTooLarge, reasonTooLarge, "RequestEntityTooLarge",
					fmt.Sprintf("decoded, the body would hold more than max_in_flight_bytes (%d bytes)", w.inFlight.Max()))
				return
			}
			busy("no room for the decoded events")
			return
		}
		reason := reasonMalformedJSON
		if auditconv.IsWrongKind(err) {
			reason = reasonWrongKind
		}
		w.reject(ctx, rw, http.StatusBadRequest, reason, "BadRequest", err.Error())
		return
	}

	n, err := w.r.consume(ctx, w.r.obsHTTP, inputWebhook, cluster, events)
	if err != nil {
		w.refused(ctx, rw, err)
		return
	}
	w.r.set.Logger.Debug("Audit batch accepted", zap.String("cluster", cluster),
		zap.Int("events", len(events)), zap.Int("spans", n))
	rw.WriteHeader(http.StatusOK)
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

// rawRecordBytes is what a log record of the logs output holds besides its body (record,
// resource and attribute headers), charged to max_in_flight_bytes.
const rawRecordBytes = 256

// serveRaw hands the body's events, as received, to the logs output. It answers the request
// itself when it refuses the body or the pipeline refuses the events (then false); true means
// the events were accepted and nothing was written yet.
func (w *webhook) serveRaw(ctx context.Context, rw http.ResponseWriter, res *reservation, cluster string, data []byte, maxEvents int) bool {
	pooled := rawEventsPool.Get().(*[]auditconv.RawEvent)
	defer func() {
		clear(*pooled)
		rawEventsPool.Put(pooled)
	}()
	raws, err := auditconv.ScanEventList(data, maxEvents, *pooled)
	if err != nil {
		if _, ok := errors.AsType[*auditconv.TooManyItemsError](err); ok {
			w.reject(ctx, rw, http.StatusRequestEntityTooLarge, reasonTooManyEvents, "RequestEntityTooLarge",
				fmt.Sprintf("the EventList has more than %d events (max_events_per_request): split the batch (--audit-webhook-batch-max-size)", maxEvents))
			return false
		}
		reason := reasonMalformedJSON
		if auditconv.IsWrongKind(err) {
			reason = reasonWrongKind
		}
		w.reject(ctx, rw, http.StatusBadRequest, reason, "BadRequest", err.Error())
		return false
	}
	*pooled = raws
	// The records copy the bodies: their bytes, and a record's overhead each, are charged.
	charge := int64(len(data)) + int64(len(raws))*rawRecordBytes
	if alone := res.alone(charge); !res.grow(charge) {
		if alone {
			w.reject(ctx, rw, http.StatusRequestEntityTooLarge, reasonTooLarge, "RequestEntityTooLarge",
				fmt.Sprintf("as log records, the body would hold more than max_in_flight_bytes (%d bytes)", w.inFlight.Max()))
			return false
		}
		w.busy(ctx, rw, "no room for the log records")
		return false
	}
	n, err := w.r.consumeRaw(ctx, w.r.obsHTTP, cluster, raws)
	if err != nil {
		w.refused(ctx, rw, err)
		return false
	}
	w.r.set.Logger.Debug("Audit batch forwarded", zap.String("cluster", cluster), zap.Int("records", n))
	if w.r.next == nil {
		rw.WriteHeader(http.StatusOK)
	}
	return true
}

// rawEventsPool keeps the scanned events of a request for the next one.
var rawEventsPool = sync.Pool{New: func() any { return new([]auditconv.RawEvent) }}

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
