package supervisor

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/instance"
	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
	"github.com/nodelocaldns/nodelocaldns/internal/runner"
	"github.com/nodelocaldns/nodelocaldns/internal/selfquery"
)

// /health and /ready, served by dnsserver on the Corefile's health address. A pass or reload that hangs and a
// DNS server that stops answering fail /health: the kubelet then restarts the pod, and while no instance
// listens the ClusterIP fails open to kube-dns.
const (
	// passHung is how long a reconcile pass or a reload may run before /health fails. Every netlink request
	// has its own deadline (nft, link), so only a wedged lock or a CoreDNS restart that never returns gets
	// here.
	passHung = 30 * time.Second
	// probeTimeout bounds /health's own query to our DNS listener, below the kubelet's 1 s default timeout
	// (the manifest sets 5 s).
	probeTimeout = 900 * time.Millisecond
)

// health answers /health and /ready. It is built, with everything it reads, before CoreDNS starts the health
// listener that calls it.
type health struct {
	m         *metrics.Metrics
	node      *instance.Node
	lastPass  *atomicErr // the reconcile runner's last result
	reconcile *runner.Runner
	reload    *runner.Runner
	probeAddr string // host:port of our first DNS listener
	probe     flight // the probe in flight, shared by concurrent /health requests
}

// liveness is /health: the reconcile and reload loops are not stuck in a pass, and CoreDNS's server accepts and
// answers a query on our first listen address. Unlike /ready it says nothing about the node: only whether this
// process works. It must tell a hang from overload, since a restart under load sheds the node's whole cache:
//   - the probe goes over TCP, not UDP. A query flood fills the UDP socket's queue, where a UDP probe would be
//     dropped like any query; TCP has its own accept queue and CoreDNS serves each connection on a goroutine of
//     its own, so under UDP overload the probe still says whether the process schedules, accepts and
//     dispatches. A stopped or deadlocked process answers neither.
//   - concurrent /health requests share one probe (the flight in h.probe): a pod looping on /health costs one probe at a
//     time, not one per request.
//
// The probe asks nothing of a plugin or an upstream, so an upstream outage never fails liveness either.
func (h *health) liveness(ctx context.Context) error {
	for _, r := range []struct {
		name string
		r    *runner.Runner
	}{{"reconcile", h.reconcile}, {"reload", h.reload}} {
		if d, ok := r.r.Busy(); ok && d > passHung {
			h.unhealthy(r.name)
			return fmt.Errorf("%s pass running for %v", r.name, d.Round(time.Second))
		}
	}
	if err := h.probe.do(ctx, func() error { return selfquery.Ask(h.probeAddr, probeTimeout) }); err != nil {
		h.unhealthy("dns")
		return err
	}
	return nil
}

func (h *health) unhealthy(reason string) {
	h.m.LivenessFailures.WithLabelValues(reason).Inc()
}

// flight runs one call at a time and hands its result to every caller that arrived while it ran.
type flight struct {
	mu  sync.Mutex
	cur *call // the call in flight; nil when none runs
}

type call struct {
	done chan struct{} // closed when err is set
	err  error
}

// do runs fn unless a call is in flight, then waits for that one's result, or for ctx.
func (f *flight) do(ctx context.Context, fn func() error) error {
	f.mu.Lock()
	c := f.cur
	if c == nil {
		c = &call{done: make(chan struct{})}
		f.cur = c
		go func() {
			c.err = fn()
			f.mu.Lock()
			f.cur = nil
			f.mu.Unlock()
			close(c.done)
		}()
	}
	f.mu.Unlock()
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return fmt.Errorf("liveness probe: %w", ctx.Err())
	}
}

// readiness is /ready: CoreDNS serves (checked by dnsserver), this instance and every other live one serve
// (node.ready), and the last reconcile pass of the interface succeeded.
func (h *health) readiness() error {
	err := h.node.Ready()
	if err == nil {
		err = h.lastPass.load()
	}
	h.m.Ready.Set(b2f(err == nil))
	return err
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
