// Package k8sauditreceiver implements the k8s_audit receiver. It takes Kubernetes apiserver
// audit events from its webhook (POST /audit or /audit/{cluster}, an audit.k8s.io/v1 EventList)
// and from tailed audit log files, and has two outputs:
//
//   - the traces output (the receiver in a traces pipeline): one span per request on the object
//     the request touched. Spans carry derived IDs (see internal/model), so every write, patch
//     and binding of an object in a half-hour window lands in that object's trace; updates carry
//     the field diff against the object's previous body, and Secrets are redacted before
//     anything leaves the receiver.
//   - the edge output (the receiver in a logs pipeline, the webhook only): each event as
//     received, one log record, grouped by object, for an edge collector that forwards them to
//     Kafka; a processing tier's k8s_audit connector turns them into the same spans.
//
// In both pipelines it is one receiver with one port, which answers 200 only once every output
// took the batch. The webhook's files: webhook.go (the request, each output's handler and the
// shared refusal path), webhook_body.go (reading a body within max_in_flight_bytes),
// encodings.go and connections.go (decoders and connections within their bounds); tailer.go
// reads the files; consume.go hands batches to the pipelines.
package k8sauditreceiver
