// Package k8sauditreceiver implements the k8s_audit receiver: it turns Kubernetes apiserver
// audit events, posted to its webhook (audit.k8s.io/v1 EventList) or tailed from audit log
// files, into one span per request on the object the request touched. Spans carry derived IDs
// (see internal/model), so every write, patch and binding of an object in a half-hour window
// lands in that object's trace; updates carry the field diff against the object's previous
// body and Secrets are redacted before anything leaves the receiver.
package k8sauditreceiver
