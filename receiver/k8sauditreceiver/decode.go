package k8sauditreceiver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// The audit.k8s.io/v1 types, reduced to the fields a span needs. Request and response bodies
// stay raw: only updates, patches, creates and deletes at RequestResponse level ever parse
// them, so the Metadata-level hot path builds no maps.
const (
	auditAPIVersion = "audit.k8s.io/v1"
	kindEventList   = "EventList"
	kindEvent       = "Event"
)

type auditEvent struct {
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
}

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

// body is the union of an EventList and a single Event: the outer kind and apiVersion shadow
// the embedded event's, so one decode serves both shapes.
type body struct {
	Kind       string       `json:"kind"`
	APIVersion string       `json:"apiVersion"`
	Items      []auditEvent `json:"items"`
	auditEvent
}

// errWrongKind marks a well-formed JSON body that is not an audit.k8s.io/v1 Event or EventList.
var errWrongKind = errors.New("not an audit.k8s.io/v1 EventList or Event")

// decodeBody decodes a webhook body: an audit.k8s.io/v1 EventList or a single Event. It returns
// errWrongKind (wrapped) for JSON of another kind and a JSON error for anything else.
func decodeBody(data []byte) ([]auditEvent, error) {
	var b body
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("decoding audit body: %w", err)
	}
	if b.APIVersion != auditAPIVersion {
		return nil, fmt.Errorf("%w: apiVersion %q", errWrongKind, b.APIVersion)
	}
	switch b.Kind {
	case kindEventList:
		return b.Items, nil
	case kindEvent:
		return []auditEvent{b.auditEvent}, nil
	default:
		return nil, fmt.Errorf("%w: kind %q", errWrongKind, b.Kind)
	}
}

// decodeLine decodes one audit log line: a single audit.k8s.io/v1 Event.
func decodeLine(line []byte) (auditEvent, error) {
	var b body
	if err := json.Unmarshal(line, &b); err != nil {
		return auditEvent{}, fmt.Errorf("decoding audit log line: %w", err)
	}
	if b.APIVersion != auditAPIVersion || b.Kind != kindEvent {
		return auditEvent{}, fmt.Errorf("%w: %s %q", errWrongKind, b.APIVersion, b.Kind)
	}
	return b.auditEvent, nil
}

// hasBody reports whether a raw body is present: the apiserver leaves it out below
// RequestResponse level, and a null is the same as absent.
func hasBody(raw json.RawMessage) bool {
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null"))
}
