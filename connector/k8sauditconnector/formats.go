package k8sauditconnector

import (
	"encoding/json"
	"errors"
	"fmt"
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
		return []byte(body.Str()), nil
	case pcommon.ValueTypeBytes:
		return body.Bytes().AsRaw(), nil
	case pcommon.ValueTypeMap, pcommon.ValueTypeSlice:
		return json.Marshal(body.AsRaw())
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
}

// read decodes a record's audit events. An error wraps errUnknownFormat when the record is of
// no format the connector reads; any other error is a record of a known format whose audit
// event cannot be read (malformed_record).
func (r *reader) read(lr plog.LogRecord) (decoded, error) {
	data, err := recordBytes(lr.Body())
	if err != nil {
		return decoded{}, err
	}
	switch r.format {
	case formatNative:
		evs, err := r.decode(data)
		if err != nil {
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
		if _, tooMany := errors.AsType[*auditconv.TooManyItemsError](err); tooMany {
			return decoded{}, err // a native EventList, too long
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
		return decoded{}, errUnknownFormat
	}
}

// decode decodes a native Event or EventList of at most maxEventsPerRecord events.
func (r *reader) decode(data []byte) ([]auditconv.Event, error) {
	return r.conv.DecodeBodyLimited(data, nil, auditconv.DecodeLimits{MaxItems: maxEventsPerRecord})
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
// kube-audit-admin) as Event Hubs and storage accounts carry it: the apiserver's audit event,
// as JSON text, in properties.log.
type aksRecord struct {
	Category   string `json:"category"`
	ResourceID string `json:"resourceId"`
	Properties struct {
		Log string `json:"log"`
	} `json:"properties"`
	// Log is properties.log when a receiver handed over the properties alone.
	Log string `json:"log"`
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
		if rec.Category != "" && !strings.HasPrefix(rec.Category, "kube-audit") {
			continue // another category of the same diagnostic setting (kube-apiserver, guard, …)
		}
		if cluster == "" {
			cluster = clusterOf(rec.ResourceID)
		}
		log := rec.Properties.Log
		if log == "" {
			log = rec.Log
		}
		if log == "" {
			return nil, "", fmt.Errorf("aks: record %d has no properties.log", i)
		}
		evs, err := r.decode([]byte(log))
		if err != nil {
			return nil, "", fmt.Errorf("aks: record %d: properties.log: %w", i, err)
		}
		out = append(out, evs...)
	}
	return out, cluster, nil
}
