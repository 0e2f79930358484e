package supervisor

import (
	"os"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// shutdown stops the loops, leaves the node (node.leave), hands our listeners over when another instance
// stays, and stops CoreDNS, all within shutdownDeadline: a step still running then is abandoned and the
// process exits (the kernel removes our table with our socket).
func (s *Supervisor) shutdown(l *loops) {
	start := time.Now()
	b := newBounded(s.log.Named("shutdown"), shutdownDeadline)
	l.stop()
	// A loop stuck in a pass (a CoreDNS reload that never returns) must not keep us from leaving the node.
	b.do("stop loops", loopsStop, l.wg.Wait)
	var othersServe atomic.Bool
	b.do("leave the node", 0, func() {
		others, err := s.node.Leave(s.opts.SkipTeardown, drainDelay)
		if err != nil {
			s.log.Error("leave the node", zap.Error(err))
		}
		othersServe.Store(others)
	})
	if s.dns != nil {
		if othersServe.Load() {
			b.do("hand queries over", 0, s.passQueries)
		}
		// The last instance out has stopped CoreDNS already, before the interface went (lastOut); this waits
		// for that same stop.
		b.do("stop coredns", 0, func() { <-s.stopDNS() })
	}
	b.do("delete the drain table", 0, s.node.EndDrain)
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
	s.clock.Sleep(drainDelay)
}

// lastOut is the last instance out's drain, before the interface goes (node.leave). New UDP queries leave our
// listeners (detach.go): finding no socket bound to the addresses, they are sent to kube-dns by the link-local
// fallback (the ClusterIP's by kube-proxy, our table being gone). CoreDNS is given drain to read what is queued
// on them, then stopped, which waits for the answers in flight (a miss waits for its upstream, a few hundred ms
// for an external name) to be written, within answersDrain. Every answer leaves from the address its query was
// sent to, so the interface must stay until then: an answer written after it went is dropped, and its client
// waits out its timeout. Without the detach, queries sent after the interface went would still find our
// sockets bound to the gone addresses, pass the fallback's gate and be lost until CoreDNS stops.
func (s *Supervisor) lastOut(drain time.Duration) {
	n, err := detachListeners(s.opts.LocalIPs, s.opts.DNSPort)
	if err != nil {
		s.log.Warn("detach dns listeners; queries queued on them when they close are lost", zap.Error(err))
	}
	s.log.Info("detached dns listeners; new queries go to kube-dns", zap.Int("listeners", n))
	s.clock.Sleep(drain)
	if s.dns == nil {
		return // start-up failed before CoreDNS started: nothing is in flight
	}
	t := time.Now()
	within := answersDrain + s.dns.Lameduck() // Stop waits out the Corefile's lameduck first
	select {
	case <-s.stopDNS():
		s.log.Info("answered the queries in flight", zap.Duration("elapsed", time.Since(t)))
	case <-time.After(within):
		s.log.Warn("coredns still answering after the drain; answers written from now on are lost", zap.Duration("drain", within))
	}
}

// stopDNS stops CoreDNS once, and returns a channel closed when it has stopped: the last instance out stops it
// before its interface goes (lastOut), and shutdown waits for the same stop.
func (s *Supervisor) stopDNS() <-chan struct{} {
	s.dnsStop.Do(func() {
		s.dnsStopped = make(chan struct{})
		go func() {
			defer close(s.dnsStopped)
			if err := s.dns.Stop(); err != nil {
				s.log.Warn("stop coredns", zap.Error(err))
			}
		}()
	})
	return s.dnsStopped
}

// bounded runs each step of shutdown in order until the deadline; a step still running then is abandoned
// (the process exits, and the kernel removes our table with our netlink socket anyway).
type bounded struct {
	log      *zap.Logger
	deadline time.Time
}

func newBounded(log *zap.Logger, d time.Duration) *bounded {
	return &bounded{log: log, deadline: time.Now().Add(d)}
}

// do runs step unless the deadline has passed, and waits for it at most until the deadline, or for at most
// within when that is sooner (0: no cap of its own).
func (b *bounded) do(name string, within time.Duration, step func()) bool {
	left := time.Until(b.deadline)
	if within > 0 {
		left = min(left, within)
	}
	if left <= 0 {
		b.log.Error("shutdown deadline passed; skipping step", zap.String("step", name))
		return false
	}
	done := make(chan struct{})
	go func() { defer close(done); step() }()
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		b.log.Error("shutdown step did not finish before the deadline; abandoning it", zap.String("step", name))
		return false
	}
}
