package k8seventsreceiver

import (
	"testing"

	"github.com/kubetrail/kubetrail/internal/enumtest"
)

// recordedReasons are the values the receiver records, per attribute of metadata.yaml.
var recordedReasons = map[string][]string{
	"dropped_reason": {
		reasonMissingRegarding, reasonMissingTime, reasonMissingUID, reasonTooOld,
		reasonConsumerPermanent, reasonShutdownRefused,
	},
	"duplicate_reason": {duplicateSameResourceVersion, duplicateNoNewOccurrence, duplicateCheckpointed},
	"error_reason":     {errorListWatch, errorForbidden, errorConsumer, errorCheckpointRead, errorCheckpointWrite},
	"restart_reason":   {restartWatchClosed, restartStalled, restartError},
	"series_reason":    {seriesQuiet, seriesWindow, seriesEvicted, seriesDeleted, seriesShutdown},
}

// TestReasonsMatchMetadata keeps the reason constants and metadata.yaml's enums (and so
// documentation.md) in step.
func TestReasonsMatchMetadata(t *testing.T) {
	enumtest.Check(t, "metadata.yaml", recordedReasons)
	// Every constant of telemetry.go is a reason value but reasonKey, the attribute's name.
	enumtest.Declared(t, "telemetry.go", func(name string) bool { return name != "reasonKey" }, recordedReasons)
	enumtest.NoLiterals(t, ".",
		enumtest.Call{Func: "withReason"},
		enumtest.Call{Func: "String", Arg: 1, Key: "reasonKey"},
		enumtest.Call{Func: "duplicate", Arg: 2},
		enumtest.Call{Func: "drop", Arg: 1},
		enumtest.Call{Func: "closeSeries", Arg: 2},
		enumtest.Call{Func: "closeFront", Arg: 0},
		enumtest.Call{Func: "closeAll", Arg: 0},
	)
}
