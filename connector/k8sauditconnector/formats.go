package k8sauditconnector

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/kubetrail/kubetrail/internal/auditconv"
)

// errUnknownFormat marks a record that is no audit event in any format the connector reads.
var errUnknownFormat = errors.New("not an audit event: neither an audit.k8s.io/v1 Event or EventList, an AKS kube-audit record nor a GKE Cloud Audit Logs entry")

// recordBytes is the record's body as JSON text: a string or bytes body as it is, a map or a
// slice (a receiver that parsed the JSON already) encoded again.
func recordBytes(body pcommon.Value) ([]byte, error) {
	switch body.Type() {
	case pcommon.ValueTypeStr:
		// The string's own bytes, not a copy (the edge output's records are strings): the
		// decoder never writes to what it reads, as a bytes body, pdata's too, is read in place.
		s := body.Str()
		return auditconv.BytesView(s), nil
	case pcommon.ValueTypeBytes:
		return body.Bytes().AsRaw(), nil
	case pcommon.ValueTypeMap, pcommon.ValueTypeSlice:
		return json.Marshal(body.AsRaw()) // charged by read
	default:
		return nil, fmt.Errorf("%w: a %s body", errUnknownFormat, body.Type())
	}
}

// decoded is what one record held.
type decoded struct {
	events []auditconv.Event
	format string
	// cluster is the cluster the envelope names (an AKS record's resourceId, a GKE entry's
	// resource.labels.cluster_name), or "".
	cluster string
}

// maxEventsPerRecord bounds the events of one log record (an EventList, an Event Hub message's
// records), as the receiver's max_events_per_request bounds a webhook body: a record of a million
// `{}` items is refused at the item past the bound, not decoded into a gigabyte of events.
// 25 times the apiserver's default batch (--audit-webhook-batch-max-size 400).
const maxEventsPerRecord = 10_000

// reader turns log records into audit events with the connector's converter.
type reader struct {
	conv   *auditconv.Converter
	format string
	// charge, when set, is asked for room for what decoding holds (auditconv.DecodeLimits);
	// each ConsumeLogs call reads with its own copy charging its share of max_in_flight_bytes.
	charge func(bytes int64) bool
}

// allows reports whether the configured format reads records of format f.
func (r *reader) allows(f string) bool { return r.format == formatAuto || r.format == f }

// read decodes a record's audit events; res is its resource's attributes. An error wraps
// errUnknownFormat when the record is of no shape the connector reads, is a *truncatedError
// for an event a log service cut, and is otherwise a record of a known format whose audit event
// cannot be read (malformed_record).
//
// A record comes in one of the shapes the stock receivers give it (README, "What each receiver
// delivers"): the document as text or bytes; the document parsed into a map body; or, from the
// receivers that move every field of a cloud log entry into attributes, an empty body.
func (r *reader) read(lr plog.LogRecord, res pcommon.Map) (decoded, error) {
	body := lr.Body()
	switch body.Type() {
	case pcommon.ValueTypeEmpty:
		attrs := lr.Attributes()
		if props, ok := attrs.Get(attrAzureProperties); ok && r.allows(formatAKS) {
			category, _ := attrs.Get(attrAzureCategory)
			return r.readAKSValue(category.AsString(), props, resourceID(res, attrAzureResourceID))
		}
		if _, ok := attrs.Get(attrGCPMethod); ok && r.allows(formatGKE) {
			return r.readGKEEntry(gkeEntryOfAttributes(lr, res), lr)
		}
		return decoded{}, &unknownShapeError{shape: shapeOf(lr, res)}
	case pcommon.ValueTypeMap:
		m := body.Map()
		if props, ok := m.Get("properties"); ok && r.allows(formatAKS) && isAKSMap(m) {
			category, _ := m.Get("category")
			return r.readAKSValue(category.AsString(), props, resourceID(res, attrCloudResourceID))
		}
		if r.allows(formatGKE) && isAuditLogMap(m) {
			entry, err := gkeEntryOfPayloadMap(lr, m, res)
			if err != nil {
				return decoded{}, err
			}
			return r.readGKEEntry(entry, lr)
		}
	}
	data, err := recordBytes(body)
	if err != nil {
		return decoded{}, &unknownShapeError{shape: shapeOf(lr, res)}
	}
	if lr.EventName() == auditconv.RawEventName && r.allows(formatNative) {
		// An event as an EventList carried it, forwarded by a k8s_audit receiver's edge output:
		// no kind or apiVersion of its own.
		evs, err := r.conv.DecodeItem(data, auditconv.DecodeLimits{MaxItems: maxEventsPerRecord, Charge: r.charge})
		if err != nil {
			if t := truncated(data); t != nil {
				return decoded{}, t
			}
			return decoded{}, err
		}
		return decoded{events: evs, format: formatNative}, nil
	}
	if t := body.Type(); (t == pcommon.ValueTypeMap || t == pcommon.ValueTypeSlice) && r.charge != nil && !r.charge(int64(len(data))) {
		return decoded{}, auditconv.ErrOverBudget // a parsed body, encoded again
	}
	switch r.format {
	case formatNative:
		evs, err := r.decode(data)
		if err != nil {
			if t := truncated(data); t != nil {
				return decoded{}, t
			}
			if auditconv.IsWrongKind(err) {
				return decoded{}, fmt.Errorf("%w: %v", errUnknownFormat, err)
			}
			return decoded{}, err
		}
		return decoded{events: evs, format: formatNative}, nil
	case formatAuto:
		// The apiserver's own JSON is what most pipelines carry: try it first, with the fast
		// scanner, and read the envelope only when the document is of another kind.
		evs, err := r.decode(data)
		if err == nil {
			return decoded{events: evs, format: formatNative}, nil
		}
		if _, tooMany := errors.AsType[*auditconv.TooManyItemsError](err); tooMany || errors.Is(err, auditconv.ErrOverBudget) {
			return decoded{}, err // a native EventList, too long, or past the call's budget
		}
		if t := truncated(data); t != nil {
			return decoded{}, t
		}
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		return decoded{}, fmt.Errorf("%w: %v", errUnknownFormat, err)
	}
	format := r.format
	if format == formatAuto {
		format = detect(doc)
	}
	switch format {
	case formatAKS:
		evs, cluster, err := r.readAKS(doc)
		return decoded{events: evs, format: formatAKS, cluster: cluster}, err
	case formatGKE:
		evs, cluster, err := r.readGKE(doc, lr)
		return decoded{events: evs, format: formatGKE, cluster: cluster}, err
	default:
		return decoded{}, &unknownShapeError{shape: shapeOf(lr, res)}
	}
}

// decode decodes a native Event or EventList of at most maxEventsPerRecord events.
func (r *reader) decode(data []byte) ([]auditconv.Event, error) {
	return r.conv.DecodeBodyLimited(data, nil, auditconv.DecodeLimits{MaxItems: maxEventsPerRecord, Charge: r.charge})
}

// detect names the envelope of a JSON object that is not a native audit event, or "".
func detect(doc map[string]json.RawMessage) string {
	switch {
	case doc["protoPayload"] != nil:
		return formatGKE
	case doc["@type"] != nil && strings.HasSuffix(unquoted(doc["@type"]), "google.cloud.audit.AuditLog"):
		return formatGKE
	case doc["records"] != nil, doc["properties"] != nil, doc["log"] != nil && doc["category"] != nil:
		return formatAKS
	}
	return ""
}

// unquoted is a JSON string's value, or "" for any other JSON.
func unquoted(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// aksRecord is one AKS diagnostic record (diagnostic setting categories kube-audit and
// kube-audit-admin) as Event Hubs and storage accounts carry it: the apiserver's audit event in
// properties.log, as JSON text or, in some records, as a JSON object.
type aksRecord struct {
	Category   string `json:"category"`
	ResourceID string `json:"resourceId"`
	Properties struct {
		Log json.RawMessage `json:"log"`
	} `json:"properties"`
	// Log is properties.log when a receiver handed over the properties alone.
	Log json.RawMessage `json:"log"`
}

// readAKS reads one AKS record, or the {"records": […]} array Azure Monitor sends to Event
// Hubs, each record's properties.log an audit event; cluster is the first record's resourceId.
func (r *reader) readAKS(doc map[string]json.RawMessage) (out []auditconv.Event, cluster string, err error) {
	var records []json.RawMessage
	if raw, ok := doc["records"]; ok {
		if err := json.Unmarshal(raw, &records); err != nil {
			return nil, "", fmt.Errorf("aks: records is not an array: %w", err)
		}
		if len(records) > maxEventsPerRecord {
			return nil, "", fmt.Errorf("aks: %d records in one message, more than %d", len(records), maxEventsPerRecord)
		}
	} else {
		whole, err := json.Marshal(doc)
		if err != nil {
			return nil, "", err
		}
		records = []json.RawMessage{whole}
	}
	for i, raw := range records {
		var rec aksRecord
		if err := json.Unmarshal(raw, &rec); err != nil {
			return nil, "", fmt.Errorf("aks: record %d: %w", i, err)
		}
		if !isAuditCategory(rec.Category) {
			continue // another category of the same diagnostic setting (kube-apiserver, guard, …)
		}
		if cluster == "" {
			cluster = clusterOf(rec.ResourceID)
		}
		log := rec.Properties.Log
		if len(log) == 0 {
			log = rec.Log
		}
		evs, err := r.decodeAKSLog(log)
		if err != nil {
			return nil, "", fmt.Errorf("aks: record %d: %w", i, err)
		}
		out = append(out, evs...)
	}
	return out, cluster, nil
}

// isAuditCategory reports whether an AKS record of this category holds an audit event (an
// empty category: a record handed over without it).
func isAuditCategory(category string) bool {
	return category == "" || strings.HasPrefix(category, "kube-audit")
}

// decodeAKSLog decodes properties.log: the event's JSON as a string, or the event itself.
func (r *reader) decodeAKSLog(log json.RawMessage) ([]auditconv.Event, error) {
	log = bytes.TrimSpace(log)
	switch {
	case len(log) == 0 || string(log) == "null" || string(log) == `""`:
		return nil, errors.New("no properties.log")
	case log[0] == '"':
		var text string
		if err := json.Unmarshal(log, &text); err != nil {
			return nil, fmt.Errorf("properties.log: %w", err)
		}
		log = []byte(text)
	case log[0] != '{':
		return nil, errors.New("properties.log is neither JSON text nor an object")
	}
	evs, err := r.decode(log)
	if err != nil {
		return nil, fmt.Errorf("properties.log: %w", err)
	}
	return evs, nil
}

// readAKSValue reads an AKS record that a receiver parsed: the azure_event_hub receiver's
// default format puts the record's properties in the map attribute azure.properties and its
// resourceId on the resource (azure.resource.id); with apply_semantic_conventions the body is a
// map of category, operation.name and properties, and the resource has cloud.resource_id.
// properties.log is the event as JSON text or, where Azure sent an object, as a map.
func (r *reader) readAKSValue(category string, props pcommon.Value, resourceID string) (decoded, error) {
	d := decoded{format: formatAKS, cluster: clusterOf(resourceID)}
	if !isAuditCategory(category) {
		return d, nil // another category of the same diagnostic setting
	}
	if props.Type() != pcommon.ValueTypeMap {
		return d, fmt.Errorf("aks: properties is a %s, not a map", props.Type())
	}
	log, ok := props.Map().Get("log")
	if !ok {
		return d, errors.New("aks: no properties.log")
	}
	var raw []byte
	switch log.Type() {
	case pcommon.ValueTypeStr:
		raw = []byte(log.Str())
	case pcommon.ValueTypeMap:
		var err error
		if raw, err = json.Marshal(log.Map().AsRaw()); err != nil {
			return d, fmt.Errorf("aks: properties.log: %w", err)
		}
	default:
		return d, fmt.Errorf("aks: properties.log is a %s", log.Type())
	}
	evs, err := r.decode(raw)
	if err != nil {
		return d, fmt.Errorf("aks: properties.log: %w", err)
	}
	d.events = evs
	return d, nil
}

// isAKSMap reports whether a map body is an AKS record as the Azure semantic-conventions
// translator writes one: category (or operation.name) beside properties.
func isAKSMap(m pcommon.Map) bool {
	_, category := m.Get("category")
	_, operation := m.Get("operation.name")
	return category || operation
}

// resourceID is the resource attribute key's value, or "".
func resourceID(res pcommon.Map, key string) string {
	if v, ok := res.Get(key); ok {
		return v.AsString()
	}
	return ""
}

// truncatedSuffix is what EKS appends to an audit event it cut at CloudWatch Logs' 256 KiB.
const truncatedSuffix = "[Truncated...]"

// truncatedError is an audit event a log service cut short; auditID is read from what is
// left, when it holds one.
type truncatedError struct{ auditID string }

func (e *truncatedError) Error() string {
	if e.auditID == "" {
		return "an audit event cut short by the log service (" + truncatedSuffix + "), its auditID not in the part kept"
	}
	return "audit event " + e.auditID + " cut short by the log service (" + truncatedSuffix + ")"
}

// truncated is the error of a document that EKS cut short, or nil.
func truncated(data []byte) *truncatedError {
	if !bytes.HasSuffix(bytes.TrimRight(data, " \r\n"), []byte(truncatedSuffix)) {
		return nil
	}
	t := &truncatedError{}
	if _, rest, ok := bytes.Cut(data, []byte(`"auditID":"`)); ok {
		if id, _, ok := bytes.Cut(rest, []byte(`"`)); ok && auditconv.DedupAuditID(string(id)) {
			t.auditID = string(id)
		}
	}
	return t
}

// unknownShapeError is a record of no shape the connector reads, with what it looked like.
type unknownShapeError struct{ shape string }

func (e *unknownShapeError) Error() string { return errUnknownFormat.Error() + ": " + e.shape }
func (e *unknownShapeError) Unwrap() error { return errUnknownFormat }

// shapeOf says what a record looked like: its body's type and the keys of its attributes, its
// body map's and its resource's (at most maxShapeKeys each), so that an operator can tell which
// receiver setting made it.
func shapeOf(lr plog.LogRecord, res pcommon.Map) string {
	var b strings.Builder
	b.WriteString("body " + lr.Body().Type().String())
	if lr.Body().Type() == pcommon.ValueTypeMap {
		b.WriteString(" with keys " + keysOf(lr.Body().Map()))
	}
	b.WriteString(", attributes " + keysOf(lr.Attributes()))
	b.WriteString(", resource attributes " + keysOf(res))
	return b.String()
}

const maxShapeKeys = 12

func keysOf(m pcommon.Map) string {
	keys := make([]string, 0, m.Len())
	for k := range m.All() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if len(keys) > maxShapeKeys {
		keys = append(keys[:maxShapeKeys], fmt.Sprintf("… %d more", len(keys)-maxShapeKeys))
	}
	return "[" + strings.Join(keys, " ") + "]"
}

// The attributes of the receivers that move a log entry's fields out of the body.
const (
	attrAzureProperties = "azure.properties"  // azure_event_hub, format azure
	attrAzureCategory   = "azure.category"    // azure_event_hub, format azure
	attrAzureResourceID = "azure.resource.id" // its resource
	attrCloudResourceID = "cloud.resource_id" // azure_event_hub with apply_semantic_conventions
)
