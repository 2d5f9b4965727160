// Package trail is the engine of `kubetrail trace`: it finds an object's traces in a backend
// (computing the derived trace IDs of its windows, searching by tags when the identity is not
// known), merges the windows into one tree per object and renders that tree as text, JSON or a
// self-contained HTML page. The command in cmd/kubetrail only parses flags and calls it.
package trail

import (
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/kubetrail/kubetrail/internal/model"
)

// Attribute names of the diff span event of an audit span (receiver/k8sauditreceiver).
const (
	attrDiffPaths = "k8s.object.diff.paths"
	attrDiffOld   = "k8s.object.diff.old"
	attrDiffNew   = "k8s.object.diff.new"
	attrDiffCount = "k8s.object.diff.count"
	attrErrCode   = "k8s.audit.error.code"
	attrErrReason = "k8s.audit.error.reason"
	attrErrMsg    = "k8s.audit.error.message"
)

// Span is one span as the tool reads it: the OTLP span flattened, with its resource's cluster
// and kind, and the kubetrail attributes it needs parsed once.
type Span struct {
	TraceID  pcommon.TraceID
	SpanID   pcommon.SpanID
	ParentID pcommon.SpanID
	Name     string
	Start    time.Time
	End      time.Time
	// Attrs holds the span's attributes as plain values (string, bool, int64, float64, []any,
	// map[string]any), for the JSON output and the HTML page.
	Attrs  map[string]any
	Events []Event
	Links  []Link
	// Error is true for an error status; StatusMessage is the status message.
	Error         bool
	StatusMessage string

	Type string // model.SpanType*: object, audit, event, controller ("" for foreign spans)
	// Cluster is the resource's k8s.cluster.name; a controller span's own (its Resource is the
	// controller's).
	Cluster string
	Object  model.Object
	// Resource holds the resource's attributes (the object's identity) as plain values; Schema
	// is the resource's schema URL, which names the span model (model.SchemaURL).
	Resource map[string]any
	Schema   string
	// Parts are, for another component's span placed under an object's span (the kubelet's
	// syncPod: k8s_object_link's doors.identity), the spans under it in its trace (the CRI
	// calls), in time order: the tree shows them through it (Detail), not as activities of
	// their own.
	Parts []*Span
}

// Event is one span event.
type Event struct {
	Name  string
	Time  time.Time
	Attrs map[string]any
}

// Link is one span link.
type Link struct {
	TraceID pcommon.TraceID
	SpanID  pcommon.SpanID
	Type    string // kubetrail.link.type
	Attrs   map[string]any
}

// Change is one field change of an audit span's diff event.
type Change struct {
	Path string `json:"path"`
	Old  string `json:"old"`
	New  string `json:"new"`
}

// Unreadable counts the kubetrail spans a source left out because their span model is not one
// this tool reads (model.CheckSchema); Err says why, for the first of them.
type Unreadable struct {
	Spans int
	Err   error
}

// readable returns the spans of spans this tool can read: foreign spans (no kubetrail span
// type) and kubetrail spans of the span model's major version. The others are counted in u.
// Some backends drop schema URLs (Jaeger 1.76's query API returns none): a span without
// one is read when its identity is on its Resource, where only span model 1.0 and later put
// it; before 1.0 the identity was on every span.
func readable(spans []*Span, u *Unreadable) []*Span {
	out := spans[:0]
	for _, s := range spans {
		if s.Type == model.SpanTypeController || s.Type == model.SpanTypeLinked {
			// Its Resource, and the schema URL on it, are the controller's own (a linked span's
			// is the linking component's, and a backend may drop the URL): the span type (span
			// model 1.2, 1.3 and later) tells the span is kubetrail's.
			out = append(out, s)
			continue
		}
		if s.Type != "" {
			if s.Schema == "" && !identityOnSpan(s) && s.Resource[model.AttrObjectKind] != nil {
				out = append(out, s)
				continue
			}
			if err := model.CheckSchema(s.Schema); err != nil {
				if u.Spans == 0 {
					u.Err = err
				}
				u.Spans++
				continue
			}
		}
		out = append(out, s)
	}
	return out
}

// identityOnSpan reports whether the span carries its object's kind or name itself, as spans
// before span model 1.0 did.
func identityOnSpan(s *Span) bool {
	return s.Attrs[model.AttrObjectKind] != nil || s.Attrs[model.AttrObjectName] != nil
}

// SpansFromTraces flattens td.
func SpansFromTraces(td ptrace.Traces) []*Span {
	var out []*Span
	for _, rs := range td.ResourceSpans().All() {
		res := rs.Resource().Attributes()
		cluster := strAttr(res, model.AttrClusterName)
		resRaw := res.AsRaw()
		for _, ss := range rs.ScopeSpans().All() {
			for _, s := range ss.Spans().All() {
				sp := &Span{
					TraceID:       s.TraceID(),
					SpanID:        s.SpanID(),
					ParentID:      s.ParentSpanID(),
					Name:          s.Name(),
					Start:         s.StartTimestamp().AsTime().UTC(),
					End:           s.EndTimestamp().AsTime().UTC(),
					Attrs:         s.Attributes().AsRaw(),
					Error:         s.Status().Code() == ptrace.StatusCodeError,
					StatusMessage: s.Status().Message(),
					Type:          strAttr(s.Attributes(), model.AttrSpanType),
					Cluster:       cluster,
					Resource:      resRaw,
					Schema:        rs.SchemaUrl(),
				}
				if sp.Type == model.SpanTypeController {
					// The identity is on the span: the Resource is the controller's.
					if o, ok := model.ObjectFromAttributes(s.Attributes(), s.Attributes()); ok {
						sp.Object = o
					}
					if c := strAttr(s.Attributes(), model.AttrClusterName); c != "" {
						sp.Cluster = c
					}
				} else if o, ok := model.ObjectFromAttributes(res, s.Attributes()); ok {
					sp.Object = o
				}
				for _, e := range s.Events().All() {
					sp.Events = append(sp.Events, Event{Name: e.Name(), Time: e.Timestamp().AsTime().UTC(), Attrs: e.Attributes().AsRaw()})
				}
				for _, l := range s.Links().All() {
					sp.Links = append(sp.Links, Link{TraceID: l.TraceID(), SpanID: l.SpanID(), Type: strAttr(l.Attributes(), model.AttrLinkType), Attrs: l.Attributes().AsRaw()})
				}
				out = append(out, sp)
			}
		}
	}
	return out
}

func strAttr(m pcommon.Map, key string) string {
	if v, ok := m.Get(key); ok {
		return v.AsString()
	}
	return ""
}

// Str returns a string attribute of the span, or of its resource when the span has none ("" when
// absent).
func (s *Span) Str(key string) string {
	v, ok := s.Attrs[key]
	if !ok {
		v = s.Resource[key]
	}
	switch v := v.(type) {
	case string:
		return v
	case nil:
		return ""
	case int64:
		return strconv.FormatInt(v, 10)
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

// IsObject reports whether s is an object span.
func (s *Span) IsObject() bool { return s.Type == model.SpanTypeObject }

// IsComponent reports whether s is another component's span (no kubetrail.span.type): the
// kubelet's syncPod and its CRI calls, placed in an object's trace by k8s_object_link.
func (s *Span) IsComponent() bool { return s.Type == "" }

// Detail says what took longest under a component's span: "PullImage 1.77s" (the last part of
// a gRPC method's name); "" without parts.
func (s *Span) Detail() string {
	var longest *Span
	for _, p := range s.Parts {
		if longest == nil || p.Duration() > longest.Duration() {
			longest = p
		}
	}
	if longest == nil {
		return ""
	}
	name := longest.Name
	if i := strings.LastIndexByte(name, '/'); i >= 0 && i < len(name)-1 {
		name = name[i+1:]
	}
	return name + " " + FormatDuration(longest.Duration())
}

// Duration is the span's length.
func (s *Span) Duration() time.Duration { return s.End.Sub(s.Start) }

// IsController reports whether s is a controller's span of work on its object.
func (s *Span) IsController() bool { return s.Type == model.SpanTypeController }

// PlacedIn is, for an object span in an object's derived trace that points to the trace its
// window was placed in (a trace context the object carried), that trace's ID.
func (s *Span) PlacedIn() (pcommon.TraceID, bool) {
	var id pcommon.TraceID
	h, _ := s.Attrs[model.AttrTracePlacedIn].(string)
	if !s.IsObject() || len(h) != 2*len(id) {
		return id, false
	}
	if _, err := hex.Decode(id[:], []byte(h)); err != nil || id.IsEmpty() {
		return pcommon.TraceID{}, false
	}
	return id, true
}

// Verb is the audit verb, "event" for an event span, the span's name for a controller span
// ("reconcile").
func (s *Span) Verb() string {
	switch s.Type {
	case model.SpanTypeEvent:
		return "event"
	case model.SpanTypeController, model.SpanTypeLinked, "":
		return s.Name
	}
	v := s.Str(model.AttrAuditVerb)
	if sub := s.Str(model.AttrAuditSubresource); sub != "" {
		v += " " + sub
	}
	return v
}

// IsWrite reports whether s is an audit span of a write verb.
func (s *Span) IsWrite() bool {
	switch s.Str(model.AttrAuditVerb) {
	case "create", "update", "patch", "delete", "deletecollection":
		return s.Type == model.SpanTypeAudit
	}
	return false
}

// Actor is who acted: a controller or user name for audit spans, the reporting controller for
// events, the controller (kubetrail.controller.name, else its service.name) for controller
// spans. Service account and node user names are shortened to what an operator calls them.
func (s *Span) Actor() string {
	if s.Type == model.SpanTypeController {
		if c, _ := s.Attrs[model.AttrControllerName].(string); c != "" {
			return c
		}
		if c, _ := s.Resource[model.AttrServiceName].(string); c != "" {
			return c
		}
		return "?"
	}
	if s.Type == model.SpanTypeEvent {
		if c := s.Str(model.AttrEventReportingCtrl); c != "" {
			return c
		}
		return "?" // an Event without a reporting controller (deprecated core/v1 writers)
	}
	if s.IsComponent() || s.Type == model.SpanTypeLinked {
		// The component as its Resource names it; a kubelet as the audit log names it.
		svc, _ := s.Resource[model.AttrServiceName].(string)
		if host, _ := s.Resource["host.name"].(string); svc == "kubelet" && host != "" {
			return "kubelet/" + host
		}
		if svc == "" {
			return "?"
		}
		return svc
	}
	return model.ShortUser(s.Str(model.AttrUserName))
}

// IsUser reports whether the actor is a person or an outside client rather than a component of
// the control plane (whose user names all start with "system:").
func (s *Span) IsUser() bool {
	u := s.Str(model.AttrUserName)
	return s.Type == model.SpanTypeAudit && u != "" && !strings.HasPrefix(u, "system:")
}

// Result is the outcome: the HTTP status code (with the error reason) of an audit span, the
// event type and reason of an event span.
func (s *Span) Result() string {
	if s.Type == model.SpanTypeEvent {
		return s.Str(model.AttrEventType) + " " + s.Str(model.AttrEventReason)
	}
	r := s.Str(model.AttrHTTPStatusCode)
	for _, e := range s.Events {
		if e.Name == model.EventAuditError {
			if reason, _ := e.Attrs[attrErrReason].(string); reason != "" {
				r += " " + reason
			}
		}
	}
	return r
}

// IsConflict reports whether s is a write refused with 409 Conflict.
func (s *Span) IsConflict() bool {
	return s.Str(model.AttrHTTPStatusCode) == "409"
}

// Failed reports whether s is an error: an error status, an audit error, or a Warning event.
func (s *Span) Failed() bool {
	if s.Error {
		return true
	}
	if s.Type == model.SpanTypeEvent {
		return s.Str(model.AttrEventType) == "Warning"
	}
	for _, e := range s.Events {
		if e.Name == model.EventAuditError {
			return true
		}
	}
	return false
}

// ErrorMessage is the audit error's message or the status message.
func (s *Span) ErrorMessage() string {
	for _, e := range s.Events {
		if e.Name == model.EventAuditError {
			if m, _ := e.Attrs[attrErrMsg].(string); m != "" {
				return m
			}
		}
	}
	if s.Type == model.SpanTypeEvent && s.Failed() {
		return s.Str(model.AttrEventNote)
	}
	return s.StatusMessage
}

// Diff returns the field changes of the span's diff events and the total count of changed
// paths (more than len(changes) when the receiver cut the list). A refused write's diff is
// what it tried, not a change: Attempted returns it.
func (s *Span) Diff() (changes []Change, total int) { return s.diff(false) }

// Attempted returns what a refused write tried (span model 1.3): the diff event marked
// k8s.object.diff.attempted, as Diff returns a change.
func (s *Span) Attempted() (changes []Change, total int) { return s.diff(true) }

// IsAttempted reports whether a diff event is a refused write's.
func IsAttempted(e Event) bool {
	v, _ := e.Attrs[model.AttrDiffAttempted].(bool)
	return v
}

func (s *Span) diff(attempted bool) (changes []Change, total int) {
	for _, e := range s.Events {
		if e.Name != model.EventObjectDiff || IsAttempted(e) != attempted {
			continue
		}
		paths, _ := e.Attrs[attrDiffPaths].([]any)
		olds, _ := e.Attrs[attrDiffOld].([]any)
		news, _ := e.Attrs[attrDiffNew].([]any)
		for i, p := range paths {
			c := Change{Path: asString(p)}
			if i < len(olds) {
				c.Old = asString(olds[i])
			}
			if i < len(news) {
				c.New = asString(news[i])
			}
			changes = append(changes, c)
		}
		switch n := e.Attrs[attrDiffCount].(type) {
		case int64:
			total += int(n)
		default:
			total += len(paths)
		}
	}
	return changes, total
}

func asString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}
