package k8sobjectlinkprocessor

import "time"

// clock is injected so that tests drive windows, TTLs and owner waits without sleeping.
type clock interface {
	Now() time.Time
	// Ticker returns a channel that fires every d and a function that stops it.
	Ticker(d time.Duration) (<-chan time.Time, func())
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Ticker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}
