// Package envelopetest wraps recorded apiserver audit events in the envelopes managed clusters'
// log services deliver them in, following the providers' published schemas, so that the
// k8s_audit connector is tested on the testbed's real captures:
//
//   - CloudWatch Logs (EKS): each log event's message is one audit.k8s.io/v1 Event as JSON, in
//     log group /aws/eks/<cluster>/cluster, stream kube-apiserver-audit-<id>; a subscription
//     filter delivers them to Firehose as gzip'd CWL payloads (Firehose below).
//   - Azure Monitor diagnostic settings (AKS, categories kube-audit and kube-audit-admin): an
//     Event Hub message is {"records":[…]}, each record with time, resourceId, category,
//     operationName and properties.log, the Event as JSON text.
//   - Cloud Audit Logs (GKE): a LogEntry whose protoPayload is a google.cloud.audit.AuditLog
//     (serviceName k8s.io, methodName io.k8s.<group>.<version>.<resource>[.<subresource>].<verb>,
//     resourceName <group>/<version>/[namespaces/<ns>/]<resource>/<name>[/<subresource>]),
//     operation.id the auditID, labels the audit annotations, resource.labels.cluster_name.
package envelopetest

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Event is the part of an audit event the envelopes need.
type Event struct {
	AuditID    string `json:"auditID"`
	Stage      string `json:"stage"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	SourceIPs []string `json:"sourceIPs"`
	UserAgent string   `json:"userAgent"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		APIGroup    string `json:"apiGroup"`
		APIVersion  string `json:"apiVersion"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"responseStatus"`
	RequestObject            json.RawMessage   `json:"requestObject"`
	ResponseObject           json.RawMessage   `json:"responseObject"`
	RequestReceivedTimestamp time.Time         `json:"requestReceivedTimestamp"`
	StageTimestamp           time.Time         `json:"stageTimestamp"`
	Annotations              map[string]string `json:"annotations"`
}

// Items splits a webhook body (an EventList) into its events' JSON as the apiserver's log
// backend writes each one (the lines of --audit-log-path, what EKS and AKS ship): the item
// with the Event's kind and apiVersion first.
func Items(body []byte) ([]json.RawMessage, error) {
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, err
	}
	for i, item := range list.Items {
		item = bytes.TrimSpace(item)
		if len(item) < 2 || item[0] != '{' {
			return nil, fmt.Errorf("item %d is not an object", i)
		}
		list.Items[i] = append([]byte(`{"kind":"Event","apiVersion":"audit.k8s.io/v1",`), item[1:]...)
	}
	return list.Items, nil
}

// AKS is an Event Hub message of AKS diagnostic records, one per event.
func AKS(cluster string, events []json.RawMessage) ([]byte, error) {
	type record struct {
		Time          string `json:"time"`
		ResourceID    string `json:"resourceId"`
		Category      string `json:"category"`
		OperationName string `json:"operationName"`
		Properties    struct {
			Log    string `json:"log"`
			Stream string `json:"stream"`
			Pod    string `json:"pod"`
		} `json:"properties"`
	}
	var out struct {
		Records []record `json:"records"`
	}
	for _, raw := range events {
		var ev Event
		if err := json.Unmarshal(raw, &ev); err != nil {
			return nil, err
		}
		r := record{
			Time:          ev.StageTimestamp.Format(time.RFC3339Nano),
			ResourceID:    "/SUBSCRIPTIONS/0000/RESOURCEGROUPS/RG/PROVIDERS/MICROSOFT.CONTAINERSERVICE/MANAGEDCLUSTERS/" + cluster,
			Category:      "kube-audit",
			OperationName: "Microsoft.ContainerService/managedClusters/diagnosticLogs/Read",
		}
		r.Properties.Log, r.Properties.Stream, r.Properties.Pod = string(raw), "stdout", "kube-apiserver-0"
		out.Records = append(out.Records, r)
	}
	return json.Marshal(out)
}

// GKE is the Cloud Audit Logs entry of one event.
func GKE(cluster string, raw json.RawMessage) ([]byte, error) {
	var ev Event
	if err := json.Unmarshal(raw, &ev); err != nil {
		return nil, err
	}
	if ev.ObjectRef == nil {
		return nil, fmt.Errorf("event %s has no objectRef: GKE logs resource requests only", ev.AuditID)
	}
	ref := ev.ObjectRef
	group := ref.APIGroup
	if group == "" {
		group = "core"
	}
	method := []string{"io", "k8s", strings.ReplaceAll(strings.TrimSuffix(group, ".k8s.io"), ".", "_"), ref.APIVersion, ref.Resource}
	name := []string{group, ref.APIVersion}
	if ref.Namespace != "" {
		name = append(name, "namespaces", ref.Namespace)
	}
	name = append(name, ref.Resource)
	if ref.Name != "" {
		name = append(name, ref.Name)
	}
	if ref.Subresource != "" {
		method = append(method, ref.Subresource)
		name = append(name, ref.Subresource)
	}
	method = append(method, ev.Verb)
	payload := map[string]any{
		"@type":              "type.googleapis.com/google.cloud.audit.AuditLog",
		"serviceName":        "k8s.io",
		"methodName":         strings.Join(method, "."),
		"resourceName":       strings.Join(name, "/"),
		"authenticationInfo": map[string]any{"principalEmail": ev.User.Username},
		"requestMetadata":    map[string]any{"callerSuppliedUserAgent": ev.UserAgent},
	}
	if len(ev.SourceIPs) > 0 {
		payload["requestMetadata"].(map[string]any)["callerIp"] = ev.SourceIPs[0]
	}
	if st := ev.ResponseStatus; st != nil && st.Code >= 400 {
		payload["status"] = map[string]any{"code": rpcCode(st.Code), "message": st.Message}
	}
	for key, body := range map[string]json.RawMessage{"request": ev.RequestObject, "response": ev.ResponseObject} {
		if len(body) > 0 && body[0] == '{' {
			var m map[string]any
			if err := json.Unmarshal(body, &m); err != nil {
				return nil, err
			}
			m["@type"] = "k8s.io/Object"
			payload[key] = m
		}
	}
	entry := map[string]any{
		"insertId":         ev.AuditID[:8],
		"logName":          "projects/p/logs/cloudaudit.googleapis.com%2Factivity",
		"protoPayload":     payload,
		"operation":        map[string]any{"id": ev.AuditID, "producer": "k8s.io", "first": true, "last": true},
		"timestamp":        ev.RequestReceivedTimestamp.Format(time.RFC3339Nano),
		"receiveTimestamp": ev.StageTimestamp.Format(time.RFC3339Nano),
		"resource":         map[string]any{"type": "k8s_cluster", "labels": map[string]any{"cluster_name": cluster, "location": "europe-west1", "project_id": "p"}},
		"severity":         "NOTICE",
		"labels":           ev.Annotations,
	}
	return json.Marshal(entry)
}

// rpcCode is the google.rpc.Code of an HTTP status, the inverse of what the connector maps.
func rpcCode(code int) int {
	switch code {
	case 400:
		return 3
	case 401:
		return 16
	case 403:
		return 7
	case 404:
		return 5
	case 409:
		return 10
	case 429:
		return 8
	case 503:
		return 14
	case 504:
		return 4
	default:
		return 13
	}
}

// FirehoseRequest is the body of an HTTP request Firehose posts to an HTTP endpoint for a
// CloudWatch Logs subscription: records whose data is a gzip'd CWL payload of the events,
// base64 encoded by encoding/json.
func FirehoseRequest(requestID, cluster string, events []json.RawMessage, at time.Time) ([]byte, error) {
	type logEvent struct {
		ID        string `json:"id"`
		Timestamp int64  `json:"timestamp"`
		Message   string `json:"message"`
	}
	payload := struct {
		MessageType         string     `json:"messageType"`
		Owner               string     `json:"owner"`
		LogGroup            string     `json:"logGroup"`
		LogStream           string     `json:"logStream"`
		SubscriptionFilters []string   `json:"subscriptionFilters"`
		LogEvents           []logEvent `json:"logEvents"`
	}{
		MessageType: "DATA_MESSAGE", Owner: "123456789012",
		LogGroup: "/aws/eks/" + cluster + "/cluster", LogStream: "kube-apiserver-audit-0123456789abcdef",
		SubscriptionFilters: []string{"kubetrail"},
	}
	for i, raw := range events {
		var ev Event
		if err := json.Unmarshal(raw, &ev); err != nil {
			return nil, err
		}
		payload.LogEvents = append(payload.LogEvents, logEvent{
			ID: fmt.Sprintf("%056d", i), Timestamp: ev.StageTimestamp.UnixMilli(), Message: string(raw),
		})
	}
	js, err := json.Marshal(payload)
	if err != nil {
		return nil, err
	}
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	if _, err := w.Write(js); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	type record struct {
		Data []byte `json:"data"`
	}
	return json.Marshal(struct {
		RequestID string   `json:"requestId"`
		Timestamp int64    `json:"timestamp"`
		Records   []record `json:"records"`
	}{RequestID: requestID, Timestamp: at.UnixMilli(), Records: []record{{Data: gz.Bytes()}}})
}

// Shuffled is the events in the order a log pipeline might deliver them: each delayed by up to
// maxDelay after its stageTimestamp (in whole seconds, drawn from seed) and one in dupEvery
// (0: none) delivered a second time with a delay of its own, sorted by delivery time.
func Shuffled(events []json.RawMessage, maxDelay time.Duration, dupEvery int, seed uint64) ([]json.RawMessage, error) {
	rng := rand.New(rand.NewPCG(seed, uint64(len(events))))
	delay := func() time.Duration { return time.Duration(rng.Int64N(int64(maxDelay/time.Second)+1)) * time.Second }
	type timed struct {
		at  time.Time
		raw json.RawMessage
	}
	var stream []timed
	for _, raw := range events {
		var ev Event
		if err := json.Unmarshal(raw, &ev); err != nil {
			return nil, err
		}
		stream = append(stream, timed{ev.StageTimestamp.Add(delay()), raw})
		if dupEvery > 0 && rng.IntN(dupEvery) == 0 {
			stream = append(stream, timed{ev.StageTimestamp.Add(delay()), raw})
		}
	}
	slices.SortStableFunc(stream, func(a, b timed) int { return a.at.Compare(b.at) })
	out := make([]json.RawMessage, len(stream))
	for i, e := range stream {
		out[i] = e.raw
	}
	return out, nil
}
