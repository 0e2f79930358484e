// Package dnsserver runs CoreDNS embedded in the agent: started from a rendered Corefile, reloaded in-process
// through its caddy instance, and stopped, without coremain (which registers global flags, traps signals and
// may call os.Exit).
//
// caddy keeps its registry of plugins and server types per process (plugins.go registers ours once); what a
// configuration's directives ask of the Server travels in the caddy instance they configure (pending.go), and
// what they count into is lent to them by the Server starting them (env.go: the registry it was given), so a
// Server shares no state with anything but the instances it started. CoreDNS and caddy log through the standard
// logger, which the process's owner routes (LogWriter). A reload that fails (a Corefile that does not parse, a plugin that fails to start, an address that cannot be
// bound) leaves the running instance serving: caddy only swaps instances once the new one listens, and the
// listeners of unchanged addresses are handed over, so no UDP query is dropped by a reload. A TCP connection
// that the old instance accepted in the instant it stops can be closed unanswered (CoreDNS's restart behaviour);
// DNS clients retry such a query on a new connection, and the e2e tests count these retries.
//
// May touch: the sockets it listens on, with the health socket's file.
package dnsserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/clients"
	"github.com/nodelocaldns/nodelocaldns/internal/connlimit"
	"github.com/nodelocaldns/nodelocaldns/internal/fastpath"
	"github.com/nodelocaldns/nodelocaldns/internal/handover"
	"github.com/nodelocaldns/nodelocaldns/internal/listenlimit"
	"github.com/nodelocaldns/nodelocaldns/internal/sockholder"
)

// Options are the Server's switches.
type Options struct {
	// FastPath, when set, answers cache hits before CoreDNS's server (internal/fastpath), counting into these
	// metrics. The agent sets it unless the environment turns the fast path off (fastpath.Enabled); nil,
	// CoreDNS serves every query itself.
	FastPath *fastpath.Metrics
	// Clients, when set, counts every answer per client (internal/clients): the fast path's hits in its readers,
	// the rest in a handler in front of each cached block's chain; the health socket serves it at /clients.
	// nil counts nothing.
	Clients *clients.Accounting
	// HealthSocket is the path of a Unix socket serving /health and /ready (health_socket.go), for the kubelet's
	// exec probes; "" serves them on the Corefile's health address only.
	HealthSocket string
	// ClientSubnetTo, when valid, is the cluster DNS (kube-dns-upstream's ClusterIP, the agent's
	// -upstream-client-subnet): the queries our forward sends it carry the asking client's address as EDNS0
	// Client Subnet (internal/forward's clientsubnet.go), so that kube-dns's dnstap names the pod.
	ClientSubnetTo netip.Addr
	// Registerer is where our directives (cache, fairshare, prometheus) register their series (env.go), and
	// Gatherer what the Corefile's `prometheus` listeners serve. The agent passes the default registry for both:
	// CoreDNS's own plugins register into it at init. A nil Registerer is a registry of the Server's own, and
	// a nil Gatherer the Registerer when it is a *prometheus.Registry.
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer
	// TCPLimits caps the TCP connections CoreDNS holds (internal/connlimit); zero, connlimit.Default().
	TCPLimits connlimit.Limits
}

// Server is the embedded CoreDNS.
type Server struct {
	log  *zap.Logger
	fast *fastpath.Path // nil when Options.FastPath is nil
	// clients is Options.Clients.
	clients *clients.Accounting
	// clientSubnetTo is Options.ClientSubnetTo.
	clientSubnetTo netip.Addr
	// conns caps the TCP connections CoreDNS holds (internal/connlimit) to tcpLimits, while it runs.
	conns     *connlimit.Limiter
	tcpLimits connlimit.Limits
	// env is what our directives count into (env.go); gatherer what the `prometheus` listeners serve.
	env      *directiveEnv
	gatherer prometheus.Gatherer

	mu       sync.Mutex // one start, reload or stop at a time
	inst     *caddy.Instance
	path     string
	corefile []byte
	health   map[string]*httpListener
	// metrics serves CoreDNS's series on the `prometheus` directives' addresses (prometheus.go).
	metrics map[string]*httpListener
	// One pool per kind of listener, each bounding all its addresses together, across reloads (listenlimit).
	healthPool, metricsPool *listenlimit.Pool
	// socket serves the health socket at socketPath while CoreDNS runs (nil when off or stopped).
	socketPath string
	socket     *httpListener
	lameduck   atomic.Int64 // a time.Duration; read without mu (Lameduck), so a hung reload cannot block it

	ready  atomic.Pointer[func() error]
	live   atomic.Pointer[func(context.Context) error]
	onLoop atomic.Pointer[func(*LoopError)]
	// listening is called once Start's listeners are bound, before the loop probes go (OnListening).
	listening func() error
	gen       int // configurations started so far: 1 after Start, +1 per successful Reload

	loopChecks []chan struct{} // the running configuration's loop probes (loop.go)
}

// OnLoop sets what is called (once per configuration, from a DNS handler goroutine: it must not block on the
// server) when the `loop` directive finds a forwarding loop. Without it the loop is only logged.
func (s *Server) OnLoop(f func(*LoopError)) { s.onLoop.Store(&f) }

// OnListening sets what Start calls once CoreDNS's listeners are bound and before the `loop` directive's probes
// go: the agent makes the node's own queries to its addresses come to it there (nft.Listening), so that the
// probes reach the server they test. An error stops the configuration just started and fails Start. Set it
// before Start.
func (s *Server) OnListening(f func() error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listening = f
}

// Generation is the number of configurations started so far (1 after Start).
func (s *Server) Generation() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen
}

func (s *Server) reportLoop(e *LoopError) {
	s.log.Error("loop detected", zap.Error(e))
	if f := s.onLoop.Load(); f != nil && *f != nil {
		(*f)(e)
	}
}

// New prepares the embedded CoreDNS. CoreDNS and caddy log through the standard logger, which belongs to the
// process: its owner routes it (LogWriter).
func New(log *zap.Logger, o Options) (*Server, error) {
	register()
	if err := dnsserver.Register(); err != nil {
		return nil, fmt.Errorf("register coredns server type: %w", err)
	}
	s := &Server{log: log, health: map[string]*httpListener{}, metrics: map[string]*httpListener{},
		socketPath: o.HealthSocket, healthPool: listenlimit.NewPool(listenlimit.Health()),
		metricsPool: listenlimit.NewPool(listenlimit.CoreDNSMetrics()), clients: o.Clients,
		clientSubnetTo: o.ClientSubnetTo, tcpLimits: o.TCPLimits, gatherer: o.Gatherer}
	if s.tcpLimits == (connlimit.Limits{}) {
		s.tcpLimits = connlimit.Default()
	}
	reg := o.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if r, ok := reg.(*prometheus.Registry); ok && s.gatherer == nil {
		s.gatherer = r
	}
	if s.gatherer == nil {
		return nil, errors.New("dnsserver: a Registerer that is not a *prometheus.Registry needs a Gatherer")
	}
	s.env = newDirectiveEnv(reg)
	if o.FastPath != nil {
		s.fast = fastpath.New(log.Named("fastpath"), o.FastPath)
		if o.Clients != nil {
			s.fast.SetClients(o.Clients)
		}
		s.fast.SetTCPLimits(listenlimit.Limits{PerSource: s.tcpLimits.PerSource, Total: s.tcpLimits.Total})
	}
	s.SetReadiness(nil)
	s.SetLiveness(nil)
	return s, nil
}

// SetLiveness sets the check behind /health, the kubelet's liveness probe; nil means alive whenever the health
// listener answers. The check gets the probe request's context.
func (s *Server) SetLiveness(check func(context.Context) error) {
	if check == nil {
		check = func(context.Context) error { return nil }
	}
	s.live.Store(&check)
}

// SetReadiness sets the check behind /ready on the health listeners; nil means ready whenever CoreDNS serves.
func (s *Server) SetReadiness(check func() error) {
	if check == nil {
		check = func() error { return nil }
	}
	s.ready.Store(&check)
}

func (s *Server) readiness() error {
	s.mu.Lock()
	running := s.inst != nil
	s.mu.Unlock()
	if !running {
		return errors.New("coredns is not serving")
	}
	return (*s.ready.Load())()
}

// Start starts serving corefile. path names it in errors and logs (it is where the agent writes it). A corefile
// that forwards to its own address fails with a *LoopError before anything serves.
func (s *Server) Start(corefile []byte, path string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inst != nil {
		return errors.New("coredns is already running")
	}
	s.path = path
	in, err := Input(corefile, path)
	if err != nil {
		return fmt.Errorf("start coredns from %s: %w", path, err)
	}
	if e := selfForward(corefile, path, s.gen+1); e != nil {
		s.log.Error("loop detected", zap.Error(e))
		return fmt.Errorf("start coredns from %s: %w", path, e)
	}
	inst, err := lend(s.env, func() (*caddy.Instance, error) { return caddy.Start(in) })
	if err != nil {
		return fmt.Errorf("start coredns from %s: %w", path, sockholder.Explain(err))
	}
	if s.listening != nil {
		if err := s.listening(); err != nil {
			inst.ShutdownCallbacks()
			return errors.Join(err, stopInstance(inst))
		}
	}
	s.inst, s.corefile = inst, corefile
	s.gen++
	s.conns = connlimit.Start(s.log.Named("connlimit"), s.tcpLimits)
	return s.commit()
}

// Reload replaces the running configuration with corefile. It is a no-op when corefile is what already runs.
// On error the running configuration keeps serving; a *LoopError says corefile forwards to itself.
func (s *Server) Reload(corefile []byte) (changed bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inst == nil {
		return false, errors.New("coredns is not running")
	}
	if string(corefile) == string(s.corefile) {
		return false, nil
	}
	in, err := Input(corefile, s.path)
	if err != nil {
		return false, fmt.Errorf("reload coredns from %s: %w", s.path, err)
	}
	if e := selfForward(corefile, s.path, s.gen+1); e != nil {
		s.log.Error("loop detected", zap.Error(e))
		return false, fmt.Errorf("reload coredns from %s: %w", s.path, e)
	}
	inst, err := lend(s.env, func() (*caddy.Instance, error) { return s.inst.Restart(in) })
	if err != nil {
		return false, fmt.Errorf("reload coredns from %s: %w", s.path, sockholder.Explain(err))
	}
	s.inst, s.corefile = inst, corefile
	s.gen++
	return true, s.commit()
}

// commit applies what the directives of the instance just started (s.inst, generation s.gen) asked for, and
// makes the fast path follow it. caddy's start or restart has returned: the previous instance, if any, has
// stopped and no longer reads from the listeners the new one inherited, so the loop probes may go.
func (s *Server) commit() error {
	p := pendingOf(s.inst)
	s.lameduck.Store(int64(p.lameduck))
	if s.clients != nil {
		p.clients.Store(s.clients)
	}
	s.carryClientSubnet(p.forwards)
	// The fast path hands the queries it does not answer to a configuration's handlers: it must follow the new
	// one before the loop probes go, or a probe it passes to the previous configuration is answered there (no
	// loop) and a looping reload goes undetected (seen in the lifecycle matrix under load, 1 run in 3).
	if s.fast != nil {
		s.fast.Sync(s.inst)
	}
	s.conns.Watch(tcpAddrs(s.inst))
	s.loopChecks = s.loopChecks[:0:0]
	for _, l := range p.loops {
		l.bind(s.gen, s.reportLoop)
		s.loopChecks = append(s.loopChecks, l.checked)
	}
	s.syncMetrics(p.metrics)
	return errors.Join(s.syncHealth(p.health), s.openHealthSocket())
}

// Lameduck is the Corefile's health lameduck, which Stop waits out first.
func (s *Server) Lameduck() time.Duration { return time.Duration(s.lameduck.Load()) }

// Stop waits out the Corefile's health lameduck, then stops every server and the health listeners.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inst == nil {
		return nil
	}
	if d := s.Lameduck(); d > 0 {
		s.log.Info("lameduck", zap.Duration("duration", d))
		time.Sleep(d)
	}
	errs := s.inst.ShutdownCallbacks()
	if s.fast != nil {
		s.fast.Close() // after the plugins' shutdown, before the servers stop, as CoreDNS's own callbacks run
	}
	errs = append(errs, stopInstance(s.inst))
	s.waitServers(s.inst)
	s.conns.Stop()
	s.inst = nil
	s.syncHealth(nil)
	s.syncMetrics(nil)
	s.closeHealthSocket()
	return errors.Join(errs...)
}

// serversStopWait bounds the wait for CoreDNS's servers to return once stopped. A stopped server returns at
// once, except one whose Serve had not begun when Stop ran (a start that failed just after caddy.Start, as on a
// squatted health port): CoreDNS's Server.Stop skips a server it has not yet made, which then serves, and
// caddy's Instance.Wait blocks, for ever.
const serversStopWait = 2 * time.Second

// waitServers waits for inst's servers to return, within serversStopWait.
func (s *Server) waitServers(inst *caddy.Instance) {
	done := make(chan struct{})
	go func() { inst.Wait(); close(done) }() // inst, not s.inst: Stop clears that while this may still wait
	select {
	case <-done:
	case <-time.After(serversStopWait):
		s.log.Warn("coredns servers still running after stop; leaving them", zap.Duration("waited", serversStopWait))
	}
}

// stopInstance stops inst's servers, then shuts its TCP listeners (connlimit.ShutListeners) and detaches its
// UDP sockets still open (handover.DetachAddrs). CoreDNS's Stop runs once and skips a server whose Serve had not
// begun, and caddy begins them in goroutines of their own: a Stop just after a start, before those ran, left a
// server that then served on (TestStopAtOnceLeavesNothingListening), a TCP one, or a UDP one whose ServePacket
// had announced itself to the fast path but not yet set its server up. A server that stopped has closed its
// sockets, so neither step finds anything of it.
func stopInstance(inst *caddy.Instance) error {
	err := inst.Stop()
	if _, serr := connlimit.ShutListeners(tcpAddrs(inst)); serr != nil {
		err = errors.Join(err, serr)
	}
	if _, derr := handover.DetachAddrs(udpAddrs(inst)); derr != nil {
		err = errors.Join(err, derr)
	}
	return err
}

// Corefile returns the configuration that is serving.
func (s *Server) Corefile() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.corefile
}

// Addrs lists the DNS listeners' addresses, e.g. "127.0.0.1:53" once per transport.
func (s *Server) Addrs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inst == nil {
		return nil
	}
	var addrs []string
	for _, sl := range s.inst.Servers() {
		if a := sl.LocalAddr(); a != nil {
			addrs = append(addrs, a.String())
		}
	}
	return addrs
}

// tcpAddrs lists inst's TCP listeners' addresses.
func tcpAddrs(inst *caddy.Instance) []netip.AddrPort {
	var out []netip.AddrPort
	for _, sl := range inst.Servers() {
		if a, ok := sl.Addr().(*net.TCPAddr); ok { // Addr is the listener's, LocalAddr the packet conn's
			out = append(out, a.AddrPort())
		}
	}
	return out
}

// udpAddrs lists inst's UDP listeners' addresses, IPv4-mapped ones unmapped.
func udpAddrs(inst *caddy.Instance) []netip.AddrPort {
	var out []netip.AddrPort
	for _, sl := range inst.Servers() {
		if a, ok := sl.LocalAddr().(*net.UDPAddr); ok {
			ap := a.AddrPort()
			out = append(out, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
		}
	}
	return out
}

// Input is corefile (at path) as caddy is to start it: with our directives in upstream's names' place
// (corefileForCaddy). Whatever starts the embedded CoreDNS through caddy itself (tests) passes its Corefile
// through here.
func Input(corefile []byte, path string) (caddy.Input, error) {
	cf, err := corefileForCaddy(corefile, path)
	if err != nil {
		return nil, err
	}
	return caddy.CaddyfileInput{Contents: cf, Filepath: path, ServerTypeName: "dns"}, nil
}
