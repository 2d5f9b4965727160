package model

import (
	"fmt"
	"time"

	"github.com/kubetrail/kubetrail/internal/objid"
)

// DefaultWindow is the span length of an object span. Thirty minutes bounds the size of one
// trace (a busy Deployment writes thousands of audit events a day) while keeping a typical
// rollout inside a single trace.
const DefaultWindow = 30 * time.Minute

// WindowStart returns the start of the window of the given size that contains t. Windows are
// aligned to the Unix epoch, so every replica computes the same boundaries without coordination.
// A non-positive size is treated as DefaultWindow.
func WindowStart(t time.Time, size time.Duration) time.Time {
	if size <= 0 {
		size = DefaultWindow
	}
	return objid.WindowStart(t, size)
}

// MinWindow is the shortest window a component accepts: shorter ones would make a trace of every
// few requests.
const MinWindow = time.Second

// ValidateWindow is the one rule for every component's `window` setting.
func ValidateWindow(size time.Duration) error {
	if size < MinWindow {
		return fmt.Errorf("window must be at least %s, got %s", MinWindow, size)
	}
	return nil
}
