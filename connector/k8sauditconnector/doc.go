// Package k8sauditconnector is the k8s_audit connector: it reads Kubernetes audit events from
// log records (any collector log pipeline: filelog, kafka, awsfirehose, awscloudwatch,
// azureeventhub, googlecloudpubsub) and turns them into the same audit spans as the k8s_audit
// receiver, through the same conversion (internal/auditconv). It is how kubetrail's audit half
// runs on managed control planes (EKS, AKS, GKE), whose apiserver flags and disks the user
// does not own but whose audit events the provider delivers to a log service.
//
// Records are read as a native audit.k8s.io/v1 Event or EventList, an AKS diagnostic record
// or a GKE Cloud Audit Logs entry, detected per record or fixed by format.
//
//go:generate make -C ../.. generate
package k8sauditconnector
