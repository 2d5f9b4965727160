package k8sauditreceiver

import (
	"context"
	"sync"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/receiver"
)

// A k8s_audit receiver in a traces pipeline and a logs pipeline is one receiver: one webhook
// port, one converter, one answer per request that covers both outputs. The collector creates
// it once per pipeline kind with the same *Config; instances hands out the one made first.
var instances = struct {
	sync.Mutex
	m map[*Config]*sharedReceiver
}{m: map[*Config]*sharedReceiver{}}

// sharedReceiver starts the receiver on the first Start and stops it on the last Shutdown.
type sharedReceiver struct {
	*auditReceiver
	cfg     *Config
	mu      sync.Mutex
	started int
}

// shared returns the receiver of cfg, creating it with set; attach gives it its consumer.
func shared(set receiver.Settings, cfg *Config, attach func(*auditReceiver)) (*sharedReceiver, error) {
	instances.Lock()
	defer instances.Unlock()
	s, ok := instances.m[cfg]
	if !ok {
		r, err := newAuditReceiver(set, cfg)
		if err != nil {
			return nil, err
		}
		s = &sharedReceiver{auditReceiver: r, cfg: cfg}
		instances.m[cfg] = s
	}
	attach(s.auditReceiver)
	return s, nil
}

func createTraces(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Traces) (receiver.Traces, error) {
	return shared(set, cfg.(*Config), func(r *auditReceiver) { r.next = next })
}

func createLogs(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Logs) (receiver.Logs, error) {
	return shared(set, cfg.(*Config), func(r *auditReceiver) { r.edge = next })
}

func (s *sharedReceiver) Start(ctx context.Context, host component.Host) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started > 0 {
		s.started++
		return nil
	}
	if err := s.auditReceiver.Start(ctx, host); err != nil {
		return err
	}
	s.started = 1
	return nil
}

func (s *sharedReceiver) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started > 1 {
		s.started--
		return nil
	}
	s.started = 0
	instances.Lock()
	delete(instances.m, s.cfg)
	instances.Unlock()
	return s.auditReceiver.Shutdown(ctx)
}
