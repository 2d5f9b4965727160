package auditconv

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"go.uber.org/zap"

	"github.com/kubetrail/kubetrail/internal/auditconv/internal/jsonscan"
	"github.com/kubetrail/kubetrail/internal/model"
)

// Values of attrDiffSkipped.
const (
	// diffSkippedBaseNotSeen: the write names the resourceVersion it was based on and the cache
	// holds another one (writes in between reached another replica, were lost, are still being
	// retried, or were audited without their body), or the cache holds no body of the object at
	// all (its earlier writes reached another replica, or came before this collector started).
	// A diff against the cached body would put their changes on this write.
	diffSkippedBaseNotSeen = "base_not_seen"
	// diffSkippedOutOfOrder: the write arrived after a newer one of the object; the cache
	// never moves backwards.
	diffSkippedOutOfOrder = "out_of_order"
)

const (
	// maxClockSkew is how far in the future (by the collector's clock) an event may say it was
	// received: audit timestamps come from the apiserver's clock.
	maxClockSkew = 24 * time.Hour
)

// oldestTimestamp is the earliest time an audit event can have been received: no apiserver
// existed before Kubernetes' first release. Earlier times (year 1, a zero time written out)
// would put the span in a nonsense window.
var oldestTimestamp = time.Date(2014, time.June, 1, 0, 0, 0, 0, time.UTC)

// Converter turns decoded audit events into spans (docs/design.md, Spans). It is safe for concurrent
// use: its only mutable state is the object cache, which has its own lock.
type Converter struct {
	// filters decide which events become spans (filter.go); the decoder asks them too.
	filters
	mapper model.Mapper
	window time.Duration
	redact grSet
	// red masks what redact_env_names and redact_annotations name in every body, and tags
	// redacted values for the cache.
	red   *redactor
	cache *objectCache // nil when diffs are off
	// shared is the diff base shared with other replicas through Redis (shared_diff_base),
	// nil when not configured.
	shared       *sharedBases
	scopeName    string
	scopeVersion string
	tel          Telemetry
	// contextKeys are the trace-context annotation keys (trace_context_annotations).
	contextKeys *contextKeys
	// now is the clock the event timestamps are checked against; logger reports refused
	// events (sampled: a stream of bad events logs a few lines a minute, the metric counts all).
	now    func() time.Time
	logger *zap.Logger
}

// New returns a Converter for the given options.
func New(o Options) *Converter {
	c := &Converter{
		mapper: model.BuiltinMapper(),
		window: o.Settings.Window,
		filters: filters{
			includeReads: o.Settings.IncludeReadVerbs,
			exclude:      newGRSet(o.Settings.ExcludeResources),
			excludeUA:    o.Settings.ExcludeUserAgents,
		},
		redact:       newGRSet(o.Settings.RedactResources),
		red:          newRedactor(o.Settings),
		contextKeys:  newContextKeys(o.Settings.traceContextKeys()),
		scopeName:    o.ScopeName,
		scopeVersion: o.ScopeVersion,
		now:          time.Now,
		logger:       zap.NewNop(),
		tel:          o.Telemetry,
	}
	if o.Logger != nil {
		c.logger = o.Logger
	}
	if o.Settings.DiffCacheSize > 0 {
		c.cache = newObjectCache(o.Settings.DiffCacheSize, c.tel.cacheObjects())
		c.cache.boundBytes(o.Settings.DiffCacheMaxBytes, c.tel.cacheBytes(), c.tel.cacheEviction())
		if sh := o.Settings.SharedDiffBase.Get(); sh != nil {
			c.shared = newSharedBases(*sh, o.Settings.Window, c.tel.DiffBaseRecords, c.logger)
		}
	}
	return c
}

func newGRSet(grs []GroupResource) grSet {
	s := make(grSet, len(grs))
	for _, gr := range grs {
		s[[2]string{gr.Group, gr.Resource}] = struct{}{}
	}
	return s
}

// Stats counts what a batch lost on the way, by reason.
type Stats struct {
	filtered map[string]int
	dropped  map[string]int
	// badContexts counts malformed trace-context annotations, by model.Traceparent* reason.
	badContexts map[string]int
	// skippedDiffs counts writes left without a diff, by diffSkipped* reason.
	skippedDiffs map[string]int
}

func (s *Stats) skippedDiff(reason string) {
	if s.skippedDiffs == nil {
		s.skippedDiffs = map[string]int{}
	}
	s.skippedDiffs[reason]++
}

func (s *Stats) badContext(reason string) {
	if s.badContexts == nil {
		s.badContexts = map[string]int{}
	}
	s.badContexts[reason]++
}

func (s *Stats) filter(reason string) {
	if s.filtered == nil {
		s.filtered = map[string]int{}
	}
	s.filtered[reason]++
}

func (s *Stats) drop(reason string, n int) {
	if s.dropped == nil {
		s.dropped = map[string]int{}
	}
	s.dropped[reason] += n
}

// convert turns the events of one cluster into spans, one ResourceSpans per kind.
func (c *Converter) convert(cluster string, events []Event, st *Stats) ptrace.Traces {
	if c.shared != nil {
		return c.convertShared(cluster, events, st)
	}
	return c.convertBatch(cluster, events, st, nil)
}

// convertBatch converts the events, taking the shared bodies sb read (nil: no shared base).
func (c *Converter) convertBatch(cluster string, events []Event, st *Stats, sb *sharedBatch) ptrace.Traces {
	b := model.NewTracesBuilder(c.scopeName, c.scopeVersion)
	for i := range events {
		c.convertEvent(b, cluster, &events[i], st, sb)
	}
	return b.Traces()
}

func (c *Converter) keep(ev *Event, st *Stats) bool {
	if ev.Invalid != "" {
		st.drop(reasonInvalidEvent, 1)
		c.logger.Warn("Refusing an audit event that is not valid; the other events of its batch are kept",
			zap.String("problem", ev.Invalid), zap.String("audit_id", LogAuditID(ev.AuditID)))
		return false
	}
	if reason := c.filterReason(ev); reason != "" {
		st.filter(reason)
		return false
	}
	if ev.delimited != 0 && !validDelimited(ev) {
		// A body the decoder only delimited, the filters having dropped the event until a
		// member after it (a client that writes objectRef last, a duplicate stage) kept it.
		st.drop(reasonInvalidEvent, 1)
		c.logger.Warn("Refusing an audit event whose body is not valid JSON; the other events of its batch are kept",
			zap.String("audit_id", LogAuditID(ev.AuditID)))
		return false
	}
	if ev.AuditID == "" || ev.RequestReceivedTimestamp.IsZero() {
		st.drop(reasonInvalidEvent, 1)
		c.logger.Warn("Refusing an audit event without auditID or requestReceivedTimestamp",
			zap.String("audit_id", LogAuditID(ev.AuditID)))
		return false
	}
	if ref := ev.ObjectRef; !validResource(ref.Resource) || !validGroup(ref.APIGroup) {
		// Not a resource the apiserver serves: its identity would be garbage, and redaction,
		// which matches resources as the apiserver names them, would not know it.
		st.drop(reasonInvalidEvent, 1)
		r, _ := clipText(ref.Resource, maxTokenBytes)
		g, _ := clipText(ref.APIGroup, maxTokenBytes)
		c.logger.Warn("Refusing an audit event whose objectRef names no valid resource (a lower-case plural) or API group",
			zap.String("resource", r), zap.String("api_group", g), zap.String("audit_id", LogAuditID(ev.AuditID)))
		return false
	}
	if t := ev.RequestReceivedTimestamp; t.Before(oldestTimestamp) || t.After(c.now().Add(maxClockSkew)) {
		st.drop(reasonInvalidTimestamp, 1)
		c.logger.Warn("Refusing an audit event received at an impossible time",
			zap.Time("request_received_timestamp", t), zap.String("audit_id", LogAuditID(ev.AuditID)))
		return false
	}
	return true
}

// validDelimited reports whether the bodies the decoder only delimited are valid JSON.
func validDelimited(ev *Event) bool {
	for _, b := range []struct {
		which bodySet
		raw   []byte
	}{{requestBody, ev.RequestObject}, {responseBody, ev.ResponseObject}} {
		if ev.delimited&b.which != 0 {
			if end, err := jsonscan.SkipValue(b.raw, 0, 0); err != nil || end != len(b.raw) {
				return false
			}
		}
	}
	return true
}

// convertEvent appends the span of one event, unless keep refuses it. Each step reads and
// fills the eventSpan: the object the event concerns, the bodies that describe it, the span and
// its attributes, then what the bodies and the object cache add (error, patch, diff, snapshot).
func (c *Converter) convertEvent(b *model.TracesBuilder, cluster string, ev *Event, st *Stats, sb *sharedBatch) {
	if !c.keep(ev, st) {
		return
	}
	var e eventSpan // on the stack, bodies included: no allocation per event
	e.st, e.shared = st, sb
	c.begin(&e, cluster, ev)
	c.readBodies(&e)
	c.completeIdentity(&e)
	c.startSpan(&e, b, cluster)
	c.putAttributes(&e, st)
	c.putBodyParts(&e)
	e.cut.put(e.span.Attributes())
	e.respBody.release()
	e.reqBody.release()
	e.scaleBody.release()
}

// eventSpan is one kept event on its way to a span: the object it concerns, the bodies that
// describe that object and the span being built. convertEvent's steps fill it in order.
type eventSpan struct {
	st *Stats // the batch's counts
	// shared is what the batch read from the shared diff base; nil without one.
	shared *sharedBatch
	ev     *Event
	ref    *objectReference
	obj    model.Object
	code   int  // the response's HTTP status, 0 when the event has none
	failed bool // an error status, or the apiserver panicked
	redact bool // the resource's values are redacted (redact_resources, credentials)
	// secrets are the values redaction masks in the event's bodies, for scrub; found on the
	// first message that needs them (secretsFound).
	secrets      []string
	secretsFound bool

	// The bodies that describe the object, parsed on first use; one without raw bytes is
	// absent (see resp, req and scale).
	respBody  lazyBody // the response, when it is the object itself
	reqBody   lazyBody // the request of a create or update whose response is not the object
	scaleBody lazyBody // the Scale a scale subresource answered with
	// respMeta is the scanned response (the object or its Scale), reqMeta the request's.
	respMeta, reqMeta objectMeta
	// traceContexts, nodeName and rollout come from the body that describes the object.
	traceContexts carriedList
	nodeName      string
	rollout       rollout

	span    ptrace.Span
	endTS   pcommon.Timestamp
	clamped bool // the stage timestamp was impossible: the span ends when it began
	// baseRV is the resourceVersion the request was based on.
	baseRV string
	// subresource is the objectRef's, bounded; cut lists the attributes cut at their bound.
	subresource string
	cut         cuts
}

// resp, req and scale return the body, or nil when the event has none.
func (e *eventSpan) resp() *lazyBody  { return presentBody(&e.respBody) }
func (e *eventSpan) req() *lazyBody   { return presentBody(&e.reqBody) }
func (e *eventSpan) scale() *lazyBody { return presentBody(&e.scaleBody) }

func presentBody(b *lazyBody) *lazyBody {
	if b.raw == nil {
		return nil
	}
	return b
}

// newRV is the resourceVersion the write left the object at, from the response (the object
// or its Scale); empty when the response is neither.
func (e *eventSpan) newRV() string { return e.respMeta.ResourceVersion }

// begin takes the event's status and the identity its objectRef gives.
func (c *Converter) begin(e *eventSpan, cluster string, ev *Event) {
	ref := ev.ObjectRef
	e.ev, e.ref = ev, ref
	if ev.ResponseStatus != nil {
		e.code = ev.ResponseStatus.Code
	}
	e.failed = e.code >= 400 || ev.Stage == stagePanic
	e.redact = c.redact.match(ref.APIGroup, ref.Resource, "") || carriesCredentials(ref.APIGroup, ref.Resource)
	e.subresource = e.cut.text(model.AttrAuditSubresource, ref.Subresource, maxTokenBytes)

	e.obj = c.objectOf(cluster, ref)
}

// objectOf is the object an objectRef names, as far as the reference tells.
func (c *Converter) objectOf(cluster string, ref *objectReference) model.Object {
	obj := model.Object{
		Cluster: cluster, Group: ref.APIGroup, Version: ref.APIVersion, Resource: ref.Resource,
		Namespace: ref.Namespace, Name: ref.Name, UID: ref.UID,
	}
	if obj.Namespace != "" {
		// The apiserver reads /api/v1/namespaces/{name} as a namespace path, so every request
		// on a Namespace but its create names the Namespace as its own namespace. A namespace
		// on a cluster-scoped object would give it a second name key.
		if info, ok := c.mapper.ByResource(obj.Group, obj.Resource); ok && !info.Namespaced {
			obj.Namespace = ""
		}
	}
	return obj
}

// readBodies finds the bodies that describe the object. The response body, when audited and
// when it is the object itself (not a Status, a Scale or a Binding), completes the identity:
// generated names, UIDs of creates, kind and controlling owner. Bodies are parsed into trees
// only when one is diffed, cached or shown (lazyBody); the identity comes from a scan.
func (c *Converter) readBodies(e *eventSpan) {
	ev, ref := e.ev, e.ref
	if hasBody(ev.ResponseObject) {
		described := false
		if m, ok := c.responseMeta(e); ok {
			switch {
			case c.describes(ref, m):
				if e.respBody.raw == nil {
					e.respBody = lazyBody{raw: ev.ResponseObject, red: c.red, whole: e.redact}
				}
				e.respMeta, described = m, true
			case ref.Subresource == "scale" && m.Kind == "Scale" && (ref.Name == "" || m.Name == ref.Name):
				// A Scale mirrors its parent's name, UID and resourceVersion, and its
				// spec.replicas is the parent's: enough to complete the identity and to diff
				// the one field.
				e.scaleBody, e.respMeta = lazyBody{raw: ev.ResponseObject}, m
				if e.obj.UID == "" {
					e.obj.UID = m.UID
				}
			case ev.Verb == "delete" && m.Kind == "Status" && e.obj.UID == "":
				// A deletion that removed the object at once answers with a Status whose
				// details name the object and its UID: the object deleted, even when the
				// name has a newer holder by the time the event is read (a late or reordered
				// log delivery) or the cache never saw it.
				if name, uid := scanStatusDetails(ev.ResponseObject); uid != "" && (ref.Name == "" || name == ref.Name) {
					e.obj.UID = uid
				}
			}
		}
		if !described && e.respBody.raw != nil {
			// Indexed for its identity, but not the object: nothing else reads it.
			e.respBody.release()
			e.respBody = lazyBody{}
		}
	}
	if e.resp() != nil {
		fillObject(&e.obj, e.respMeta)
	} else if (ev.Verb == "create" || ev.Verb == "update") && ref.Subresource == "" && hasBody(ev.RequestObject) {
		// Below RequestResponse level the request body still names the owner a controller
		// set; it cannot know a generated name or a new UID.
		if m, ok := scanMeta(ev.RequestObject, c.contextKeys); ok && c.describes(ref, m) {
			e.reqBody = lazyBody{raw: ev.RequestObject, red: c.red, whole: e.redact}
			m.ResourceVersion = ""
			fillObject(&e.obj, m)
			e.reqMeta = m
		}
	}
	// The trace context and the node come from the body that describes the object: the
	// response (the object as stored) when audited, else the request.
	e.traceContexts, e.nodeName, e.rollout = e.respMeta.TraceContexts, e.respMeta.NodeName, e.respMeta.Rollout
	if e.resp() == nil {
		e.traceContexts, e.nodeName, e.rollout = e.reqMeta.TraceContexts, e.reqMeta.NodeName, e.reqMeta.Rollout
	}
	if ref.Resource == "pods" && ref.APIGroup == "" && ref.Subresource == "binding" && ev.Verb == "create" && !e.failed && hasBody(ev.RequestObject) {
		// The scheduler's binding names the node in its target.
		if m, ok := scanMeta(ev.RequestObject, c.contextKeys); ok && m.Kind == "Binding" {
			e.nodeName = m.Target
		}
	}
}

// responseMeta reads the identity of the response body. With the diff cache on, a response
// of the object or its status subresource is indexed anyway when it describes the object
// (diffed, cached or shown), so it is indexed here and read from the index, left in
// e.respBody; other responses (a Scale, a Binding, a Status) are only scanned. The identity is
// read before redaction (lazyBody.check), which may replace the index with a redacted one.
func (c *Converter) responseMeta(e *eventSpan) (objectMeta, bool) {
	raw := e.ev.ResponseObject
	pre, indexed := e.ev.takeResponseIndex()
	if c.cache == nil || e.redact || (e.ref.Subresource != "" && e.ref.Subresource != "status") {
		putNodes(pre.nodes)
		return scanMeta(raw, c.contextKeys)
	}
	e.respBody = lazyBody{raw: raw, red: c.red}
	if indexed {
		e.respBody.f, e.respBody.state = pre, 1 // indexed while the batch was decoded
	} else {
		e.respBody.indexRaw()
	}
	if e.respBody.state < 0 {
		return objectMeta{}, false
	}
	m := e.respBody.f.meta(c.contextKeys)
	e.respBody.check()
	return m, true
}

// completeIdentity fills in what neither objectRef nor a body said: whether the object is a
// root, its UID from the cache, its kind and version from the mapper.
func (c *Converter) completeIdentity(e *eventSpan) {
	obj := &e.obj
	// Bounded before any key is made of it (the cache's, the shared base's, the trace's).
	e.cut.boundIdentity(obj)
	e.respMeta.ResourceVersion = e.cut.text(model.AttrObjectNewRV, e.respMeta.ResourceVersion, maxShortBytes)
	e.nodeName = e.cut.text(model.AttrNodeName, e.nodeName, maxNameBytes)
	e.rollout.bound(&e.cut)
	// A body of the object itself without a controlling owner reference is a definitive
	// answer: the object is a root.
	obj.NoOwner = (e.resp() != nil || e.req() != nil) && obj.Owner.IsZero()
	if obj.UID == "" && obj.Name != "" && c.cache != nil && !(e.ev.Verb == "create" && e.ref.Subresource == "") {
		// Deletions answered with a Status and patches without a body name the object but
		// not its UID; the cache knows which object last held the name (a create always
		// starts its entry afresh), so the span joins the UID-keyed trace. A create is a new
		// object by definition and never takes a previous holder's UID.
		var buf [128]byte
		obj.UID = c.cache.uidOf(obj.AppendNameKey(buf[:0]))
	}
	if obj.Kind == "" || obj.Version == "" {
		if info, ok := c.mapper.ByResource(obj.Group, obj.Resource); ok {
			if obj.Kind == "" {
				obj.Kind = info.Kind
			}
			if obj.Version == "" {
				obj.Version = info.Version
			}
		}
	}
	if obj.Kind == "" {
		obj.Kind = obj.Resource
	}
}

// startSpan appends the span in the object's trace and window, with its name and times.
func (c *Converter) startSpan(e *eventSpan, b *model.TracesBuilder, cluster string) {
	ev := e.ev
	// A stage timestamp before the request's, or past what the request's own bound allows,
	// cannot be the end of this request: the span ends when it began and says so.
	start := ev.RequestReceivedTimestamp
	end := ev.StageTimestamp
	if end.Before(start) || end.After(c.now().Add(maxClockSkew)) {
		end, e.clamped = start, !ev.StageTimestamp.IsZero()
	}
	window := model.WindowStart(start, c.window)
	key := e.obj.Key()

	span := b.AppendSpan(e.obj)
	span.SetTraceID(model.ObjectTraceID(key, window))
	span.SetParentSpanID(model.ObjectSpanID(key, window))
	span.SetSpanID(model.AuditSpanID(ev.AuditID))
	span.SetName(spanName(ev.Verb, e.ref.Resource, e.subresource))
	span.SetKind(ptrace.SpanKindServer)
	span.SetStartTimestamp(pcommon.NewTimestampFromTime(start))
	span.SetEndTimestamp(pcommon.NewTimestampFromTime(end))
	e.span, e.endTS = span, span.EndTimestamp()
}

// putAttributes sets the span's attributes: the object, the request and its outcome, and the
// link to the trace context the object carries.
func (c *Converter) putAttributes(e *eventSpan, st *Stats) {
	ev, ref := e.ev, e.ref
	attrs := e.span.Attributes()
	// An audit span of the recorded scenarios carries 18-25 attributes besides its annotations'
	// (at most one each), the most when a body told the object's owner, node and versions: room
	// for all at once instead of a doubling copy past a guess.
	n := 20 + len(ev.Annotations)
	if e.resp() != nil || e.req() != nil {
		n += 6
	}
	attrs.EnsureCapacity(n)
	attrs.PutStr(model.AttrSpanType, model.SpanTypeAudit)
	e.obj.PutOwner(attrs)
	cut := &e.cut
	attrs.PutStr(model.AttrAuditID, cut.text(model.AttrAuditID, ev.AuditID, MaxAuditIDBytes))
	attrs.PutStr(model.AttrAuditVerb, ev.Verb) // one of the verbs filterReason keeps
	attrs.PutStr(model.AttrAuditLevel, cut.text(model.AttrAuditLevel, ev.Level, maxShortBytes))
	attrs.PutStr(model.AttrAuditStage, ev.Stage) // ResponseComplete or Panic
	if e.clamped {
		attrs.PutBool(attrClamped, true)
	}
	putNonEmpty(attrs, model.AttrAuditSubresource, e.subresource)
	attrs.PutStr(model.AttrUserName, cut.text(model.AttrUserName, ev.User.Username, maxUserBytes))
	if len(ev.User.Groups) > 0 && !impliedGroups(ev.User.Username, ev.User.Groups) {
		n := len(ev.User.Groups)
		if n > maxGroups {
			n = maxGroups
			cut.note(model.AttrAuditUserGroups)
		}
		groups := attrs.PutEmptySlice(model.AttrAuditUserGroups)
		groups.EnsureCapacity(n)
		for _, g := range ev.User.Groups[:n] {
			groups.AppendEmpty().SetStr(cut.text(model.AttrAuditUserGroups, g, maxUserBytes))
		}
	}
	if ev.ImpersonatedUser != nil {
		putNonEmpty(attrs, model.AttrAuditImpersonatedUser, cut.text(model.AttrAuditImpersonatedUser, ev.ImpersonatedUser.Username, maxUserBytes))
	}
	putNonEmpty(attrs, model.AttrUserAgent, cut.text(model.AttrUserAgent, ev.UserAgent, maxUserAgentBytes))
	putAnnotations(attrs, ev.Annotations, c.red, e.redact, func(s string) string { return c.scrub(e, s) }, cut)
	putNonEmpty(attrs, model.AttrNodeName, e.nodeName)
	e.rollout.put(attrs)
	if len(e.traceContexts) > 0 {
		c.linkTraceContexts(e.span, e.traceContexts, ev.AuditID, st)
	}
	if len(ev.SourceIPs) > 0 {
		attrs.PutStr(model.AttrClientAddress, cut.text(model.AttrClientAddress, ev.SourceIPs[0], maxClientAddressBytes))
	}
	if e.code != 0 {
		attrs.PutInt(model.AttrHTTPStatusCode, int64(e.code))
	}
	if p, _, _ := strings.Cut(ev.RequestURI, "?"); p != "" {
		attrs.PutStr(model.AttrURLPath, cut.text(model.AttrURLPath, p, maxURLPathBytes))
	}
	e.baseRV = ref.ResourceVersion
	if e.baseRV == "" && ev.Verb == "patch" && hasBody(ev.RequestObject) {
		e.baseRV = patchPrecondition(ev.RequestObject)
	}
	// Bounded before the cache compares or keeps it.
	e.baseRV = cut.text(model.AttrObjectResourceVersion, e.baseRV, maxShortBytes)
	putNonEmpty(attrs, model.AttrObjectResourceVersion, e.baseRV)
	if !e.failed && (e.resp() != nil || e.scale() != nil) {
		putNonEmpty(attrs, model.AttrObjectNewRV, e.newRV())
	}
}

// putBodyParts adds what the bodies and the object cache tell: the error, the patch, the diff
// or the 409 link (remember), and the snapshot of a created or deleted object.
func (c *Converter) putBodyParts(e *eventSpan) {
	ev, span, ts := e.ev, e.span, e.endTS
	if e.failed {
		setError(span, ev, e.code, ts, func(s string) string { return c.scrub(e, s) }, &e.cut)
	}
	if ev.Verb == "patch" && hasBody(ev.RequestObject) {
		putPatch(span, c.red.patchText(ev.RequestObject, e.redact, maskConstant), ts)
	}

	var cached string
	if c.cache != nil && e.obj.Name != "" {
		cached = c.remember(e)
	}

	if !e.failed && e.ref.Subresource == "" && (ev.Verb == "create" || ev.Verb == "delete") {
		switch resp, req := e.resp(), e.req(); {
		case resp != nil:
			if f := resp.flat(); f != nil {
				putSnapshot(span, encodeFlat(f), ts)
			}
		case req != nil && ev.Verb == "create":
			if f := req.flat(); f != nil {
				putSnapshot(span, encodeFlat(f), ts)
			}
		case cached != "" && ev.Verb == "delete":
			putSnapshot(span, cached, ts)
		}
	}
}

// lazyBody is an audited body that is indexed (flat) or parsed into a tree on first use,
// managedFields left out and redacted values tagged (red): most bodies are only scanned
// (scanMeta), never indexed, and few are ever parsed into trees. A body with nothing to redact
// is indexed in place; one with something (a redacted resource's, always; another when
// redactor.needs finds an env value or an annotation to mask) is indexed from its tagged tree.
type lazyBody struct {
	raw    []byte
	red    *redactor // nil: the body is never redacted (a Scale)
	whole  bool      // a redacted resource's body (redact_resources, a TokenReview)
	masked bool      // f indexes the encoding of the tagged tree, bytes of its own
	t      jsonscan.Tree
	parsed bool
	f      flatBody
	state  int8 // 0: not indexed yet; 1: f holds it; -1: not a JSON object
}

// release returns the body's nodes to nodePool: nothing of f outlives the event (the cache keeps
// copies: kept and keptNodes; diffs and snapshots are strings).
func (b *lazyBody) release() {
	if b.state == 1 {
		putNodes(b.f.nodes)
	}
	b.f, b.state = flatBody{}, 0
}

// tree returns the parsed body, or nil when it is not a JSON object.
func (b *lazyBody) tree() jsonscan.Tree {
	if !b.parsed {
		b.parsed = true
		if t, ok := parseBody(b.raw); ok {
			if b.red != nil {
				b.red.redactTree(t, b.whole, b.red.tags.mask)
			}
			b.t = t
		}
	}
	return b.t
}

// flat returns the body indexed, or nil when it is not a JSON object. A redacted body is
// indexed from its tagged tree, encoded: redaction works on trees, and such bodies are few.
func (b *lazyBody) flat() *flatBody {
	if b.state == 0 {
		b.indexRaw()
		b.check()
	}
	if b.state < 0 {
		return nil
	}
	return &b.f
}

// indexRaw indexes the body in place, or a redacted resource's from its tagged tree.
func (b *lazyBody) indexRaw() {
	b.state = -1
	if b.red != nil && b.whole {
		b.indexMasked()
		return
	}
	if f, ok := flatten(b.raw, getNodes()); ok {
		b.f, b.state = f, 1
	}
}

// check replaces a body indexed in place by its tagged tree's index when it holds a value the
// redaction rules mask.
func (b *lazyBody) check() {
	if b.state == 1 && b.red != nil && !b.masked && b.red.needs(&b.f) {
		b.release()
		b.indexMasked()
	}
}

func (b *lazyBody) indexMasked() {
	b.state, b.masked = -1, true
	t := b.tree()
	if t == nil {
		return
	}
	if f, ok := flatten([]byte(jsonscan.Marshal(t)), getNodes()); ok {
		b.f, b.state = f, 1
	}
}

// kept is the indexed body as the object cache keeps it: memory of its own (reuse's, when it
// fits: see compactInto), without managedFields, redacted values tagged; and its index for
// those bytes, in a node slice of its own.
func (b *lazyBody) kept(reuse []byte) ([]byte, []fnode) {
	if b.masked {
		// Encoded from the tagged tree for this body alone: the index is the bytes' own.
		return b.f.d, b.f.keptNodes(getNodes())
	}
	return b.f.compactInto(reuse), b.f.keptNodes(getNodes())
}

// remember updates the object cache with this event and adds what the cache knows to the
// span: the field diff of an update or patch, and the link from a 409 Conflict to the write
// that won the race. It returns the previously cached body of a deleted object.
func (c *Converter) remember(s *eventSpan) (deletedBody string) {
	c.cache.mu.Lock()
	defer c.cache.mu.Unlock()
	var buf [128]byte
	ev, key := s.ev, c.cache.keyOf(s.obj.AppendNameKey(buf[:0]))

	if s.failed {
		c.linkConflict(s, key)
		if attemptable(s) {
			c.attempt(s, key)
		}
		return ""
	}
	resp, scale, newRV := s.resp(), s.scale(), s.newRV()
	span, obj := s.span, &s.obj
	// The history keeps the auditID as the span shows it: bounded (wrote never matches a cut one).
	auditID, _ := clipText(ev.AuditID, MaxAuditIDBytes)
	w := newWrite(auditID, s.baseRV, newRV, span.TraceID(), span.SpanID())

	if ev.Verb == "create" && s.ref.Subresource == "" {
		// A create is a new object even when the name was used before.
		if old := c.cache.get(key); old != nil {
			c.cache.remove(old)
		}
	}
	if ev.Verb == "delete" && s.ref.Subresource == "" && (resp == nil || !stillExists(resp.flat())) {
		// The object is gone: drop its body (the snapshot gets it when the response had none)
		// but keep its UID and writes as a tombstone, so late requests on the name (a kubelet
		// retrying the delete, a 404) still join its trace; a create starts the name afresh.
		if old := c.cache.get(key); old != nil && (obj.UID == "" || old.uid == "" || old.uid == obj.UID) {
			if resp == nil && old.hasBody() {
				deletedBody = old.bodyJSON()
			}
			old.dropBody()
			old.rv, old.lastDiff = "", nil
			old.record(w)
		}
		return deletedBody
	}
	e := c.cache.entry(key, obj.UID)
	if s.shared != nil && (ev.Verb == "update" || ev.Verb == "patch") {
		c.shared.adopt(c.cache, s.shared, e, key, obj.UID, newRV, false)
	}
	if newRV != "" && newRV == e.rv && e.hasBody() && (resp != nil || scale != nil) && !e.wrote(ev.AuditID) {
		// The apiserver answers a write that changes nothing with the object as it was, same
		// resourceVersion. A redelivery has the same auditID; a new auditID is a no-op: it gets
		// no diff (the last one belongs to the write before) and, having moved no
		// resourceVersion, stays out of the history a 409 is linked from.
		span.Attributes().PutBool(attrAuditNoop, true)
		return ""
	}
	e.record(w)
	if resp == nil && scale == nil {
		return ""
	}

	isChange := ev.Verb == "update" || ev.Verb == "patch"
	// Whether the cached body is this write's base. A write whose request names its base (an
	// update's resourceVersion, a patch's precondition) is diffed only against that version; one
	// that names none is diffed against the cached body, and its diff says which version that was.
	baseSeen := true
	switch {
	case !e.hasBody():
		// First sight of this object's body: nothing to compare with. A change that is first
		// sight says so, as one based on a version this collector never held: the reader must
		// tell "not known here" from "nothing changed".
		if isChange {
			baseSeen = false
			span.Attributes().PutStr(attrDiffSkipped, diffSkippedBaseNotSeen)
			s.st.skippedDiff(diffSkippedBaseNotSeen)
		}
	case newRV != "" && newRV == e.rv:
		// The same write delivered again: show what it showed the first time, never an empty diff.
		if isChange {
			if e.lastSkipped {
				span.Attributes().PutStr(attrDiffSkipped, diffSkippedBaseNotSeen)
			} else if e.lastDiff != nil {
				putDiff(span, *e.lastDiff, s.endTS)
			}
		}
		return ""
	case rvOlder(newRV, e.rv):
		// Arrived out of order: never move the cache backwards.
		if isChange {
			span.Attributes().PutStr(attrDiffSkipped, diffSkippedOutOfOrder)
			s.st.skippedDiff(diffSkippedOutOfOrder)
		}
		return ""
	case isChange && s.baseRV != "" && s.baseRV != e.rv:
		baseSeen = false
		span.Attributes().PutStr(attrDiffSkipped, diffSkippedBaseNotSeen)
		s.st.skippedDiff(diffSkippedBaseNotSeen)
	}

	var body *flatBody
	var kept []byte
	var nodes []fnode
	if scale != nil {
		if !baseSeen {
			// The object at the Scale's resourceVersion is not known: the cached body stays as
			// it is, and a later write based on this one is not diffed against it either.
			return ""
		}
		t := scaledBody(e, scale.tree(), newRV)
		if t == nil {
			return ""
		}
		kept = []byte(jsonscan.Marshal(t))
		f, ok := flatten(kept, getNodes())
		if !ok {
			return ""
		}
		body, nodes = &f, f.nodes
	} else if body = resp.flat(); body == nil {
		// Indexed only now that it is diffed or becomes the cached body.
		return ""
	}

	var d *diffResult
	if e.hasBody() && baseSeen {
		if res, ok := diffCached(e, body); ok {
			if s.baseRV == "" {
				res.Base = e.rv
			}
			d = &res
		}
	}
	if kept == nil {
		// The previous body is diffed: its storage (or a gone object's) may take the new one.
		kept, nodes = resp.kept(c.cache.storageFor(e))
	}
	e.lastDiff, e.lastSkipped = d, !baseSeen
	c.cache.setBody(e, kept, nodes)
	e.rv = newRV
	if s.shared != nil {
		s.shared.touch(key)
	}
	if d != nil && isChange {
		putDiff(span, *d, s.endTS)
	}
	return ""
}

// scrub removes from a message (an error's, a policy's) every value redaction masks in the
// event's bodies: a validation error or a webhook's denial may quote the value it refused.
func (c *Converter) scrub(e *eventSpan, s string) string {
	if s == "" {
		return s
	}
	if !e.secretsFound {
		e.secretsFound = true
		e.secrets = c.red.credentials(e.ev, e.redact)
	}
	return scrub(s, e.secrets)
}

// linkConflict links a write refused with 409 Conflict for a stale resourceVersion to the
// write that won the race, when the cache holds it. Callers hold the cache's lock.
func (c *Converter) linkConflict(s *eventSpan, key string) {
	ev := s.ev
	if s.code != http.StatusConflict || s.baseRV == "" || ev.Verb == "create" ||
		(ev.ResponseStatus != nil && ev.ResponseStatus.Reason == "AlreadyExists") {
		return
	}
	e := c.cache.get(key)
	if e == nil || (s.obj.UID != "" && e.uid != "" && e.uid != s.obj.UID) {
		return
	}
	w, ok := e.conflictWinner(s.baseRV)
	if !ok {
		return
	}
	link := s.span.Links().AppendEmpty()
	link.SetTraceID(w.traceID)
	link.SetSpanID(w.spanID)
	la := link.Attributes()
	la.PutStr(model.AttrLinkType, model.LinkTypeConflict)
	la.PutStr(model.AttrAuditID, w.auditIDString())
	putNonEmpty(la, model.AttrObjectNewRV, w.newRVString())
}

// describes reports whether a body is the audited object itself. Subresources answer with
// other kinds (Scale, Binding, Status, Eviction); only the status subresource returns the
// object, and a deletion usually returns a Status.
func (c *Converter) describes(ref *objectReference, m objectMeta) bool {
	if m.Kind == "" || m.Kind == "Status" || strings.HasSuffix(m.Kind, "List") {
		return false
	}
	if group, _ := model.SplitAPIVersion(m.APIVersion); group != ref.APIGroup {
		return false
	}
	if ref.Name != "" && m.Name != "" && ref.Name != m.Name {
		return false
	}
	switch ref.Subresource {
	case "", "status":
		return true
	}
	info, ok := c.mapper.ByResource(ref.APIGroup, ref.Resource)
	return ok && info.Kind == m.Kind
}

// scaledBody applies a Scale's spec.replicas to the object's cached body, so that a scale
// subresource write shows the diff it made (spec.replicas 2 -> 4) on its own span instead of
// on the next write that returns the whole object. It returns nil when there is no cached body
// or the Scale carries no replicas.
func scaledBody(e *cacheEntry, scale jsonscan.Tree, newRV string) jsonscan.Tree {
	replicas, ok := jsonscan.Child(scale, "spec")["replicas"]
	if !ok || !e.hasBody() || (newRV != e.rv && rvOlder(newRV, e.rv)) {
		return nil
	}
	body, ok := e.bodyTree()
	if !ok {
		return nil
	}
	spec := jsonscan.Child(body, "spec")
	if spec == nil {
		spec = jsonscan.Tree{}
		body["spec"] = spec
	}
	spec["replicas"] = replicas
	if md := jsonscan.Child(body, "metadata"); md != nil && newRV != "" {
		md["resourceVersion"] = newRV
	}
	return body
}

// patchPrecondition is the resourceVersion a merge or strategic-merge patch sets as its
// optimistic-concurrency precondition (kubectl patch with metadata.resourceVersion). The
// apiserver does not copy it into objectRef, yet a 409 on such a patch is a lost race like
// any stale update.
func patchPrecondition(raw []byte) string {
	i := jsonscan.SkipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return ""
	}
	rv := ""
	i++
	for first := true; ; first = false {
		key, next, done, err := jsonscan.ObjectNext(raw, i, first)
		if err != nil {
			return ""
		}
		if done {
			return rv
		}
		if string(key) == "metadata" {
			rv = "" // the last metadata counts, as a map keeps it
			i, err = jsonscan.ScanMember(raw, next, 1, "resourceVersion", &rv)
		} else {
			i, err = jsonscan.SkipValue(raw, next, 1)
		}
		if err != nil {
			return ""
		}
	}
}

// stillExists reports whether a deletion's response describes an object that is still there:
// a graceful deletion (deletionGracePeriodSeconds > 0, a Pod's first delete) or one held by
// finalizers (foreground deletion, PVC protection). Otherwise the body is the object's last state.
func stillExists(f *flatBody) bool {
	if f == nil {
		return false
	}
	md := f.member(0, "metadata")
	if md < 0 || f.nodes[md].kind != '{' {
		return false
	}
	if fin := f.member(md, "finalizers"); fin >= 0 && f.nodes[fin].kind == '[' && f.nodes[fin].size > 1 {
		return true
	}
	if g := f.member(md, "deletionGracePeriodSeconds"); g >= 0 && f.nodes[g].kind == '0' {
		n, err := strconv.ParseInt(string(f.raw(g)), 10, 64)
		return err == nil && n > 0
	}
	return false
}
