package envelopetest

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"
)

func TestShuffledDelaysAndRepeats(t *testing.T) {
	base := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	var events []json.RawMessage
	for i := range 200 {
		events = append(events, json.RawMessage(fmt.Sprintf(`{"auditID":"%03d","stageTimestamp":%q}`, i, base.Add(time.Duration(i)*time.Second).Format(time.RFC3339Nano))))
	}
	out, err := Shuffled(events, 60*time.Second, 5, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) <= len(events) || len(out) > len(events)*3/2 {
		t.Fatalf("%d delivered for %d events, want about a fifth more", len(out), len(events))
	}
	if slices.EqualFunc(out[:len(events)], events, func(a, b json.RawMessage) bool { return string(a) == string(b) }) {
		t.Fatal("delivered in the original order")
	}
	seen := map[string]bool{}
	for _, e := range out {
		seen[string(e)] = true
	}
	if len(seen) != len(events) {
		t.Fatalf("%d distinct events delivered, want all %d", len(seen), len(events))
	}
}
