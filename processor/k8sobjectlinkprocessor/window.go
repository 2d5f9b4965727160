package k8sobjectlinkprocessor

import (
	"context"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.uber.org/zap"

	"github.com/kubetrail/kubetrail/internal/model"
)

// The receivers derive each activity span's parent (the object span ID) from their own window
// (docs/design.md, Windows); this processor re-derives it from its window. When the two differ the trees
// still come out, but the receivers' IDs no longer line up with the processor's, so traces look
// different with and without the processor and across collectors. The processor cannot read the
// receivers' configurations (in an agent/gateway deployment they are other processes), so it
// checks what arrives: the first activity span of each batch is re-derived with this window, and
// a parent that another window explains is a mismatch, warned about loudly and counted.

// windowCandidates are tried first when naming the sender's window; then every whole minute up
// to a day, then every second up to a minute.
var windowCandidates = []time.Duration{
	time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 20 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 4 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour,
}

// windowMismatchLogEvery bounds the warning; the counter counts every mismatched batch.
const windowMismatchLogEvery = 10 * time.Minute

// senderWindow returns the window, other than own, with which the span's parent was derived, if
// any: the parent is ObjectSpanID(key, floor(start, window)) for the sender's window.
func senderWindow(key model.Key, start time.Time, parent pcommon.SpanID, own time.Duration) (time.Duration, bool) {
	ownStart := model.WindowStart(start, own)
	try := func(w time.Duration) bool {
		ws := model.WindowStart(start, w)
		return w != own && !ws.Equal(ownStart) && model.ObjectSpanID(key, ws) == parent
	}
	for _, w := range windowCandidates {
		if try(w) {
			return w, true
		}
	}
	for m := 1; m <= 24*60; m++ {
		if w := time.Duration(m) * time.Minute; try(w) {
			return w, true
		}
	}
	for sec := 1; sec < 60; sec++ {
		if w := time.Duration(sec) * time.Second; try(w) {
			return w, true
		}
	}
	return 0, false
}

// checkWindow compares one activity span's parent with the object span ID this processor derives
// for it. One SHA-256 per batch when the windows agree.
func (p *objectLinkProcessor) checkWindow(ctx context.Context, obj model.Object, s ptrace.Span, window time.Time) {
	parent := s.ParentSpanID()
	if parent.IsEmpty() || model.ObjectSpanID(obj.Key(), window) == parent {
		return
	}
	// Naming the sender's window costs up to ~1,500 hashes: done at most once per
	// windowMismatchLogEvery; in between, the last finding decides whether to count.
	if _, ok := p.windowLogs.Allow("window", p.clock.Now()); !ok {
		if p.lastSenderWindow.Load() != 0 {
			p.tel.K8sObjectLinkWindowMismatches.Add(ctx, 1)
		}
		return
	}
	sender, ok := senderWindow(obj.Key(), s.StartTimestamp().AsTime(), parent, p.cfg.Window)
	p.lastSenderWindow.Store(int64(sender))
	if !ok {
		// Not a kubetrail receiver's derivation (or a window of more than a day): nothing to say.
		p.logger.Debug("Activity span parent is not derived from the object key; not checking its window",
			zap.String("object", string(obj.Key())))
		return
	}
	p.tel.K8sObjectLinkWindowMismatches.Add(ctx, 1)
	p.logger.Warn("Receivers derive span IDs with another window than k8s_object_link's: set the receivers' window equal to the processor's",
		zap.Duration("processor_window", p.cfg.Window), zap.Duration("receiver_window", sender),
		zap.String("cluster", obj.Cluster), zap.String("object", string(obj.Key())))
}
