package model

import semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

// Names that the OpenTelemetry semantic conventions define take their values from the semconv
// package, so they cannot be misspelled; the k8s.object.*, k8s.audit.*, k8s.event.* and
// kubetrail.* names are kubetrail's own.

// Resource attributes.
const (
	AttrClusterName = string(semconv.K8SClusterNameKey)
	AttrServiceName = string(semconv.ServiceNameKey)
)

// Object identity, on the Resource of every span a component emits (docs/span-model.md,
// Resource); the owner's, on the span.
const (
	AttrObjectAPIGroup   = "k8s.object.api_group"
	AttrObjectAPIVersion = "k8s.object.api_version"
	AttrObjectResource   = "k8s.object.resource"
	AttrObjectKind       = "k8s.object.kind"
	AttrNamespaceName    = string(semconv.K8SNamespaceNameKey)
	AttrObjectName       = "k8s.object.name"
	AttrObjectUID        = "k8s.object.uid"
	AttrOwnerAPIVersion  = "k8s.object.owner.api_version"
	AttrOwnerKind        = "k8s.object.owner.kind"
	AttrOwnerName        = "k8s.object.owner.name"
	AttrOwnerUID         = "k8s.object.owner.uid"
	// AttrOwnerNone (bool) is set on spans whose object body was seen without a controlling
	// owner reference: the object is a root, and the processor never holds it for owner_wait.
	AttrOwnerNone             = "k8s.object.owner.none"
	AttrObjectResourceVersion = "k8s.object.resource_version"
	// Rollouts (docs/span-model.md, Rollouts): what the body of a write says of the object's
	// intended state and the revision it belongs to. Integers: generation, observed_generation.
	AttrObjectGeneration         = "k8s.object.generation"
	AttrObjectObservedGeneration = "k8s.object.observed_generation"
	AttrObjectRevision           = "k8s.object.revision"
	AttrObjectTemplateHash       = "k8s.object.pod_template_hash"
	AttrObjectRevisionHash       = "k8s.object.controller_revision_hash"
	AttrObjectNewRV              = "k8s.object.new_resource_version"
)

// AttrSpanType says which kind of span this is; its values are the SpanType* constants.
const (
	AttrSpanType   = "kubetrail.span.type"
	SpanTypeObject = "object"
	SpanTypeAudit  = "audit"
	SpanTypeEvent  = "event"
	// SpanTypeController is a controller's span of work on an object, started with
	// pkg/objecttrace: its identity is on the span (the Resource is the controller's).
	SpanTypeController = "controller"
	// SpanTypeLinked is k8s_object_link's span, under an object's span, for a span of another
	// component that links to a trace context the object carries (KEP-5915's semantics: the
	// scheduler's SchedulePod): it has that span's name, times and service, and links to it.
	SpanTypeLinked = "linked"
)

// AttrControllerName is, on a controller span, the controller that did the work.
const AttrControllerName = "kubetrail.controller.name"

// Audit spans (docs/design.md, Spans).
const (
	AttrAuditID               = "k8s.audit.id"
	AttrAuditVerb             = "k8s.audit.verb"
	AttrAuditLevel            = "k8s.audit.level"
	AttrAuditStage            = "k8s.audit.stage"
	AttrAuditSubresource      = "k8s.audit.subresource"
	AttrAuditUserGroups       = "k8s.audit.user.groups"
	AttrAuditImpersonatedUser = "k8s.audit.impersonated_user.name"
	AttrAuditPatch            = "k8s.audit.patch"
	AttrUserName              = string(semconv.UserNameKey)
	AttrUserAgent             = string(semconv.UserAgentOriginalKey)
	AttrClientAddress         = string(semconv.ClientAddressKey)
	AttrHTTPStatusCode        = string(semconv.HTTPResponseStatusCodeKey)
	AttrURLPath               = string(semconv.URLPathKey)

	EventObjectDiff     = "k8s.object.diff"
	EventObjectSnapshot = "k8s.object.snapshot"
	EventAuditError     = "k8s.audit.error"
	// AttrDiffAttempted marks a diff event of a refused write: the change it tried, which the
	// object never took (span model 1.3). Readers that rebuild an object from its diffs skip it.
	AttrDiffAttempted = "k8s.object.diff.attempted"
)

// Event spans (docs/design.md, Spans).
const (
	AttrEventReason            = "k8s.event.reason"
	AttrEventAction            = "k8s.event.action"
	AttrEventType              = "k8s.event.type"
	AttrEventNote              = "k8s.event.note"
	AttrEventReportingCtrl     = "k8s.event.reporting_controller"
	AttrEventReportingInstance = "k8s.event.reporting_instance"
	AttrEventCount             = "k8s.event.count"
	AttrEventUID               = "k8s.event.uid"
	AttrEventName              = "k8s.event.name"
	AttrEventRelatedKind       = "k8s.event.related.kind"
	AttrEventRelatedName       = "k8s.event.related.name"
	AttrEventRelatedNamespace  = "k8s.event.related.namespace"
	AttrEventRelatedUID        = "k8s.event.related.uid"
	AttrEventRelatedAPIVersion = "k8s.event.related.api_version"
	// AttrEventSeriesOccurrences (int) is on series spans only: how many occurrences the span
	// covers, the last being k8s.event.count.
	AttrEventSeriesOccurrences = "k8s.event.series.occurrences"
	AttrEventAggregated        = "k8s.event.aggregated" // true when the recorder combined similar Events; else absent
)

// Object spans emitted by the processor.
const (
	// AttrWindowStart is the window's start as an RFC 3339 string, so backends can search by it.
	AttrWindowStart = "kubetrail.window.start"
)
