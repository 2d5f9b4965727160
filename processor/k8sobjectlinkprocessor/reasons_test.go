package k8sobjectlinkprocessor

import (
	"testing"

	"github.com/kubetrail/kubetrail/internal/enumtest"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/idmap"
)

// recordedValues are the values the processor records, per attribute of metadata.yaml.
var recordedValues = map[string][]string{
	"assignment_result":    {resultCreated, resultReused},
	"lookup_result":        {resultHit, resultMiss, resultError, resultForbidden},
	"lookup_source":        {sourceRelation, sourceAPIServer},
	"reconcile_result":     {idmap.ResultWritten, idmap.ResultConflict},
	"join_source":          {sourceMemory, sourceRedis},
	"drop_reason":          {reasonDuplicate, reasonOwedFull, reasonShutdownRefused, reasonUntrustedClaim},
	"mark_result":          {resultTakenOver, resultUnconfirmed},
	"mark_kind":            {kindDuplicate, kindGraft, kindContinuation},
	"untrusted_result":     {resultFollowed, resultPassed, resultWaiting, resultLinked},
	"continued_span":       {spanActivity, spanContinuation},
	"trace_state_result":   {resultFollowed, resultInvalid},
	"release_reason":       {reasonOwnerFound, reasonHoldTimeout, reasonShutdown, reasonHoldFull},
	"eviction_reason":      {idmap.ReasonMaxEntries, idmap.ReasonMaxBytes},
	"join_eviction_reason": {reasonJoinExpired, idmap.ReasonMaxEntries, idmap.ReasonMaxBytes, reasonJoinPendingFull},
	"redis_error_reason":   {idmap.ReasonUnavailable, idmap.ReasonTimeout, idmap.ReasonAuth, idmap.ReasonReply, idmap.ReasonPendingFull},
}

// TestAttributeValuesMatchMetadata keeps the attribute value constants (the processor's and the
// ID map's) and metadata.yaml's enums (and so documentation.md) in step.
func TestAttributeValuesMatchMetadata(t *testing.T) {
	enumtest.Check(t, "metadata.yaml", recordedValues)
	isKey := map[string]bool{attrResult: true, attrSource: true, attrReason: true, attrSpan: true, attrKind: true}
	consts := enumtest.StringConsts(t, "telemetry.go")
	enumtest.Declared(t, "telemetry.go", func(name string) bool { return !isKey[consts[name]] }, recordedValues)
	enumtest.Declared(t, "internal/idmap/telemetry.go", func(string) bool { return true }, recordedValues)
	var calls []enumtest.Call
	for _, key := range []string{"attrResult", "attrSource", "attrReason", "attrSpan", "attrKind"} {
		calls = append(calls, enumtest.Call{Func: "String", Arg: 1, Key: key})
	}
	calls = append(calls, enumtest.Call{Func: "countGuests", Arg: 1}, enumtest.Call{Func: "metricSource"}, enumtest.Call{Func: "onEvict"},
		enumtest.Call{Func: "runError"}, enumtest.Call{Func: "RedisError"}, enumtest.Call{Func: "RedisReconciled"})
	enumtest.NoLiterals(t, ".", calls...)
	enumtest.NoLiterals(t, "internal/idmap", calls...)
}
