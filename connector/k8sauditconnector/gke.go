package k8sauditconnector

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/kubetrail/kubetrail/internal/auditconv"
)

// gkeEntry is the part of a Cloud Audit Logs LogEntry of GKE's Kubernetes API (service k8s.io)
// that maps onto an audit event; connector/k8sauditconnector/README.md, "GKE", says field by
// field what is carried and what is not.
type gkeEntry struct {
	InsertID  string            `json:"insertId"`
	Timestamp time.Time         `json:"timestamp"`
	Labels    map[string]string `json:"labels"`
	Operation *struct {
		ID    string `json:"id"`
		First bool   `json:"first"`
		Last  bool   `json:"last"`
	} `json:"operation"`
	Resource struct {
		Labels map[string]string `json:"labels"`
	} `json:"resource"`
	ProtoPayload *gkeAuditLog `json:"protoPayload"`
}

// gkeAuditLog is google.cloud.audit.AuditLog as JSON.
type gkeAuditLog struct {
	Type               string `json:"@type"`
	ServiceName        string `json:"serviceName"`
	MethodName         string `json:"methodName"`
	ResourceName       string `json:"resourceName"`
	AuthenticationInfo struct {
		PrincipalEmail string `json:"principalEmail"`
	} `json:"authenticationInfo"`
	RequestMetadata struct {
		CallerIP                string `json:"callerIp"`
		CallerSuppliedUserAgent string `json:"callerSuppliedUserAgent"`
	} `json:"requestMetadata"`
	Status *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"status"`
	Request  json.RawMessage `json:"request"`
	Response json.RawMessage `json:"response"`
}

// nativeEvent is an audit.k8s.io/v1 Event as the apiserver writes it, for the fields a GKE
// entry carries; it is encoded and read by the one conversion like any other event.
type nativeEvent struct {
	Kind                     string            `json:"kind"`
	APIVersion               string            `json:"apiVersion"`
	Level                    string            `json:"level"`
	AuditID                  string            `json:"auditID"`
	Stage                    string            `json:"stage"`
	RequestURI               string            `json:"requestURI"`
	Verb                     string            `json:"verb"`
	User                     nativeUser        `json:"user"`
	SourceIPs                []string          `json:"sourceIPs,omitempty"`
	UserAgent                string            `json:"userAgent,omitempty"`
	ObjectRef                nativeObjectRef   `json:"objectRef"`
	ResponseStatus           nativeStatus      `json:"responseStatus"`
	RequestObject            json.RawMessage   `json:"requestObject,omitempty"`
	ResponseObject           json.RawMessage   `json:"responseObject,omitempty"`
	RequestReceivedTimestamp time.Time         `json:"requestReceivedTimestamp"`
	StageTimestamp           time.Time         `json:"stageTimestamp"`
	Annotations              map[string]string `json:"annotations,omitempty"`
}

type nativeUser struct {
	Username string `json:"username"`
}

type nativeObjectRef struct {
	Resource    string `json:"resource"`
	Namespace   string `json:"namespace,omitempty"`
	Name        string `json:"name,omitempty"`
	APIGroup    string `json:"apiGroup,omitempty"`
	APIVersion  string `json:"apiVersion,omitempty"`
	Subresource string `json:"subresource,omitempty"`
}

type nativeStatus struct {
	Code    int    `json:"code"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// readGKE maps a Cloud Audit Logs entry, or its AuditLog payload alone (a receiver that moved
// the LogEntry's fields to the record), onto an audit event.
func (r *reader) readGKE(doc map[string]json.RawMessage, lr plog.LogRecord) ([]auditconv.Event, string, error) {
	whole, err := json.Marshal(doc)
	if err != nil {
		return nil, "", err
	}
	var entry gkeEntry
	if doc["protoPayload"] != nil {
		if err := json.Unmarshal(whole, &entry); err != nil {
			return nil, "", fmt.Errorf("gke: %w", err)
		}
	} else {
		entry.ProtoPayload = new(gkeAuditLog)
		if err := json.Unmarshal(whole, entry.ProtoPayload); err != nil {
			return nil, "", fmt.Errorf("gke: %w", err)
		}
	}
	ev, err := mapGKE(&entry, lr)
	if err != nil {
		return nil, "", err
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return nil, "", err
	}
	evs, err := r.decode(data)
	return evs, entry.Resource.Labels["cluster_name"], err
}

// mapGKE maps the entry's fields onto an audit event.
func mapGKE(entry *gkeEntry, lr plog.LogRecord) (*nativeEvent, error) {
	p := entry.ProtoPayload
	if p == nil {
		return nil, errors.New("gke: no protoPayload")
	}
	if p.ServiceName != "" && p.ServiceName != "k8s.io" {
		return nil, fmt.Errorf("gke: service %q is not the Kubernetes API (k8s.io)", p.ServiceName)
	}
	verb := p.MethodName[strings.LastIndexByte(p.MethodName, '.')+1:]
	if p.MethodName == "" || verb == "" {
		return nil, errors.New("gke: no methodName")
	}
	ref, err := refOfResourceName(p.ResourceName)
	if err != nil {
		return nil, err
	}
	ev := &nativeEvent{
		Kind: "Event", APIVersion: "audit.k8s.io/v1", Level: "Metadata",
		Stage: "ResponseComplete", Verb: verb, ObjectRef: ref,
		RequestURI:  requestURI(ref),
		User:        nativeUser{Username: p.AuthenticationInfo.PrincipalEmail},
		UserAgent:   p.RequestMetadata.CallerSuppliedUserAgent,
		Annotations: entry.Labels,
	}
	if ip := p.RequestMetadata.CallerIP; ip != "" {
		ev.SourceIPs = []string{ip}
	}
	switch op := entry.Operation; {
	case op != nil && op.ID != "":
		ev.AuditID = op.ID
		if op.First && !op.Last {
			ev.Stage = "RequestReceived" // the entry of a long-running request's start
		}
	case entry.InsertID != "":
		ev.AuditID = entry.InsertID
	default:
		if v, ok := lr.Attributes().Get("log.record.uid"); ok {
			ev.AuditID = v.AsString()
		}
	}
	if ev.AuditID == "" {
		return nil, errors.New("gke: no operation.id, insertId or log.record.uid to serve as auditID")
	}
	ts := entry.Timestamp
	if ts.IsZero() {
		ts = lr.Timestamp().AsTime()
		if lr.Timestamp() == 0 {
			ts = lr.ObservedTimestamp().AsTime()
		}
	}
	// One timestamp: GKE logs the request once, at its end, so the span has no duration.
	ev.RequestReceivedTimestamp, ev.StageTimestamp = ts, ts
	ev.ResponseStatus = nativeStatus{Code: httpCode(p, verb)}
	if p.Status != nil {
		ev.ResponseStatus.Reason, ev.ResponseStatus.Message = rpcReason[p.Status.Code], p.Status.Message
	}
	ev.RequestObject = withoutType(p.Request)
	ev.ResponseObject = withoutType(p.Response)
	if ev.RequestObject != nil || ev.ResponseObject != nil {
		ev.Level = "RequestResponse"
	}
	return ev, nil
}

// refOfResourceName reads an objectRef from an AuditLog resourceName:
// <group>/<version>[/namespaces/<namespace>]/<resource>[/<name>[/<subresource>]], the core
// group written "core".
func refOfResourceName(name string) (nativeObjectRef, error) {
	seg := strings.Split(strings.Trim(name, "/"), "/")
	if len(seg) < 3 || seg[0] == "" || seg[1] == "" {
		return nativeObjectRef{}, fmt.Errorf("gke: resourceName %q is not <group>/<version>/…/<resource>", name)
	}
	ref := nativeObjectRef{APIGroup: seg[0], APIVersion: seg[1]}
	if ref.APIGroup == "core" {
		ref.APIGroup = ""
	}
	rest := seg[2:]
	if len(rest) >= 3 && rest[0] == "namespaces" {
		ref.Namespace, rest = rest[1], rest[2:]
	}
	if len(rest) > 3 {
		return nativeObjectRef{}, fmt.Errorf("gke: resourceName %q has more segments than resource/name/subresource", name)
	}
	ref.Resource = rest[0]
	if len(rest) > 1 {
		ref.Name = rest[1]
	}
	if len(rest) > 2 {
		ref.Subresource = rest[2]
	}
	return ref, nil
}

// requestURI is the path the request was made on, rebuilt from the objectRef (GKE does not
// log it; its query, and so a dry run, is unknown).
func requestURI(ref nativeObjectRef) string {
	var b strings.Builder
	if ref.APIGroup == "" {
		b.WriteString("/api/" + ref.APIVersion)
	} else {
		b.WriteString("/apis/" + ref.APIGroup + "/" + ref.APIVersion)
	}
	if ref.Namespace != "" {
		b.WriteString("/namespaces/" + ref.Namespace)
	}
	b.WriteString("/" + ref.Resource)
	for _, s := range []string{ref.Name, ref.Subresource} {
		if s != "" {
			b.WriteString("/" + s)
		}
	}
	return b.String()
}

// rpcToHTTP maps google.rpc.Code to the HTTP status the apiserver answers for it.
var rpcToHTTP = map[int]int{
	1:  499, // CANCELLED
	2:  http.StatusInternalServerError,
	3:  http.StatusBadRequest,          // INVALID_ARGUMENT
	4:  http.StatusGatewayTimeout,      // DEADLINE_EXCEEDED
	5:  http.StatusNotFound,            // NOT_FOUND
	6:  http.StatusConflict,            // ALREADY_EXISTS
	7:  http.StatusForbidden,           // PERMISSION_DENIED
	8:  http.StatusTooManyRequests,     // RESOURCE_EXHAUSTED
	9:  http.StatusBadRequest,          // FAILED_PRECONDITION
	10: http.StatusConflict,            // ABORTED: a resourceVersion conflict
	11: http.StatusBadRequest,          // OUT_OF_RANGE
	12: http.StatusNotImplemented,      // UNIMPLEMENTED
	13: http.StatusInternalServerError, // INTERNAL
	14: http.StatusServiceUnavailable,  // UNAVAILABLE
	15: http.StatusInternalServerError, // DATA_LOSS
	16: http.StatusUnauthorized,        // UNAUTHENTICATED
}

// rpcReason is the metav1.StatusReason the apiserver gives with the HTTP status a
// google.rpc.Code stands for (an AlreadyExists and a Conflict are both 409; the code tells them
// apart).
var rpcReason = map[int]string{
	3:  "BadRequest",
	4:  "Timeout",
	5:  "NotFound",
	6:  "AlreadyExists",
	7:  "Forbidden",
	8:  "TooManyRequests",
	10: "Conflict",
	13: "InternalError",
	14: "ServiceUnavailable",
	16: "Unauthorized",
}

// httpCode is the response code of the request: the status's code mapped back to HTTP, and
// for success the apiserver's own (201 for a create, 200 otherwise).
func httpCode(p *gkeAuditLog, verb string) int {
	if p.Status != nil && p.Status.Code != 0 {
		if c, ok := rpcToHTTP[p.Status.Code]; ok {
			return c
		}
		return http.StatusInternalServerError
	}
	if verb == "create" {
		return http.StatusCreated
	}
	return http.StatusOK
}

// withoutType is a request or response object without the "@type" member Cloud Logging adds
// to a Struct payload, or nil when there is none.
func withoutType(raw json.RawMessage) json.RawMessage {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return nil
	}
	if _, ok := m["@type"]; !ok {
		return raw
	}
	delete(m, "@type")
	out, err := json.Marshal(m)
	if err != nil {
		return nil
	}
	return out
}
