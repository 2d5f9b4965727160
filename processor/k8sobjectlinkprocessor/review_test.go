package k8sobjectlinkprocessor

import (
	"testing"
	"time"
)

func TestALateSpanOfAnOldWindowEmitsItsObjectSpanOnce(t *testing.T) {
	// The collector reads an audit log hours after it was written (a restart, a backlog): the
	// window's records must still last long enough to mark the object span as emitted.
	clk := newFakeClock(t0.Add(3 * time.Hour))
	h := newHarness(t, memoryConfig(), clk)
	h.consume(audit(deploy, "late-1", t0.Add(time.Minute)))
	clk.Advance(time.Second)
	h.consume(audit(deploy, "late-2", t0.Add(2*time.Minute)))

	obj := h.one("Deployment default/demo")
	assertChild(t, obj, h.activitySpan("audit late-1"))
	assertChild(t, obj, h.activitySpan("audit late-2"))
}

func TestAUIDLessSpanBeforeItsObjectsUIDSpanInOneBatchJoinsTheSameObject(t *testing.T) {
	// A failed write (no UID) and then a successful one (UID known) of the same new object,
	// delivered in one batch: the batch itself names the UID, so both spans are one object.
	h := newHarness(t, memoryConfig(), newFakeClock(t0))
	h.consume(audit(withoutUID(deploy), "conflict", t0.Add(time.Second)), audit(deploy, "create", t0.Add(2*time.Second)))

	obj := h.one("Deployment default/demo")
	assertChild(t, obj, h.activitySpan("audit create"))
	assertChild(t, obj, h.activitySpan("audit conflict"))
}
