package k8sauditreceiver

import (
	"errors"
	"testing"

	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/kubetrail/kubetrail/internal/auditconv"
	"github.com/kubetrail/kubetrail/receiver/k8sauditreceiver/internal/metadata"
)

// FuzzDecodeWithinBudget feeds arbitrary bodies to the webhook's decoder within a budget of a
// few KiB to 64 MiB, as the webhook decodes them: the decoder never asks past what the budget
// grants and never panics; what it accepts within the budget, it accepts without one, with the
// same events; a refusal other than the budget's and the item limit's is the unlimited
// decoder's refusal too.
func FuzzDecodeWithinBudget(f *testing.F) {
	f.Add([]byte(eventList("a", "b")), uint16(64))
	f.Add([]byte(manyValues(2000)), uint16(16))
	f.Add([]byte(manyValues(20)), uint16(1024))
	f.Add([]byte(tinyItems(300)), uint16(8))
	f.Add([]byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{"sourceIPs":["","",""],"annotations":{"a":"b"}}]}`), uint16(1))
	f.Add([]byte(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","verb":"update","stage":"ResponseComplete","responseObject":{"a":[[[],{}],0]}}`), uint16(2))
	cfg := createDefaultConfig().(*Config)
	cfg.Cluster = "fuzz"
	r, err := newTracesReceiver(receivertest.NewNopSettings(metadata.Type), cfg, &switchConsumer{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte, kib uint16) {
		limit := int64(kib) << 10
		var granted int64
		events, err := r.conv.DecodeBodyLimited(body, nil, auditconv.DecodeLimits{
			MaxItems: 100,
			Charge: func(n int64) bool {
				if granted+n > limit {
					return false
				}
				granted += n
				return true
			},
		})
		if granted > limit {
			t.Fatalf("the decoder was granted %d bytes of a budget of %d", granted, limit)
		}
		plain, plainErr := r.conv.DecodeBody(body, nil)
		var tooMany *auditconv.TooManyItemsError
		switch {
		case err == nil && (plainErr != nil || len(plain) != len(events)):
			t.Fatalf("within the budget: %d events; without: %d, %v", len(events), len(plain), plainErr)
		case err != nil && !errors.Is(err, auditconv.ErrOverBudget) && !errors.As(err, &tooMany) && plainErr == nil:
			t.Fatalf("refused within the budget (%v), accepted without one", err)
		}
	})
}
