package auditconv

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kubetrail/kubetrail/internal/auditconv/auditconvtest"
)

func listOf(items ...string) []byte {
	return []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` + strings.Join(items, ",") + `]}`)
}

// charger is a DecodeLimits.Charge that grants up to max bytes (0: any) and sums what it granted.
type charger struct{ granted, max int64 }

func (c *charger) charge(n int64) bool {
	if c.max > 0 && c.granted+n > c.max {
		return false
	}
	c.granted += n
	return true
}

func TestDecodeStopsAtTheItemPastTheLimit(t *testing.T) {
	conv := newConverter(defaultSettings(), "test")
	million := listOf(strings.TrimSuffix(strings.Repeat("{},", 1_000_000), ","))
	var c charger
	p := GetEvents()
	events, err := conv.DecodeBodyLimited(million, *p, DecodeLimits{MaxItems: 1000, Charge: c.charge})
	PutEvents(p, events)
	if tm, ok := errors.AsType[*TooManyItemsError](err); !ok || tm.Max != 1000 {
		t.Fatalf("err = %v, want a TooManyItemsError of 1000", err)
	}
	if IsWrongKind(err) || errors.Is(err, ErrOverBudget) {
		t.Fatalf("err = %v: too many items is neither another kind nor a budget refusal", err)
	}
	// The charge tells how far the decoder went: the list, 1,000 items, rounded up to 64 KiB.
	if most := int64(1001)*EventBytes + chargeStep; c.granted > most {
		t.Fatalf("charged %d bytes, at most %d for 1,000 items: the decoder went on past the limit", c.granted, most)
	}

	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = fmt.Sprintf(auditconvtest.OneCreate, fmt.Sprint(i))
	}
	c = charger{}
	events, err = conv.DecodeBodyLimited(listOf(ids...), nil, DecodeLimits{MaxItems: 1000, Charge: c.charge})
	if err != nil || len(events) != 1000 {
		t.Fatalf("1,000 items against a limit of 1,000: %d events, err %v", len(events), err)
	}
	if least := int64(1001) * EventBytes; c.granted < least {
		t.Fatalf("charged %d bytes for 1,000 events, want at least %d", c.granted, least)
	}
	// A single Event is no list item: a limit of one takes it.
	single := `{"kind":"Event","apiVersion":"audit.k8s.io/v1",` + strings.TrimPrefix(fmt.Sprintf(auditconvtest.OneCreate, "x"), "{")
	if events, err := conv.DecodeBodyLimited([]byte(single), nil, DecodeLimits{MaxItems: 1}); err != nil || len(events) != 1 {
		t.Fatalf("a single Event with a limit of 1: %d events, err %v", len(events), err)
	}
}

// TestDecodeChargesListElements: the lists inside an event (sourceIPs, groups, annotations,
// status causes) cost several times their bytes decoded; each element is charged, and a
// budget that refuses stops the decoder with ErrOverBudget.
func TestDecodeChargesListElements(t *testing.T) {
	conv := newConverter(defaultSettings(), "test")
	const n = 100_000
	empties := strings.TrimSuffix(strings.Repeat(`"",`, n), ",")
	pairs := make([]string, n)
	for i := range pairs {
		pairs[i] = fmt.Sprintf(`"%d":""`, i)
	}
	for name, tc := range map[string]struct {
		item string
		per  int64
	}{
		"sourceIPs":   {`{"sourceIPs":[` + empties + `]}`, stringElemBytes},
		"groups":      {`{"user":{"groups":[` + empties + `]}}`, stringElemBytes},
		"annotations": {`{"annotations":{` + strings.Join(pairs, ",") + `}}`, annotationBytes},
		"causes":      {`{"responseStatus":{"details":{"causes":[` + strings.TrimSuffix(strings.Repeat("{},", n), ",") + `]}}}`, causeBytes},
	} {
		t.Run(name, func(t *testing.T) {
			var c charger
			if _, err := conv.DecodeBodyLimited(listOf(tc.item), nil, DecodeLimits{Charge: c.charge}); err != nil {
				t.Fatal(err)
			}
			if least := n * tc.per; c.granted < least {
				t.Fatalf("charged %d bytes for %d elements, want at least %d", c.granted, n, least)
			}
			c = charger{max: 1 << 20}
			_, err := conv.DecodeBodyLimited(listOf(tc.item), nil, DecodeLimits{Charge: c.charge})
			if !errors.Is(err, ErrOverBudget) {
				t.Fatalf("err = %v, want ErrOverBudget once 1 MiB is charged", err)
			}
		})
	}
}

// TestDecodeBodyHasNoLimits: the file tailer and the connector decode without an item limit.
func TestDecodeBodyHasNoLimits(t *testing.T) {
	body := listOf(strings.TrimSuffix(strings.Repeat("{},", 20_000), ","))
	events, err := newConverter(defaultSettings(), "test").DecodeBody(body, nil)
	if err != nil || len(events) != 20_000 {
		t.Fatalf("%d events, err %v", len(events), err)
	}
}
