// Package k8seventsreceiver implements the k8s_event_spans receiver: it list-watches Kubernetes
// Events (events.k8s.io/v1, core/v1 when that group is not served) and emits one span per Event
// occurrence on the object the Event is about. Span IDs derive from the Event's UID and
// occurrence, and a restart checkpoint in a storage extension keeps relists, restarts and
// replicas from emitting an occurrence twice.
package k8seventsreceiver // import "github.com/kubetrail/kubetrail/receiver/k8seventsreceiver"
