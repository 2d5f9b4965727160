package auditconv

import (
	"errors"
	"fmt"
)

// errOverBudget says the budget a body was decoded against (DecodeLimits.Charge) refused room
// for more decoded events.
var errOverBudget = errors.New("the decoded events would pass the memory budget")

// errValuesOverBudget is errOverBudget refused for the values of a body being indexed: a body of
// millions of tiny values (`[0,0,…]`) costs an index node for each of them, many times its
// bytes.
var errValuesOverBudget = fmt.Errorf("the values of a body: %w", errOverBudget)

// TooManyItemsError says an EventList had more items than DecodeLimits.MaxItems: decoding
// stopped at the first item past the limit.
type TooManyItemsError struct{ Max int }

// Error names the limit.
func (e *TooManyItemsError) Error() string {
	return fmt.Sprintf("more than %d items in the EventList", e.Max)
}

// eventBytes estimates the memory one decoded event holds, besides the bytes of its body, until
// its batch is converted and consumed: the Event (400 bytes) twice over (a slice grown by append
// has up to twice its length in capacity, and the array it outgrew stays until collected), the
// objectRef and responseStatus storage (192), and the span the converter makes of it (about
// 1.4 KB of pdata for a Metadata-level create: the decode and conversion of 10,000 minimal
// traced events leave some 1.85 KB each on the heap besides the body, by runtime.MemStats).
// An item of two bytes ({} and its comma) costs as much: it is the item count, not the body's
// size, that this charges for.
const eventBytes = 2 << 10

// chargeStep is the least a decoder asks its budget for at a time: one lock of the budget per
// 32 events, not one per event.
const chargeStep = 64 << 10

// decodeCost counts the items of a body and estimates the memory its decoded events hold, and
// asks the caller's budget for it as it grows (see DecodeLimits). A nil *decodeCost counts
// nothing: the file tailer and the connector decode without limits.
type decodeCost struct {
	maxItems int
	charge   func(int64) bool

	items             int
	estimate, charged int64
	// nodes is how many index nodes of the body being indexed have been charged.
	nodes int
}

// item counts one more event, failing past maxItems before anything of it is decoded.
func (c *decodeCost) item() error {
	if c == nil {
		return nil
	}
	if c.maxItems > 0 && c.items >= c.maxItems {
		return &TooManyItemsError{Max: c.maxItems}
	}
	c.items++
	return c.add(eventBytes)
}

// add adds n bytes to the estimate and asks the budget for room when it passes what was
// granted.
func (c *decodeCost) add(n int64) error {
	if c == nil {
		return nil
	}
	c.estimate += n
	if c.estimate <= c.charged || c.charge == nil {
		return nil
	}
	step := max(chargeStep, c.estimate-c.charged)
	if !c.charge(step) {
		return errOverBudget
	}
	c.charged += step
	return nil
}
