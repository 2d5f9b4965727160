package k8seventsreceiver

import (
	"context"
	"os"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// runWithLeaderElection competes for the configured Lease until ctx ends and runs lead while
// this replica holds it. The receiver takes part in the election itself, with client-go's
// leaderelection package, so that no extension has to be configured next to it.
func runWithLeaderElection(ctx context.Context, logger *zap.Logger, client kubernetes.Interface, cfg *LeaderElectionConfig, lead func(context.Context)) {
	host, _ := os.Hostname()
	identity := host + "_" + string(uuid.NewUUID())
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: cfg.LeaseName, Namespace: cfg.LeaseNamespace},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	// client-go runs OnStartedLeading in a goroutine it does not wait for; handing the term's
	// context over a channel lets this function run the watches itself and so return only
	// after they stopped.
	terms := make(chan context.Context)
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   cfg.LeaseDuration,
			RenewDeadline:   cfg.RenewDeadline,
			RetryPeriod:     cfg.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            cfg.LeaseName,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(term context.Context) {
					select {
					case terms <- term:
					case <-term.Done():
					}
				},
				OnStoppedLeading: func() {
					logger.Info("Lost or released the Events leader lease", zap.String("identity", identity))
				},
			},
		})
		if err != nil {
			// Validate enforces client-go's constraints, so this is not expected after start.
			logger.Error("Cannot run leader election; not watching Events", zap.Error(err))
			return
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			le.Run(ctx)
		}()
		for running := true; running; {
			select {
			case term := <-terms:
				logger.Info("Acquired the Events leader lease; watching", zap.String("identity", identity),
					zap.String("lease", cfg.LeaseNamespace+"/"+cfg.LeaseName))
				lead(term)
			case <-done:
				running = false
			}
		}
	}
}
