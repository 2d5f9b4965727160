package auditconv

import (
	"bytes"
	"encoding/json"
	"time"
)

// The audit.k8s.io/v1 types, reduced to the fields a span needs. Request and response bodies
// stay raw: only updates, patches, creates and deletes at RequestResponse level ever parse
// them, so the Metadata-level hot path builds no maps.

// Event is an audit.k8s.io/v1 Event as the conversion reads it: the members a span needs,
// decoded in one pass, and the request and response bodies as slices of the document.
type Event struct {
	Level                    string           `json:"level"`
	AuditID                  string           `json:"auditID"`
	Stage                    string           `json:"stage"`
	RequestURI               string           `json:"requestURI"`
	Verb                     string           `json:"verb"`
	User                     userInfo         `json:"user"`
	ImpersonatedUser         *userInfo        `json:"impersonatedUser"`
	SourceIPs                []string         `json:"sourceIPs"`
	UserAgent                string           `json:"userAgent"`
	ObjectRef                *objectReference `json:"objectRef"`
	ResponseStatus           *status          `json:"responseStatus"`
	RequestObject            json.RawMessage  `json:"requestObject"`
	ResponseObject           json.RawMessage  `json:"responseObject"`
	RequestReceivedTimestamp time.Time        `json:"requestReceivedTimestamp"`
	StageTimestamp           time.Time        `json:"stageTimestamp"`

	// Annotations are the event's annotations (authorization decision, admission webhooks,
	// Pod Security, latency breakdown), in the order the apiserver wrote them.
	Annotations []annotation `json:"-"`

	// Invalid says why a well-formed item is not a valid event (a field of the wrong type, a
	// malformed timestamp); the converter refuses such an event alone.
	Invalid string `json:"-"`

	// respIndex is ResponseObject indexed while it was decoded (webhook batches, for a completed
	// write whose verb, stage and objectRef came first, as the apiserver writes them), in nodes
	// from nodePool: the converter takes it (takeResponseIndex) or putEvents returns it.
	respIndex flatBody

	// delimited says which of RequestObject and ResponseObject were delimited, not validated,
	// because the converter's filters were to drop the event (see jsonscan.DelimitValue).
	delimited bodySet

	// spare holds storage an earlier batch's event left for the next one in its place (see
	// reset): the decoder fills it instead of allocating.
	spare *eventStorage
}

// eventStorage is what an event allocates besides its strings.
type eventStorage struct {
	ref objectReference
	st  status
}

// reset empties the event for reuse by a later batch: nothing of it stays readable, but its
// lists keep their (cleared) backing arrays and its objectRef and responseStatus their
// (zeroed) memory, so the next event decoded in its place allocates none of them.
func (ev *Event) reset() {
	groups, ips, ann := ev.User.Groups[:0], ev.SourceIPs[:0], ev.Annotations[:0]
	clear(groups[:cap(groups)])
	clear(ips[:cap(ips)])
	clear(ann[:cap(ann)])
	spare := ev.spare
	if spare != nil {
		*spare = eventStorage{}
	}
	*ev = Event{spare: spare}
	ev.User.Groups, ev.SourceIPs, ev.Annotations = groups, ips, ann
}

// storage returns the event's spare storage, allocated on first use.
func (ev *Event) storage() *eventStorage {
	if ev.spare == nil {
		ev.spare = &eventStorage{}
	}
	return ev.spare
}

// bodySet is a set of an event's bodies.
type bodySet uint8

const (
	requestBody bodySet = 1 << iota
	responseBody
)

// takeResponseIndex hands the index of ResponseObject over to the caller, who returns its nodes
// to nodePool; ok is false when the body was not indexed while decoding.
func (ev *Event) takeResponseIndex() (flatBody, bool) {
	f := ev.respIndex
	ev.respIndex = flatBody{}
	return f, f.nodes != nil
}

type annotation struct{ Key, Value string }

type userInfo struct {
	Username string   `json:"username"`
	Groups   []string `json:"groups"`
}

type objectReference struct {
	Resource        string `json:"resource"`
	Namespace       string `json:"namespace"`
	Name            string `json:"name"`
	UID             string `json:"uid"`
	APIGroup        string `json:"apiGroup"`
	APIVersion      string `json:"apiVersion"`
	ResourceVersion string `json:"resourceVersion"`
	Subresource     string `json:"subresource"`
}

// status is metav1.Status as the audit event's responseStatus carries it.
type status struct {
	Code    int            `json:"code"`
	Status  string         `json:"status"`
	Message string         `json:"message"`
	Reason  string         `json:"reason"`
	Details *statusDetails `json:"details"`
}

type statusDetails struct {
	Causes []statusCause `json:"causes"`
}

type statusCause struct {
	Type    string `json:"reason"`
	Message string `json:"message"`
	Field   string `json:"field"`
}

// invalidate marks the event as not decodable, keeping the first reason.
func (ev *Event) invalidate(field, problem string) {
	if ev.Invalid == "" {
		ev.Invalid = field + ": " + problem
	}
}

// hasBody reports whether a raw body is present: the apiserver leaves it out below
// RequestResponse level, and a null is the same as absent.
func hasBody(raw json.RawMessage) bool {
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null"))
}
