package supervisor

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
)

// Leadership between overlapping instances (see lease.go for the protocol): the leader reconciles the kernel,
// a standby serves DNS beside it and takes over when the leader's lease goes away.

// becomeLeader records that this instance holds the lease and so manages the kernel state.
func (s *Supervisor) becomeLeader(l *lease) {
	s.lease = l
	s.leader.Store(true)
	s.setGauge(func(m *metrics.Metrics) { m.Leader.Set(1) })
}

// registerStandby registers with the leader as its successor, or becomes the leader when the leader is gone.
func (s *Supervisor) registerStandby(ctx context.Context) error {
	name := leaseName(s.opts.InterfaceName)
	for {
		l, ok, err := tryAcquireLease(name)
		if err != nil {
			return err
		}
		if ok {
			s.becomeLeader(l)
			s.log.Info("the previous instance went away before we registered; managing this node")
			return nil
		}
		f, err := follow(name)
		if err == nil {
			s.follower = f
			s.log.Info("registered as successor")
			return nil
		}
		s.log.Debug("register as successor", zap.Error(err))
		select {
		case <-ctx.Done():
			return fmt.Errorf("register as successor: %w", context.Cause(ctx))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// awaitHandover waits for the current leader to go away, then takes over with a full pass. Another
// successor may win the lease first; then this one follows the new leader.
func (s *Supervisor) awaitHandover(ctx context.Context) {
	name := leaseName(s.opts.InterfaceName)
	for s.follower.wait(ctx) {
		t := time.Now()
		l, ok, err := tryAcquireLease(name)
		if err != nil {
			s.log.Error("take over the lease", zap.Error(err))
		}
		if ok {
			s.follower = nil
			s.becomeLeader(l)
			s.log.Info("took over from the previous instance", zap.Duration("elapsed", time.Since(t)))
			s.runner.Trigger("handover")
			return
		}
		if err := s.registerStandby(ctx); err != nil {
			return
		}
		if s.leader.Load() {
			s.runner.Trigger("handover")
			return
		}
	}
}
