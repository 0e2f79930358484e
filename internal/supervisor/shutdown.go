package supervisor

import (
	"context"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"
)

// shutdown stops the loops, then tears down in order within the deadline.
func (s *Supervisor) shutdown(stopRunning context.CancelFunc, wg *sync.WaitGroup) {
	start := time.Now()
	stopRunning()
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), shutdownDeadline)
	defer cancel()
	othersServe := false // another instance keeps serving on our addresses
	switch {
	case !s.manages():
	case !s.leader.Load():
		othersServe = !s.standbyLeaves(ctx)
	default:
		othersServe = s.lease.handOver()
		switch {
		case s.opts.SkipTeardown:
			s.log.Info("-skipteardown: leaving the table and interface in place")
		case othersServe:
			s.log.Info("a successor serves; leaving the table and interface to it")
			s.lease.release() // the successor reconciles from now on, while we finish serving
		default:
			s.teardown()
		}
	}
	if othersServe && s.dns != nil {
		s.passQueries()
	}
	if s.dns != nil {
		done := make(chan error, 1)
		go func() { done <- s.dns.Stop() }()
		select {
		case err := <-done:
			if err != nil {
				s.log.Warn("stop coredns", zap.Error(err))
			}
		case <-ctx.Done():
			s.log.Error("coredns did not stop before the deadline", zap.Duration("deadline", shutdownDeadline))
		}
	}
	if s.lease != nil {
		s.lease.release()
	}
	if s.opts.PIDFile != "" {
		os.Remove(s.opts.PIDFile)
	}
	s.log.Info("stopped", zap.Duration("elapsed", time.Since(start)))
}

// passQueries leaves new queries to the instance that stays (detach.go) and gives CoreDNS a moment to answer
// the ones already queued on our listeners before it stops.
func (s *Supervisor) passQueries() {
	n, err := detachListeners(s.opts.LocalIPs, s.opts.DNSPort)
	if err != nil {
		s.log.Warn("detach dns listeners; queries queued on them when they close are lost", zap.Error(err))
	}
	s.log.Info("detached dns listeners; the other instance answers new queries", zap.Int("listeners", n))
	time.Sleep(drainDelay)
}

// standbyLeaves deregisters a successor that stops before taking over. If the leader had already handed over
// to it, or is gone, the kernel state is ours: tear it down as a leader would, or nobody will. It reports
// whether it took the lease.
func (s *Supervisor) standbyLeaves(ctx context.Context) bool {
	if s.follower == nil {
		return false
	}
	yours, leaderGone := s.follower.leave()
	s.follower = nil
	var l *lease
	var err error
	switch {
	case yours:
		l, err = acquireLease(ctx, leaseName(s.opts.InterfaceName))
	case leaderGone:
		var ok bool
		if l, ok, err = tryAcquireLease(leaseName(s.opts.InterfaceName)); err == nil && !ok {
			return false // another instance leads now
		}
	default:
		return false
	}
	if err != nil {
		s.log.Error("take over the lease to clean up", zap.Error(err))
		return false
	}
	s.becomeLeader(l)
	if s.opts.SkipTeardown {
		s.log.Info("the previous instance handed over; -skipteardown: leaving the table and interface in place")
		return true
	}
	s.log.Info("the previous instance handed over and we are stopping too; removing the table and interface")
	s.teardown()
	return true
}

// teardown deletes the table first, then the interface.
func (s *Supervisor) teardown() {
	if s.table != nil {
		t := time.Now()
		if err := s.table.Teardown(); err != nil {
			s.log.Error("delete nftables table", zap.Error(err), zap.Duration("elapsed", time.Since(t)))
		}
		if s.links != nil {
			time.Sleep(drainDelay)
		}
	}
	if s.links != nil {
		t := time.Now()
		if err := s.links.Remove(s.opts.InterfaceName); err != nil {
			s.log.Error("remove interface", zap.Error(err), zap.Duration("elapsed", time.Since(t)))
		}
	}
}
