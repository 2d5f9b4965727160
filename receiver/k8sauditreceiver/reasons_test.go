package k8sauditreceiver

import (
	"strings"
	"testing"

	"github.com/kubetrail/kubetrail/internal/auditconv"
	"github.com/kubetrail/kubetrail/internal/enumtest"
	"github.com/kubetrail/kubetrail/internal/model"
)

// recordedReasons are the values the receiver records, per attribute of metadata.yaml.
var recordedReasons = map[string][]string{
	"rejected_reason": {
		reasonMalformedJSON, reasonWrongKind, reasonTooLarge, reasonReadError, reasonBadEncoding,
		reasonMethod, reasonNotFound, reasonNoCluster, reasonClientNotAllowed, reasonPipelineBusy,
		reasonPipelineFailure, reasonInFlightBytes, reasonTooManyEvents, reasonTooManyValues, reasonTooSlow,
	},
	"refused_reason": {reasonTooManyConnections, reasonClientNotAllowed},
	"filtered_reason": {
		auditconv.ReasonStage, auditconv.ReasonReadVerb, auditconv.ReasonVerb, auditconv.ReasonNonResource, auditconv.ReasonExcludedResource,
		auditconv.ReasonExcludedUserAgent, auditconv.ReasonDryRun,
	},
	"dropped_reason": {
		auditconv.ReasonInvalidEvent, auditconv.ReasonInvalidTimestamp, reasonMalformedLine, reasonLineTooLong,
		auditconv.ReasonConsumerPermanent,
	},
	"input":               {inputNameWebhook, inputNameFile},
	"diff_skipped_reason": {auditconv.ReasonDiffBaseNotSeen, auditconv.ReasonDiffOutOfOrder},
	"diff_base_result": {
		auditconv.ReasonSharedAdopted, auditconv.ReasonSharedWritten, auditconv.ReasonSharedSuperseded,
		auditconv.ReasonSharedTooLarge, auditconv.ReasonSharedUnreadable, auditconv.ReasonSharedFailed,
	},
	"eviction_reason": {auditconv.ReasonEvictedCount, auditconv.ReasonEvictedBytes, auditconv.ReasonEvictedTooLarge},
	"trace_context_reason": {
		model.TraceparentBadLength, model.TraceparentBadFormat, model.TraceparentBadVersion,
		model.TraceparentZeroID, model.TraceparentTrailing, auditconv.ReasonContextTooMany, auditconv.ReasonContextTracestate,
	},
}

// TestReasonsMatchMetadata keeps the reason constants and metadata.yaml's enums (and so
// documentation.md) in step.
func TestReasonsMatchMetadata(t *testing.T) {
	enumtest.Check(t, "metadata.yaml", recordedReasons)
	enumtest.Declared(t, "telemetry.go", func(name string) bool { return strings.HasPrefix(name, "reason") }, recordedReasons)
	enumtest.Declared(t, "../../internal/model/links.go", func(name string) bool { return strings.HasPrefix(name, "Traceparent") }, recordedReasons)
	enumtest.Declared(t, "../../internal/auditconv/api.go", func(name string) bool { return strings.HasPrefix(name, "reason") }, recordedReasons)
	enumtest.NoLiterals(t, "../../internal/auditconv",
		enumtest.Call{Func: "drop"},
		enumtest.Call{Func: "filter"},
		enumtest.Call{Func: "badContext"},
		enumtest.Call{Func: "onEvict"},
	)
	enumtest.NoLiterals(t, ".",
		enumtest.Call{Func: "withReason"},
		enumtest.Call{Func: "addWithReason", Arg: 3},
		enumtest.Call{Func: "reject", Arg: 3},
		enumtest.Call{Func: "drop"},
		enumtest.Call{Func: "filter"},
		enumtest.Call{Func: "badContext"},
		enumtest.Call{Func: "onEvict"},
	)
}
