package supervisor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/instance"
	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
	"github.com/nodelocaldns/nodelocaldns/internal/runner"
	"github.com/nodelocaldns/nodelocaldns/internal/sockholder"
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
	if err := h.probe.do(ctx, func() error { return probeDNS(h.probeAddr) }); err != nil {
		h.unhealthy("dns")
		return err
	}
	return nil
}

func (h *health) unhealthy(reason string) {
	h.m.LivenessFailures.WithLabelValues(reason).Inc()
}

// probeDNS sends one message with no question to addr over TCP. Any answer proves that CoreDNS's server
// accepts, reads, dispatches and writes (it answers without consulting a plugin or an upstream, so the probe
// depends on nothing outside this process).
//
// Only an answer from this process's own listener counts. During a surge another instance listens on addr too
// (SO_REUSEPORT) and the kernel hands each new connection to either; counting the other's answer (or its
// silence, when it is the wedged one) is the cross-talk the kubelet's probes avoid by the health socket. So
// attempts, each a new connection and so a new draw from the group, start probeStagger apart, and at once
// after one the other instance answered or that failed without timing out (a reload resets the connections
// the old servers held); the first answer from our own listener ends the probe. Alone on the node, the first
// attempt is the only one.
func probeDNS(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	results := make(chan error, probeAttempts)
	launched, pending := 0, 0
	launch := func() bool {
		if launched == probeAttempts {
			return false
		}
		launched++
		pending++
		go func() { results <- exchangeOwnTCP(ctx, addr) }()
		return true
	}
	launch()
	tick := time.NewTicker(probeStagger)
	defer tick.Stop()
	var last error
	for {
		select {
		case err := <-results:
			pending--
			if err == nil {
				return nil
			}
			last = err
			if ctx.Err() == nil && !isTimeout(err) && !launch() && pending == 0 {
				return last
			}
		case <-tick.C:
			launch()
		case <-ctx.Done():
			if last == nil || !isTimeout(last) {
				last = fmt.Errorf("dns listener %s does not answer over tcp: no answer from this process's listener within %v (%d connections): %w",
					addr, probeTimeout, launched, context.DeadlineExceeded)
			}
			return last
		}
	}
}

// Attempts of one probe (probeDNS): with two instances on the node, each lands on ours with even odds, so all
// eight miss it once in 256 probes, and the kubelet, which needs two failures in a row, kills a healthy
// instance beside a wedged one about once in 65,000 probe pairs; the wedged one is killed within 15 s.
const (
	probeAttempts = 8
	probeStagger  = 100 * time.Millisecond
)

// errNotOurs is an answer from another instance's listener on the shared address.
var errNotOurs = errors.New("answered by another process's listener (another instance on the node)")

// exchangeOwnTCP sends the probe on a new connection and says whether our own listener answered it.
func exchangeOwnTCP(ctx context.Context, addr string) error {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("dns listener %s does not answer over tcp: %w", addr, err)
	}
	defer nc.Close()
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	m := new(dns.Msg)
	m.Id = dns.Id()
	co := &dns.Conn{Conn: nc}
	if err := co.WriteMsg(m); err != nil {
		return fmt.Errorf("dns listener %s does not answer over tcp: %w", addr, err)
	}
	r, err := co.ReadMsg()
	switch {
	case err != nil:
		return fmt.Errorf("dns listener %s does not answer over tcp: %w", addr, err)
	case r.Id != m.Id:
		return fmt.Errorf("dns listener %s answered another query (id %d, want %d)", addr, r.Id, m.Id)
	}
	// The listener that answered has accepted the connection: its socket is open in whichever process has it,
	// unless that process closed it since. Only a process proved to hold it is another's (sockholder.PeerOwner):
	// a far end closed at once after answering is a stopping server's, ours during a reload (the old servers
	// close what they accepted), which must never count against us; the other instance's only while it stops,
	// when its answer still says the node's DNS is served.
	switch o, err := sockholder.PeerOwner(nc); {
	case err != nil:
		return fmt.Errorf("dns listener %s: %w", addr, err)
	case o == sockholder.OwnerOther:
		return fmt.Errorf("dns listener %s: %w", addr, errNotOurs)
	}
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
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
