package supervisor

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
)

// Bounds on everything that could otherwise spin or hang: repairs fought over by another writer are damped,
// a pass or reload that hangs and a DNS server that stops answering fail /health (the kubelet then restarts
// the pod, and while no instance listens the ClusterIP fails open to kube-dns), and shutdown as a whole ends
// by its deadline.
const (
	// Damping: the fifth repair in a row, each within a second of the last, waits 50 ms, the next 100 ms, up
	// to 5 s. One repair, or repairs far apart, are never delayed.
	dampAfter  = 5
	dampWindow = time.Second
	dampMin    = 50 * time.Millisecond
	dampMax    = 5 * time.Second

	// passHung is how long a reconcile pass or a reload may run before /health fails. Every netlink request
	// has its own deadline (nft, link), so only a wedged lock or a CoreDNS restart that never returns gets
	// here.
	passHung = 30 * time.Second
	// probeTimeout bounds /health's own query to our DNS listener, below the kubelet's 1 s default timeout
	// (the manifest sets 5 s).
	probeTimeout = 900 * time.Millisecond
)

// damping makes the reconcile runner back off from a writer that keeps undoing its repairs, and says so once
// per fight.
func (s *Supervisor) damping() damping {
	return damping{
		after: dampAfter, window: dampWindow, min: dampMin, max: dampMax,
		onDamp: func(wait time.Duration, streak int) {
			switch {
			case wait == 0:
				s.log.Info("repairs no longer undone; reconciling at full speed again", zap.Int("repairs_in_a_row", streak))
			case streak == dampAfter:
				s.log.Warn("another writer keeps undoing our repairs; damping reconcile passes until it stops",
					zap.Int("repairs_in_a_row", streak), zap.Duration("wait", wait), zap.Duration("max_wait", dampMax))
			}
			if wait > 0 {
				withMetrics(s.m, func(m *metrics.Metrics) { m.Damped.Inc() })
			}
		},
	}
}

// liveness is /health: the reconcile and reload loops are not stuck in a pass, and CoreDNS answers a query on
// our first listen address. Unlike /ready it says nothing about the node: only whether this process works.
func (s *Supervisor) liveness(ctx context.Context) error {
	for _, r := range []struct {
		name string
		r    *runner
	}{{"reconcile", s.runner}, {"reload", s.reloads}} {
		if r.r == nil {
			continue
		}
		if d, ok := r.r.busy(); ok && d > passHung {
			s.unhealthy(r.name)
			return fmt.Errorf("%s pass running for %v", r.name, d.Round(time.Second))
		}
	}
	if err := s.probeDNS(ctx); err != nil {
		s.unhealthy("dns")
		return err
	}
	return nil
}

func (s *Supervisor) unhealthy(reason string) {
	withMetrics(s.m, func(m *metrics.Metrics) { m.LivenessFailures.WithLabelValues(reason).Inc() })
}

// probeDNS sends one message with no question to our first listen address over UDP. Any answer proves that
// CoreDNS's server reads, dispatches and writes (it answers FORMERR without consulting a plugin or an
// upstream, so the probe depends on nothing outside this process).
func (s *Supervisor) probeDNS(ctx context.Context) error {
	addr := net.JoinHostPort(s.opts.LocalIPs[0].String(), strconv.Itoa(int(s.opts.DNSPort)))
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	m := new(dns.Msg)
	m.Id = dns.Id()
	c := &dns.Client{Net: "udp", Timeout: probeTimeout}
	r, _, err := c.ExchangeContext(ctx, m, addr)
	switch {
	case err != nil:
		return fmt.Errorf("dns listener %s does not answer: %w", addr, err)
	case r.Id != m.Id:
		return fmt.Errorf("dns listener %s answered another query (id %d, want %d)", addr, r.Id, m.Id)
	}
	return nil
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
