package k8sobjectlinkprocessor

import k8sclock "k8s.io/utils/clock"

// clock is injected so that tests drive windows, TTLs and owner waits without sleeping: the
// real one is k8s.io/utils/clock's, tests give a fake whose tickers fire when told to.
type clock = k8sclock.WithTicker
