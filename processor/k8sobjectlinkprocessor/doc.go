// Package k8sobjectlinkprocessor implements the k8s_object_link processor: it gives every
// Kubernetes object one span per time window (30 minutes by default), nests it under its
// controlling owner's span so that one trace per root ancestor and window holds a Deployment,
// its ReplicaSets, their Pods and every audit and Event span about any of them, and links each
// object span to the same object's span in the window before. The mapping of objects to traces
// lives in an ID map, in memory or shared by replicas through Redis, where the first writer of
// an assignment wins so that replicas never split a trace.
package k8sobjectlinkprocessor
