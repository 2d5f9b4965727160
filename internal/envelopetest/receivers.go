package envelopetest

// The log records the stock contrib receivers make of the envelopes above, as they reach a logs
// pipeline (and so the k8s_audit connector). Each function follows the named receiver's source.
// The module mirror here serves none of the cloud receivers at v0.165.1 (docs/operations.md), so
// each says which version of the source it follows; the record layout of each path was stable
// across the versions read (connector/k8sauditconnector/README.md, "What each receiver
// delivers").

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
)

// anyJSON decodes JSON as the receivers' decoders do: numbers as float64.
func anyJSON(data []byte, v any) error { return json.Unmarshal(data, v) }

// eventHubRecord is one record of an Azure Monitor Event Hub message, as the Azure translators
// read it (pkg/translator/azure/resourcelogs_to_logs.go, type azureLogRecord).
type eventHubRecord struct {
	Time          string         `json:"time"`
	ResourceID    string         `json:"resourceId"`
	Category      string         `json:"category"`
	OperationName string         `json:"operationName"`
	Properties    map[string]any `json:"properties"`
}

func eventHubRecords(msg []byte) ([]eventHubRecord, error) {
	var doc struct {
		Records []eventHubRecord `json:"records"`
	}
	if err := anyJSON(msg, &doc); err != nil {
		return nil, err
	}
	return doc.Records, nil
}

// eventHubGrouping returns a function that appends a record's log record to ld, under one
// ResourceLogs per resourceId (its attributes set by resource) and a scope of the given name,
// with the record's time as its timestamp, as both Azure translators do.
func eventHubGrouping(ld plog.Logs, scope string, resource func(res pcommon.Map, id string)) func(eventHubRecord) (plog.LogRecord, error) {
	byResource := map[string]plog.LogRecordSlice{}
	return func(r eventHubRecord) (plog.LogRecord, error) {
		lrs, ok := byResource[r.ResourceID]
		if !ok {
			rl := ld.ResourceLogs().AppendEmpty()
			resource(rl.Resource().Attributes(), r.ResourceID)
			sl := rl.ScopeLogs().AppendEmpty()
			sl.Scope().SetName(scope)
			lrs = sl.LogRecords()
			byResource[r.ResourceID] = lrs
		}
		ts, err := time.Parse(time.RFC3339Nano, r.Time)
		if err != nil {
			return plog.LogRecord{}, err
		}
		lr := lrs.AppendEmpty()
		lr.SetTimestamp(pcommon.NewTimestampFromTime(ts))
		return lr, nil
	}
}

// AKSLogObjects is an AKS Event Hub message (AKS above) whose records carry properties.log as a
// JSON object instead of JSON text, as some AKS records do.
func AKSLogObjects(msg []byte) ([]byte, error) {
	var doc struct {
		Records []map[string]any `json:"records"`
	}
	if err := json.Unmarshal(msg, &doc); err != nil {
		return nil, err
	}
	for _, r := range doc.Records {
		props, _ := r["properties"].(map[string]any)
		if s, ok := props["log"].(string); ok {
			var obj any
			if err := json.Unmarshal([]byte(s), &obj); err != nil {
				return nil, err
			}
			props["log"] = obj
		}
	}
	return json.Marshal(doc)
}

// EventHubAzure is what the azure_event_hub receiver makes of an Event Hub message with
// `format: azure`, its default, and apply_semantic_conventions off (its default): one
// ResourceLogs per resourceId (resource attribute azure.resource.id, as Azure wrote it), one
// record per element of records with an empty body, the record's properties as the map
// attribute azure.properties, azure.category, azure.operation.name and cloud.provider, the
// timestamp from time. Source: pkg/translator/azure/resourcelogs_to_logs.go
// (ResourceLogsUnmarshaler.UnmarshalLogs, extractRawAttributes), v0.146.0.
func EventHubAzure(msg []byte) (plog.Logs, error) {
	records, err := eventHubRecords(msg)
	if err != nil {
		return plog.Logs{}, err
	}
	ld := plog.NewLogs()
	recordOf := eventHubGrouping(ld, "github.com/open-telemetry/opentelemetry-collector-contrib/pkg/translator/azure",
		func(res pcommon.Map, id string) { res.PutStr("azure.resource.id", id) })
	for _, r := range records {
		lr, err := recordOf(r)
		if err != nil {
			return plog.Logs{}, err
		}
		attrs := lr.Attributes()
		attrs.PutStr("azure.category", r.Category)
		attrs.PutStr("azure.operation.name", r.OperationName)
		if r.Properties != nil {
			if err := attrs.PutEmptyMap("azure.properties").FromRaw(r.Properties); err != nil {
				return plog.Logs{}, err
			}
		}
		attrs.PutStr("cloud.provider", "azure")
	}
	return ld, nil
}

// EventHubAzureSemconv is what the azure_event_hub receiver makes of the message with `format:
// azure` and apply_semantic_conventions on: kube-audit is no category its semantic conventions
// know, so each record's body is a map of category, operation.name and properties, with no
// record attributes; the resource has cloud.provider, cloud.resource_id and event.name.
// Source: pkg/translator/azurelogs/resourcelogs_to_logs.go (UnmarshalLogs, the
// errUnsupportedCategory fallback), v0.146.0.
func EventHubAzureSemconv(msg []byte, observed time.Time) (plog.Logs, error) {
	records, err := eventHubRecords(msg)
	if err != nil {
		return plog.Logs{}, err
	}
	ld := plog.NewLogs()
	recordOf := eventHubGrouping(ld, "otelcol/azureresourcelogs", func(res pcommon.Map, id string) {
		res.PutStr("cloud.provider", "azure")
		res.PutStr("cloud.resource_id", id)
		res.PutStr("event.name", "az.resource.log")
	})
	for _, r := range records {
		lr, err := recordOf(r)
		if err != nil {
			return plog.Logs{}, err
		}
		lr.SetObservedTimestamp(pcommon.NewTimestampFromTime(observed))
		body := map[string]any{"category": r.Category, "operation.name": r.OperationName, "properties": r.Properties}
		if err := lr.Body().SetEmptyMap().FromRaw(body); err != nil {
			return plog.Logs{}, err
		}
	}
	return ld, nil
}

// EventHubRaw is what the azure_event_hub receiver makes of the message with `format: raw`: one
// record per message, the body the message's bytes, no attributes but the message's
// application properties (none here), the timestamp its enqueue time. Source:
// receiver/azureeventhubreceiver/rawlogs_unmarshaler.go, v0.146.0.
func EventHubRaw(msg []byte, enqueued time.Time) plog.Logs {
	ld := plog.NewLogs()
	lr := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
	lr.Body().SetEmptyBytes().FromRaw(msg)
	lr.SetTimestamp(pcommon.NewTimestampFromTime(enqueued))
	lr.SetObservedTimestamp(pcommon.NewTimestampFromTime(enqueued))
	return ld
}

// PubSubText is what googlecloudpubsub makes of a Pub/Sub log sink's messages with the
// text_encoding extension (the built-in raw_text of v0.131 and before did the same): one record
// per line, the body the LogEntry's JSON text, no attributes, no timestamp. Source:
// extension/encoding/textencodingextension (UnmarshalLogs), v0.159.0.
func PubSubText(entries [][]byte, observed time.Time) plog.Logs {
	ld := plog.NewLogs()
	for _, e := range entries {
		lr := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
		lr.Body().SetStr(string(e))
		lr.SetObservedTimestamp(pcommon.NewTimestampFromTime(observed))
	}
	return ld
}

// logEntry is the part of a Cloud Logging LogEntry the Google shapes below read.
type logEntry struct {
	InsertID         string            `json:"insertId"`
	LogName          string            `json:"logName"`
	Timestamp        time.Time         `json:"timestamp"`
	ReceiveTimestamp time.Time         `json:"receiveTimestamp"`
	Severity         string            `json:"severity"`
	Labels           map[string]string `json:"labels"`
	Operation        map[string]any    `json:"operation"`
	Resource         struct {
		Type   string            `json:"type"`
		Labels map[string]string `json:"labels"`
	} `json:"resource"`
	ProtoPayload map[string]any `json:"protoPayload"`
}

// PubSubCloudLogging is what googlecloudpubsub's built-in `encoding: cloud_logging` made of a
// LogEntry before v0.132 removed it (receiver/googlecloudpubsubreceiver/internal/log_entry.go,
// TranslateLogEntry): the body the protoPayload as a map (AuditLog's type is not linked into the
// collector, so its fields are kept as JSON, without @type), insertId as log.record.uid,
// logName as gcp.log_name, labels as attributes under their own keys, the operation as the map
// gcp.operation, the resource type and labels as gcp.resource_type and gcp.<label>.
func PubSubCloudLogging(entry []byte) (plog.Logs, error) {
	var e logEntry
	if err := anyJSON(entry, &e); err != nil {
		return plog.Logs{}, err
	}
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	res := rl.Resource().Attributes()
	res.PutStr("gcp.resource_type", e.Resource.Type)
	for k, v := range e.Resource.Labels {
		res.PutStr("gcp."+k, v)
	}
	lr := rl.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
	lr.SetTimestamp(pcommon.NewTimestampFromTime(e.Timestamp))
	lr.SetObservedTimestamp(pcommon.NewTimestampFromTime(e.ReceiveTimestamp))
	lr.SetSeverityText(e.Severity)
	attrs := lr.Attributes()
	attrs.PutStr("log.record.uid", e.InsertID)
	attrs.PutStr("gcp.log_name", e.LogName)
	for k, v := range e.Labels {
		attrs.PutStr(k, v)
	}
	if e.Operation != nil {
		if err := attrs.PutEmptyMap("gcp.operation").FromRaw(e.Operation); err != nil {
			return plog.Logs{}, err
		}
	}
	payload := map[string]any{}
	for k, v := range e.ProtoPayload {
		if k != "@type" {
			payload[k] = v
		}
	}
	if err := lr.Body().SetEmptyMap().FromRaw(payload); err != nil {
		return plog.Logs{}, err
	}
	return ld, nil
}

// LogEntryExtension is what the googlecloudlogentry_encoding extension makes of a Pub/Sub
// message of LogEntries (one per line) from an audit log: per entry a ResourceLogs (gcp.project
// and cloud.resource_id from logName, gcp.resource_type, gcp.label.<label> of the resource), a
// scope with encoding.format gcp.auditlog, and one record with an empty body whose attributes
// are the AuditLog's fields under gcp.audit.* and semantic-convention names. request and
// response are not carried. Source: extension/encoding/googlecloudlogentryencodingextension
// (log_entry.go handleLogEntryFields, internal/auditlog/parser.go), upstream main of 2026-03.
func LogEntryExtension(msg []byte) (plog.Logs, error) {
	ld := plog.NewLogs()
	sc := bufio.NewScanner(bytes.NewReader(msg))
	sc.Buffer(nil, 10<<20)
	for sc.Scan() {
		var e logEntry
		if err := anyJSON(sc.Bytes(), &e); err != nil {
			return plog.Logs{}, err
		}
		if e.Timestamp.IsZero() {
			return plog.Logs{}, fmt.Errorf("missing timestamp")
		}
		rl := ld.ResourceLogs().AppendEmpty()
		res := rl.Resource().Attributes()
		if project, logID, ok := strings.Cut(strings.TrimPrefix(e.LogName, "projects/"), "/logs/"); ok {
			res.PutStr("gcp.project", project)
			res.PutStr("cloud.resource_id", logID)
		}
		res.PutStr("gcp.resource_type", e.Resource.Type)
		for k, v := range e.Resource.Labels {
			res.PutStr("gcp.label."+logEntrySnake(k), v)
		}
		sl := rl.ScopeLogs().AppendEmpty()
		sl.Scope().Attributes().PutStr("encoding.format", "gcp.auditlog")
		lr := sl.LogRecords().AppendEmpty()
		lr.SetTimestamp(pcommon.NewTimestampFromTime(e.Timestamp))
		lr.SetObservedTimestamp(pcommon.NewTimestampFromTime(e.ReceiveTimestamp))
		lr.SetSeverityText(e.Severity)
		attrs := lr.Attributes()
		putStr := func(k string, v any) {
			if s, ok := v.(string); ok && s != "" {
				attrs.PutStr(k, s)
			}
		}
		putStr("log.record.uid", e.InsertID)
		for k, v := range e.Labels {
			attrs.PutStr("gcp.label."+logEntrySnake(k), v)
		}
		if op := e.Operation; op != nil {
			putStr("gcp.operation.id", op["id"])
			putStr("gcp.operation.producer", op["producer"])
			for _, k := range []string{"first", "last"} {
				if b, ok := op[k].(bool); ok {
					attrs.PutBool("gcp.operation."+k, b)
				}
			}
		}
		p := e.ProtoPayload
		putStr("gcp.audit.service.name", p["serviceName"])
		putStr("gcp.audit.method.name", p["methodName"])
		putStr("gcp.audit.resource.name", p["resourceName"])
		if auth, ok := p["authenticationInfo"].(map[string]any); ok {
			putStr("user.email", auth["principalEmail"])
		}
		if md, ok := p["requestMetadata"].(map[string]any); ok {
			putStr("client.address", md["callerIp"])
			putStr("user_agent.original", md["callerSuppliedUserAgent"])
		}
		if st, ok := p["status"].(map[string]any); ok {
			if code, ok := st["code"].(float64); ok {
				attrs.PutInt("rpc.jsonrpc.error_code", int64(code))
			}
			putStr("rpc.jsonrpc.error_message", st["message"])
		}
	}
	return ld, sc.Err()
}

var digitUnderscore = regexp.MustCompile(`(\d)_([a-z])`)

// logEntrySnake is a label key as the googlecloudlogentry extension writes it
// (shared.ToSnakeCase: strcase's snake case keeping dots, then a digit's underscore before a
// letter dropped): `-` becomes `_`, capitals become `_` and the lower-case letter.
func logEntrySnake(k string) string {
	var b strings.Builder
	for i, r := range k {
		switch {
		case r == '-' || r == ' ':
			b.WriteByte('_')
		case r >= 'A' && r <= 'Z':
			if i > 0 {
				b.WriteByte('_')
			}
			b.WriteRune(r + 'a' - 'A')
		default:
			b.WriteRune(r)
		}
	}
	return digitUnderscore.ReplaceAllString(b.String(), "$1$2")
}

// CloudWatch is what awscloudwatch makes of an EKS audit log stream's events: one record per
// log event, the body the message, the resource cloudwatch.log.group.name and
// cloudwatch.log.stream, the event's ID as the attribute id. Source:
// receiver/awscloudwatchreceiver/logs.go (processEvents).
func CloudWatch(cluster string, events []json.RawMessage) plog.Logs {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	res := rl.Resource().Attributes()
	res.PutStr("aws.region", "eu-west-1")
	res.PutStr("cloudwatch.log.group.name", "/aws/eks/"+cluster+"/cluster")
	res.PutStr("cloudwatch.log.stream", "kube-apiserver-audit-0123456789abcdef")
	lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
	for i, raw := range events {
		lr := lrs.AppendEmpty()
		lr.Body().SetStr(string(raw))
		lr.Attributes().PutStr("id", fmt.Sprintf("%056d", i))
	}
	return ld
}

// cloudWatchMaxEvent is the size of a CloudWatch Logs event (256 KiB less the 26 bytes of its
// overhead); EKS cuts a longer audit event there and appends cloudWatchTruncated.
const (
	cloudWatchMaxEvent  = 256*1024 - 26
	cloudWatchTruncated = "[Truncated...]"
)

// Truncated is an event as EKS ships one larger than a CloudWatch Logs event: cut at limit bytes
// (0: CloudWatch's) with "[Truncated...]" appended.
func Truncated(raw []byte, limit int) []byte {
	if limit <= 0 {
		limit = cloudWatchMaxEvent
	}
	limit -= len(cloudWatchTruncated)
	if len(raw) <= limit {
		return raw
	}
	return append(bytes.Clone(raw[:limit]), cloudWatchTruncated...)
}

// Filelog is what the filelog receiver makes of an audit log's lines: one record per line, the
// body the line, log.file.name; with jsonParser, a json_parser operator's default (parse_to
// attributes) adds the event's top-level fields as attributes and leaves the body as it is.
// Source: pkg/stanza (adapter/converter.go, operator/parser/json), v0.165.1.
func Filelog(lines []json.RawMessage, jsonParser bool) (plog.Logs, error) {
	ld := plog.NewLogs()
	lrs := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords()
	for _, line := range lines {
		lr := lrs.AppendEmpty()
		lr.Body().SetStr(string(line))
		lr.Attributes().PutStr("log.file.name", "audit.log")
		if jsonParser {
			var m map[string]any
			if err := anyJSON(line, &m); err != nil {
				return plog.Logs{}, err
			}
			if err := lr.Attributes().FromRaw(m); err != nil {
				return plog.Logs{}, err
			}
			lr.Attributes().PutStr("log.file.name", "audit.log")
		}
	}
	return ld, nil
}

// Kafka is what the kafka receiver makes of messages with the logs encoding raw (the body the
// message's bytes), text (a string) or json (a map; numbers float64): one record per message.
// Source: receiver/kafkareceiver (unmarshaler.go, encoding/*), v0.165.1.
func Kafka(encoding string, messages [][]byte) (plog.Logs, error) {
	ld := plog.NewLogs()
	for _, m := range messages {
		lr := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
		switch encoding {
		case "raw":
			lr.Body().SetEmptyBytes().FromRaw(m)
		case "text":
			lr.Body().SetStr(string(m))
		case "json":
			var v map[string]any
			if err := anyJSON(m, &v); err != nil {
				return plog.Logs{}, err
			}
			if err := lr.Body().SetEmptyMap().FromRaw(v); err != nil {
				return plog.Logs{}, err
			}
		default:
			return plog.Logs{}, fmt.Errorf("kafka: no logs encoding %q here", encoding)
		}
	}
	return ld, nil
}
