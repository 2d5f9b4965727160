package k8sauditconnector

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
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
	Operation *gkeOperation     `json:"operation"`
	Resource  struct {
		Labels map[string]string `json:"labels"`
	} `json:"resource"`
	ProtoPayload *gkeAuditLog `json:"protoPayload"`
}

// gkeOperation is a LogEntry's operation: GKE's id is the apiserver's audit ID.
type gkeOperation struct {
	ID    string `json:"id"`
	First bool   `json:"first"`
	Last  bool   `json:"last"`
}

// gkeStatus is an AuditLog's google.rpc.Status.
type gkeStatus struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
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
	Status   *gkeStatus      `json:"status"`
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
	ObjectRef                *nativeObjectRef  `json:"objectRef,omitempty"`
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
	d, err := r.readGKEEntry(&entry, lr)
	return d.events, d.cluster, err
}

// readGKEEntry maps an entry, however it arrived, onto an audit event and decodes it.
func (r *reader) readGKEEntry(entry *gkeEntry, lr plog.LogRecord) (decoded, error) {
	d := decoded{format: formatGKE, cluster: entry.Resource.Labels["cluster_name"]}
	ev, err := mapGKE(entry, lr)
	if err != nil {
		return d, err
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return d, err
	}
	d.events, err = r.decode(data)
	return d, err
}

// The attributes of the googlecloudlogentry_encoding extension's audit-log records
// (extension/encoding/googlecloudlogentryencodingextension: log_entry.go, internal/auditlog)
// and of googlecloudpubsub's cloud_logging encoding (v0.131 and before).
const (
	attrGCPService       = "gcp.audit.service.name"
	attrGCPMethod        = "gcp.audit.method.name"
	attrGCPResourceName  = "gcp.audit.resource.name"
	attrGCPOperation     = "gcp.operation" // .id, .first, .last; cloud_logging: a map
	attrGCPLabelPrefix   = "gcp.label."    // the entry's labels, and its resource's
	attrLogRecordUID     = "log.record.uid"
	attrUserEmail        = "user.email"
	attrClientAddress    = "client.address"
	attrUserAgent        = "user_agent.original"
	attrRPCErrorCode     = "rpc.jsonrpc.error_code"
	attrRPCErrorMessage  = "rpc.jsonrpc.error_message"
	attrRPCStatusCode    = "rpc.response.status_code" // the extension's newer name of the status code
	attrGCPClusterLegacy = "gcp.cluster_name"         // cloud_logging's resource label
)

// gkeEntryOfAttributes is the entry the googlecloudlogentry_encoding extension spread over a
// record's attributes and its resource's (the body is empty; request and response are not
// carried, so there is no diff and no snapshot).
func gkeEntryOfAttributes(lr plog.LogRecord, res pcommon.Map) *gkeEntry {
	attrs := lr.Attributes()
	str := func(k string) string {
		if v, ok := attrs.Get(k); ok {
			return v.AsString()
		}
		return ""
	}
	entry := &gkeEntry{InsertID: str(attrLogRecordUID), ProtoPayload: &gkeAuditLog{
		ServiceName: str(attrGCPService), MethodName: str(attrGCPMethod), ResourceName: str(attrGCPResourceName),
	}}
	p := entry.ProtoPayload
	p.AuthenticationInfo.PrincipalEmail = str(attrUserEmail)
	p.RequestMetadata.CallerIP = str(attrClientAddress)
	p.RequestMetadata.CallerSuppliedUserAgent = str(attrUserAgent)
	for _, k := range []string{attrRPCStatusCode, attrRPCErrorCode} {
		if code, ok := intAttr(attrs, k); ok {
			p.Status = &gkeStatus{Code: code, Message: str(attrRPCErrorMessage)}
			break
		}
	}
	if id := str(attrGCPOperation + ".id"); id != "" {
		entry.Operation = &gkeOperation{ID: id, First: boolAttr(attrs, attrGCPOperation+".first"), Last: boolAttr(attrs, attrGCPOperation+".last")}
	}
	for k, v := range attrs.All() {
		if label, ok := strings.CutPrefix(k, attrGCPLabelPrefix); ok {
			if entry.Labels == nil {
				entry.Labels = map[string]string{}
			}
			entry.Labels[annotationKey(label)] = v.AsString()
		}
	}
	if v, ok := res.Get(attrGCPLabelPrefix + "cluster_name"); ok {
		entry.Resource.Labels = map[string]string{"cluster_name": v.AsString()}
	}
	if lr.Timestamp() != 0 {
		entry.Timestamp = lr.Timestamp().AsTime()
	}
	return entry
}

// isAuditLogMap reports whether a map body is a google.cloud.audit.AuditLog of the Kubernetes
// API, as googlecloudpubsub's cloud_logging encoding (v0.131 and before) left the protoPayload.
func isAuditLogMap(m pcommon.Map) bool {
	if t, ok := m.Get("@type"); ok && strings.HasSuffix(t.AsString(), "google.cloud.audit.AuditLog") {
		return true
	}
	service, ok := m.Get("serviceName")
	_, method := m.Get("methodName")
	return ok && method && service.AsString() == "k8s.io"
}

// gkeEntryOfPayloadMap is the entry of a record whose body is the AuditLog (the cloud_logging
// encoding): insertId in log.record.uid, the operation in the map attribute gcp.operation, the
// entry's labels as attributes under their own keys, the cluster in the resource's
// gcp.cluster_name.
func gkeEntryOfPayloadMap(lr plog.LogRecord, m pcommon.Map, res pcommon.Map) (*gkeEntry, error) {
	raw, err := json.Marshal(m.AsRaw())
	if err != nil {
		return nil, fmt.Errorf("gke: %w", err)
	}
	entry := &gkeEntry{ProtoPayload: new(gkeAuditLog)}
	if err := json.Unmarshal(raw, entry.ProtoPayload); err != nil {
		return nil, fmt.Errorf("gke: %w", err)
	}
	for k, v := range lr.Attributes().All() {
		switch {
		case k == attrLogRecordUID:
			entry.InsertID = v.AsString()
		case k == attrGCPOperation && v.Type() == pcommon.ValueTypeMap:
			op := v.Map()
			entry.Operation = &gkeOperation{First: boolAttr(op, "first"), Last: boolAttr(op, "last")}
			if id, ok := op.Get("id"); ok {
				entry.Operation.ID = id.AsString()
			}
		case strings.HasPrefix(k, "gcp."):
		default:
			if entry.Labels == nil {
				entry.Labels = map[string]string{}
			}
			entry.Labels[k] = v.AsString()
		}
	}
	if v, ok := res.Get(attrGCPClusterLegacy); ok {
		entry.Resource.Labels = map[string]string{"cluster_name": v.AsString()}
	}
	if lr.Timestamp() != 0 {
		entry.Timestamp = lr.Timestamp().AsTime()
	}
	return entry, nil
}

// intAttr is an attribute's integer value (an int, a whole double or a decimal string).
func intAttr(m pcommon.Map, k string) (int, bool) {
	v, ok := m.Get(k)
	if !ok {
		return 0, false
	}
	switch v.Type() {
	case pcommon.ValueTypeInt:
		return int(v.Int()), true
	case pcommon.ValueTypeDouble:
		return int(v.Double()), v.Double() == math.Trunc(v.Double()) && math.Abs(v.Double()) < 1<<31
	case pcommon.ValueTypeStr:
		n, err := strconv.Atoi(v.Str())
		return n, err == nil
	default:
		return 0, false
	}
}

func boolAttr(m pcommon.Map, k string) bool {
	v, ok := m.Get(k)
	return ok && v.Type() == pcommon.ValueTypeBool && v.Bool()
}

// annotationKey is the audit annotation key of a label as the googlecloudlogentry extension
// wrote it (in snake case: `-` as `_`; before its 2026-03 fix `k8s` as `k8_s`; a digit's
// underscore before a letter dropped), for the annotations the conversion reads; any other
// label keeps the extension's key.
func annotationKey(label string) string {
	label = strings.ReplaceAll(label, "k8_s.", "k8s.")
	prefix, name, ok := strings.Cut(label, "/")
	if !ok {
		return label
	}
	switch prefix {
	case "pod_security.kubernetes.io", "pod-security.kubernetes.io":
		return "pod-security.kubernetes.io/" + strings.ReplaceAll(name, "_", "-")
	case "apiserver.latency.k8s.io":
		return prefix + "/" + strings.ReplaceAll(name, "_", "-")
	case "mutation.webhook.admission.k8s.io", "patch.webhook.admission.k8s.io":
		if m := admissionRound.FindStringSubmatch(name); m != nil {
			return prefix + "/round_" + m[1] + "_index_" + m[2]
		}
	}
	return label
}

// admissionRound reads round_<r>_index_<i> in each of the extension's spellings.
var admissionRound = regexp.MustCompile(`^round_?(\d+)_?index_?(\d+)$`)

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
	ev := &nativeEvent{
		Kind: "Event", APIVersion: "audit.k8s.io/v1", Level: "Metadata",
		Stage: "ResponseComplete", Verb: verb,
		User:        nativeUser{Username: p.AuthenticationInfo.PrincipalEmail},
		UserAgent:   p.RequestMetadata.CallerSuppliedUserAgent,
		Annotations: entry.Labels,
	}
	if isNonResource(p.MethodName) {
		// io.k8s.<verb> on a path (readyz, api/v1, openapi/v2): no object, as the apiserver
		// logs a non-resource request; the conversion files it as filtered{non_resource}.
		uri, err := nonResourcePath(p.ResourceName)
		if err != nil {
			return nil, err
		}
		ev.RequestURI = uri
	} else {
		ref, err := refOfResourceName(p.ResourceName)
		if err != nil {
			return nil, err
		}
		ev.ObjectRef, ev.RequestURI = &ref, requestURI(ref)
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

// isNonResource reports whether a methodName is of a non-resource request: io.k8s.<verb>, with
// no group, version and resource between.
func isNonResource(method string) bool { return strings.Count(method, ".") <= 2 }

// nonResourcePath is the request path of a non-resource request's resourceName (readyz,
// api/v1, openapi/v2).
func nonResourcePath(name string) (string, error) {
	if _, err := segments(name); err != nil {
		return "", err
	}
	return "/" + strings.Trim(name, "/"), nil
}

// segments splits a resourceName at '/', refusing an empty, '.' or '..' segment (the apiserver
// routes no such path; a name built of them would be a garbage identity).
func segments(name string) ([]string, error) {
	if name == "" {
		return nil, errors.New("gke: empty resourceName")
	}
	seg := strings.Split(name, "/")
	for _, s := range seg {
		if s == "" || s == "." || s == ".." {
			return nil, fmt.Errorf("gke: resourceName %q has an empty, '.' or '..' segment", name)
		}
	}
	return seg, nil
}

// namespaceSubresources are the subresources of a Namespace, which GKE writes as
// core/v1/namespaces/<name>/<subresource>, the shape of a list of <subresource> in namespace
// <name>.
var namespaceSubresources = map[string]bool{"finalize": true, "status": true}

// refOfResourceName reads an objectRef from an AuditLog resourceName:
// <group>/<version>[/namespaces/<namespace>]/<resource>[/<name>[/<subresource>[/<path>]]], the
// core group written "core", as the apiserver's objectRef names the request: a Namespace's
// finalize and status are subresources of the Namespace, and a proxy subresource's path is not
// part of the object. A resource must be a lower-case plural as the apiserver serves it.
func refOfResourceName(name string) (nativeObjectRef, error) {
	seg, err := segments(name)
	if err != nil {
		return nativeObjectRef{}, err
	}
	if len(seg) < 3 {
		return nativeObjectRef{}, fmt.Errorf("gke: resourceName %q is not <group>/<version>/…/<resource>", name)
	}
	ref := nativeObjectRef{APIGroup: seg[0], APIVersion: seg[1]}
	if ref.APIGroup == "core" {
		ref.APIGroup = ""
	}
	rest := seg[2:]
	switch {
	case len(rest) == 3 && rest[0] == "namespaces" && namespaceSubresources[rest[2]] && ref.APIGroup == "":
		ref.Resource, ref.Name, ref.Subresource = rest[0], rest[1], rest[2]
		return ref, nil
	case len(rest) >= 3 && rest[0] == "namespaces":
		ref.Namespace, rest = rest[1], rest[2:]
	}
	if len(rest) > 3 && rest[2] != "proxy" {
		return nativeObjectRef{}, fmt.Errorf("gke: resourceName %q has more segments than resource/name/subresource", name)
	}
	ref.Resource = rest[0]
	if !auditconv.ValidResource(ref.Resource) {
		return nativeObjectRef{}, fmt.Errorf("gke: resourceName %q: %q is not a resource (a lower-case plural)", name, ref.Resource)
	}
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
