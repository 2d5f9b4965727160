// Package model is the contract between kubetrail's components: the identity of a Kubernetes
// object, the time window an object span covers, the derivation of trace and span IDs, the
// attribute names every span carries, and the mapping between API resources and kinds.
//
// Receivers write these attributes and IDs; the k8s_object_link processor reads them back. Both
// sides go through this package so that the two can never disagree on a key, a hash or a name.
package model
