// Package retry holds the one retry policy of kubetrail's components: after a failure, wait an
// initial delay, double it after every further failure up to a cap, and start again from the
// initial delay once an attempt succeeds. Each loop that uses it retries one peer (the
// apiserver, the next consumer, Redis) from one goroutine, so there is no herd of clients to
// spread and no jitter; client-go's wait.Backoff does the arithmetic.
package retry

import (
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Exponential returns the delays of one run of failures: initial, 2×initial, 4×initial … and
// maxDelay from the first doubling that would exceed it on. Each Step returns the next delay; a
// loop starts a new run (after a success) by calling Exponential again.
func Exponential(initial, maxDelay time.Duration) wait.Backoff {
	return wait.Backoff{Duration: initial, Factor: 2, Cap: maxDelay, Steps: math.MaxInt32}
}
