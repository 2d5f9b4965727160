package k8sauditconnector

import (
	"testing"

	"github.com/kubetrail/kubetrail/internal/auditconv"
	"github.com/kubetrail/kubetrail/internal/enumtest"
	"github.com/kubetrail/kubetrail/internal/model"
)

// recordedReasons are the values the connector records, per attribute of metadata.yaml.
var recordedReasons = map[string][]string{
	"filtered_reason": {
		auditconv.ReasonStage, auditconv.ReasonReadVerb, auditconv.ReasonVerb, auditconv.ReasonNonResource,
		auditconv.ReasonExcludedResource, auditconv.ReasonExcludedUserAgent, auditconv.ReasonDryRun,
	},
	"dropped_reason": {
		auditconv.ReasonInvalidEvent, auditconv.ReasonInvalidTimestamp, reasonUnknownFormat, reasonMalformedRecord, reasonTruncated, reasonRequestTooLarge,
		reasonNoCluster, auditconv.ReasonConsumerPermanent,
	},
	"diff_skipped_reason": {auditconv.ReasonDiffBaseNotSeen, auditconv.ReasonDiffOutOfOrder},
	"diff_base_result": {
		auditconv.ReasonSharedAdopted, auditconv.ReasonSharedWritten, auditconv.ReasonSharedSuperseded,
		auditconv.ReasonSharedTooLarge, auditconv.ReasonSharedUnreadable, auditconv.ReasonSharedFailed,
	},
	"eviction_reason":     {auditconv.ReasonEvictedCount, auditconv.ReasonEvictedBytes, auditconv.ReasonEvictedTooLarge},
	"format":              {formatNative, formatAKS, formatGKE},
	"input":               {inputConnector},
	"offset_order_reason": {orderSkipGap, orderSkipLate},
	"trace_context_reason": {
		model.TraceparentBadLength, model.TraceparentBadFormat, model.TraceparentBadVersion,
		model.TraceparentZeroID, model.TraceparentTrailing, auditconv.ReasonContextTooMany, auditconv.ReasonContextTracestate,
	},
}

// TestReasonsMatchMetadata keeps the constants and metadata.yaml's enums (and so
// documentation.md) in step.
func TestReasonsMatchMetadata(t *testing.T) {
	enumtest.Check(t, "metadata.yaml", recordedReasons)
}
