package fastpath

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/miekg/dns"
	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/listenlimit"
)

// tcpServer serves DNS over TCP on one of CoreDNS's addresses in CoreDNS's place, so that the per-source cap on
// connections is enforced where they are accepted (issue 39): its listeners are opened through listenlimit,
// whose Accept resets a connection from a source that holds the cap already, before anything is started for
// it. Queries go to CoreDNS's server as its own TCP serving sends them (dnsserver.Server.Serve): miekg/dns's
// server (RFC 7766 framing, pipelining, a goroutine per connection) with the server's read, write and idle
// timeouts and query limit, and a handler that calls the server's ServeDNS with the same context. Hits are not
// answered here: the chain's cache answers them, so a TCP answer is CoreDNS's own, never truncated.
//
// The kernel contract. CoreDNS's listener and ours are one SO_REUSEPORT group. Since Linux 6.1 (commit
// b261eda84ec1, "soreuseport: Fix socket selection for SO_INCOMING_CPU"), once a member of a group has
// SO_INCOMING_CPU set, the kernel gives a new connection to a member whose SO_INCOMING_CPU is the CPU handling
// the SYN, when there is one (reuseport_select_sock_by_hash). Ours are one listener per online CPU, each set
// to its CPU, so every connection comes to one of ours; CoreDNS's listener keeps its place and its accept loop
// and gets none, and nothing of CoreDNS's is changed: its reloads hand its listener over as ever. Should ours
// close (the fast path steps aside, or the agent stops), CoreDNS's gets every connection again at once: the
// address never lacks a listener. A second instance's listeners in the group (a rollout) share the
// connections with ours, CPU by CPU. Before 6.1 the group spreads connections by hash alone: CoreDNS's
// listener gets its share (one in CPUs+1), which internal/connlimit bounds as before.
type tcpServer struct {
	log     *zap.Logger
	addr    netip.AddrPort
	servers []*dns.Server // one per listener, each listener for one CPU

	mu  sync.Mutex
	srv *dnsserver.Server // the running configuration's server for addr
}

// tcpShutWait bounds how long closing waits for the connections being served to finish their query.
const tcpShutWait = time.Second

// openTCP opens one listener per CPU on addr through pool and serves them with srv.
func openTCP(pool *listenlimit.Pool, addr netip.AddrPort, srv *dnsserver.Server, cpus []int) (*tcpServer, error) {
	t := &tcpServer{addr: addr, srv: srv}
	if err := t.listen(pool, cpus, t); err != nil {
		return nil, err
	}
	return t, nil
}

// listen opens t's listeners, one per CPU in cpus, each served with h (t itself, or a test's handler).
func (t *tcpServer) listen(pool *listenlimit.Pool, cpus []int, h dns.Handler) error {
	for _, cpu := range cpus {
		ln, err := pool.OpenSteered(t.addr.String(), cpu)
		if err != nil {
			t.close()
			return fmt.Errorf("listen tcp %s for cpu %d: %w", t.addr, cpu, err)
		}
		started := make(chan struct{})
		s := &dns.Server{Listener: ln, Net: "tcp", ReadTimeout: t.srv.ReadTimeout, WriteTimeout: t.srv.WriteTimeout,
			MaxTCPQueries: t.srv.MaxTCPQueries, IdleTimeout: t.idleTimeout, Handler: h,
			NotifyStartedFunc: func() { close(started) }}
		served := make(chan error, 1)
		go func() { served <- s.ActivateAndServe() }()
		select {
		case <-started:
		case err := <-served:
			ln.Close()
			t.close()
			return fmt.Errorf("serve tcp %s: %w", t.addr, err)
		}
		t.servers = append(t.servers, s)
	}
	return nil
}

// ServeDNS is dnsserver.Server.Serve's handler, on the running configuration's server.
func (t *tcpServer) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	t.mu.Lock()
	s := t.srv
	t.mu.Unlock()
	ctx := context.WithValue(context.Background(), dnsserver.Key{}, s)
	ctx = context.WithValue(ctx, dnsserver.LoopKey{}, 0)
	s.ServeDNS(ctx, w, r)
}

func (t *tcpServer) idleTimeout() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.srv.IdleTimeout
}

// update follows a reloaded instance that serves addr with srv. The read and write timeouts and the query
// limit stay the first configuration's: miekg/dns reads them unlocked.
func (t *tcpServer) update(srv *dnsserver.Server) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.srv = srv
}

// close stops the listeners (CoreDNS's gets the new connections from then on) and gives the connections being
// served tcpShutWait to finish, then closes them.
func (t *tcpServer) close() { t.closeWithin(tcpShutWait) }

// closeWithin closes every listener at once and then waits up to d for the connections being served. A
// listener leaving the SO_REUSEPORT group resets the connections queued on it, not yet accepted; closed one
// after the other, each after the one before had waited for its connections, they would reset at as many
// instants, up to d apart, and a listener left open meanwhile takes on new connections only to reset them.
func (t *tcpServer) closeWithin(d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range t.servers {
		wg.Go(func() { // ShutdownContext closes the listener first, then waits
			if err := s.ShutdownContext(ctx); err != nil {
				s.Listener.Close()
			}
		})
	}
	wg.Wait()
}

// syncTCP makes the TCP servers follow inst (cls its listeners): one on each address the fast path could serve
// whose server is known and where CoreDNS listens on TCP too, whether or not its UDP is taken over; p.mu held.
func (p *Path) syncTCP(cls []coreListener, inst *caddy.Instance) {
	if p.tcpPool == nil {
		return
	}
	tcp := tcpAddrs(inst)
	keep := map[netip.AddrPort]bool{}
	for _, cl := range cls {
		if cl.reason != "" || cl.srv == nil || !tcp[cl.addr] {
			continue
		}
		log := p.log.With(zap.String("addr", cl.addr.String()), zap.String("proto", "tcp"))
		if t := p.tcp[cl.addr]; t != nil {
			t.update(cl.srv)
			keep[cl.addr] = true
			continue
		}
		cpus, err := onlineCPUs()
		if err != nil {
			log.Warn("fast path steps aside", zap.Error(err))
			continue
		}
		t, err := openTCP(p.tcpPool, cl.addr, cl.srv, cpus)
		if err != nil {
			log.Warn("fast path steps aside", zap.Error(err))
			continue
		}
		p.tcp[cl.addr] = t
		keep[cl.addr] = true
		log.Info("fast path serving", zap.Int("listeners", len(cpus)))
	}
	for addr, t := range p.tcp {
		if !keep[addr] {
			t.close()
			delete(p.tcp, addr)
		}
	}
}

// tcpAddrs are inst's TCP listeners' addresses.
func tcpAddrs(inst *caddy.Instance) map[netip.AddrPort]bool {
	out := map[netip.AddrPort]bool{}
	for _, sl := range inst.Servers() {
		if a, ok := sl.Addr().(*net.TCPAddr); ok { // Addr is the listener's, LocalAddr the packet conn's
			ap := a.AddrPort()
			out[netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())] = true
		}
	}
	return out
}

// onlineCPUsFile lists the CPUs the kernel runs on ("0-3,8"): the node's, not this container's cpuset, since
// the CPU that handles a SYN is any of the node's. Online rather than possible: a VM may count many more
// possible CPUs than it has, and a listener costs a socket and a goroutine. A CPU brought online later has no
// listener of ours: the group spreads its connections by hash, CoreDNS's listener among them, and
// internal/connlimit bounds that share until the fast path next opens its listeners (a reload that adds the
// address, or a restart).
const onlineCPUsFile = "/sys/devices/system/cpu/online"

func onlineCPUs() ([]int, error) {
	b, err := os.ReadFile(onlineCPUsFile)
	if err != nil {
		return nil, fmt.Errorf("list cpus: %w", err)
	}
	cpus, err := parseCPUList(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("list cpus: %s: %w", onlineCPUsFile, err)
	}
	return cpus, nil
}

// parseCPUList parses the kernel's CPU list format: ranges and single CPUs separated by commas.
func parseCPUList(s string) ([]int, error) {
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("cpu list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("cpu list %q: bad range %q", s, part)
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	if len(out) == 0 || len(out) > maxCPUs {
		return nil, fmt.Errorf("cpu list %q: %d cpus", s, len(out))
	}
	return out, nil
}

// maxCPUs bounds the listeners per address (and their goroutines, idle in Accept).
const maxCPUs = 1024
