// Package supervisor owns the agent's lifecycle: the ordered start-up, the event-driven reconcile of the
// interface, ConfigMap reloads, readiness, and the deadline-bounded shutdown.
//
// Start-up: validate -> render the Corefile -> register our owned nftables table (sets only) ->
// the link-local fallback (what every live instance's table says) and the interface (the union of their
// addresses) -> CoreDNS listening -> raw-output (host-network queries come to us; the loop probes go) -> our
// chains (serving) ->
// ready.
// The interface comes before CoreDNS because `bind` needs the listen addresses to exist; the chains come last
// and are gated on a live listener anyway. Shutdown, for every signal that ends the process: swap our table for
// a drain table (ClusterIP traffic falls back to kube-dns through kube-proxy; our replies still skip
// conntrack), then, if no other instance is left, detach our DNS listeners, let CoreDNS write the answers in
// flight and remove the interface, else hand our DNS listeners over to them (detach.go); then stop CoreDNS. The kernel
// removes our table by itself if the process dies (internal/instance's node.go). Nothing here exits the process: errors travel up
// to main.
//
// What the instance wants (its table, its interface, the Corefile's parameters, its fallback vote) is
// internal/desired's, built once in New from the options; `-print-rules` and `-teardown` take theirs from there too.
//
// One job per file: supervisor.go wires the parts and startup.go holds Run's phases in order; the instance
// (internal/instance: its state machine, its table, its decisions about the kernel) runs over kernel.go's
// handles; render.go makes the Corefile, reload.go reloads it;
// reconcile.go repairs the interface and the link-local fallback (fallback.go) on internal/runner's
// bounded-frequency runner, damped by damping.go; foreign.go
// looks at other tables (drops reported and stepped aside for, node-cache's leftovers removed); health.go answers /health and /ready; listeners.go checks CoreDNS bound our
// addresses; shutdown.go stops everything by its deadline; teardown.go is `-teardown`; background.go runs the
// metrics endpoint; detach.go hands the listeners over.
//
// May touch: the node through the rooms below it; itself, only the Corefile it writes or its pidfile.
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/nodelocaldns/nodelocaldns/internal/clients"
	"github.com/nodelocaldns/nodelocaldns/internal/corefile"
	"github.com/nodelocaldns/nodelocaldns/internal/desired"
	"github.com/nodelocaldns/nodelocaldns/internal/dnsserver"
	"github.com/nodelocaldns/nodelocaldns/internal/fastpath"
	"github.com/nodelocaldns/nodelocaldns/internal/instance"
	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
	"github.com/nodelocaldns/nodelocaldns/internal/options"
)

// Timing of the reconcile loop and of shutdown.
const (
	minPassInterval  = 5 * time.Millisecond // floor between passes: bounds the cost of an event storm
	shutdownDeadline = 20 * time.Second     // below the pod's default 30 s grace period
	loopsStop        = 5 * time.Second      // of which the reconcile and reload loops may take this much
	// drainDelay is how long queries already steered to us get to be answered: between deleting the table and
	// removing the interface (they are answered from the addresses they were sent to), and between detaching
	// the DNS listeners and stopping CoreDNS when another instance stays (detach.go).
	drainDelay = 100 * time.Millisecond
	// answersDrain bounds how long the last instance out waits for the answers in flight to be written before
	// its interface goes (shutdown.go, lastOut), the Corefile's lameduck aside. No useful answer comes later:
	// CoreDNS's forward gives up on a query after 5 s (plugin/forward's defaultTimeout), as the fast path's miss
	// server does on stop, and a resolver with glibc's or musl's default (timeout:5) has stopped waiting by
	// then. It waits only as long as answers are in flight. With loopsStop, the whole shutdown stays well within
	// shutdownDeadline.
	answersDrain = 5 * time.Second
	// loopCheckWait bounds how long start-up waits for the `loop` directive's probes before intercepting.
	loopCheckWait = 2 * time.Second
)

// Actor is something that runs while the agent serves, until ctx is done (the start-up taint's removal).
type Actor struct {
	Name string
	Run  func(ctx context.Context)
}

// Config is what the supervisor needs besides the options.
type Config struct {
	Options *options.Options
	Log     *zap.Logger
	Getenv  func(string) string // os.Getenv in production
	Metrics *metrics.Metrics    // what the agent counts into, registered by the caller
	// FastPath is what the fast path counts into, registered by the caller (it runs unless the environment
	// turns it off: fastpath.Enabled).
	FastPath *fastpath.Metrics
	// Clients is the per-client accounting CoreDNS and the fast path count into (internal/clients); nil counts
	// nothing. The caller runs its drain (an Actor in Serving).
	Clients *clients.Accounting
	// Gatherer is served on -metrics-listen-address for the agent's whole life, and on the Corefile's
	// `prometheus` addresses; nil serves no endpoint of the agent's.
	Gatherer prometheus.Gatherer
	// Registerer is where CoreDNS's directives register their series (dnsserver.Options.Registerer).
	Registerer prometheus.Registerer
	// Serving runs once the agent serves (interface, table and CoreDNS ready), with the loops, and is stopped
	// with them, first of all at shutdown (the start-up taint's removal, cmd/nodelocaldns).
	Serving []Actor
	// Clock is what shutdown's drains wait on (nil: the real clock).
	Clock clock.Clock
}

// Supervisor runs one agent: it starts the parts below in order (startup.go), and stops them in reverse
// (shutdown.go). Each part has one job; the supervisor only wires them together.
type Supervisor struct {
	opts     *options.Options
	log      *zap.Logger
	m        *metrics.Metrics
	gatherer prometheus.Gatherer
	serving  []Actor
	clock    clock.Clock // the drains' (shutdown.go, fallback.go)

	config     *renderer         // Corefile.base + kube-dns ConfigMap -> Corefile (render.go)
	state      desired.State     // what this instance wants (internal/desired), validated
	kernel     *kernel           // our netlink handles (kernel.go); set by the kernel phase
	node       *instance.Node    // the instance state machine (internal/instance); set by the kernel phase
	reconcile  *reconciler       // the interface and the foreign report (reconcile.go); set by the kernel phase
	dns        *dnsserver.Server // set by the coredns phase
	dnsOpts    dnsserver.Options // how CoreDNS is embedded (the fast path)
	reload     *reloader         // ConfigMap changes and SIGUSR1 (reload.go); set by the coredns phase
	dnsStop    sync.Once         // stopDNS (shutdown.go)
	dnsStopped chan struct{}
}

// New validates cfg and prepares an agent; nothing is started yet.
func New(cfg Config) (*Supervisor, error) {
	o := cfg.Options
	if cfg.Metrics == nil {
		return nil, errors.New("no metrics to count into")
	}
	f := desired.FromEnv(o, cfg.Getenv)
	if o.KubeDNSConfigDir == "" {
		st, err := os.Stat(desired.KubeDNSDir)
		f.KubeDNSDir = err == nil && st.IsDir()
	}
	f.Directives = dnsserver.Directives()
	// The kernel's nft_socket is not asked here: serve learns it when the kernel refuses our chains (internal/instance).
	s := &Supervisor{opts: o, log: cfg.Log, m: cfg.Metrics, gatherer: cfg.Gatherer, serving: cfg.Serving, clock: cfg.Clock, state: desired.Of(o, f)}
	if s.clock == nil {
		s.clock = clock.RealClock{}
	}
	if err := s.state.Validate(); err != nil {
		return nil, err
	}
	c := s.state.Corefile
	s.config = &renderer{log: cfg.Log.Named("render"), m: cfg.Metrics, base: c.Base, out: c.Out, kubeDNSDir: c.KubeDNSDir, params: c.Params}
	s.dnsOpts.HealthSocket = o.HealthSocket
	s.dnsOpts.Registerer, s.dnsOpts.Gatherer = cfg.Registerer, cfg.Gatherer
	s.dnsOpts.Clients = cfg.Clients
	if o.UpstreamClientSubnet {
		a, err := netip.ParseAddr(f.UpstreamHost)
		if err != nil {
			return nil, fmt.Errorf("flag -upstream-client-subnet needs the cluster DNS address from %s: %w", corefile.ServiceHostEnv(o.UpstreamSvc), err)
		}
		s.dnsOpts.ClientSubnetTo = a
	}
	if fastpath.Enabled(cfg.Getenv) {
		if cfg.FastPath == nil {
			return nil, errors.New("the fast path is on, but has no metrics to count into")
		}
		s.dnsOpts.FastPath = cfg.FastPath
	}
	return s, nil
}

// Run starts the agent, serves until ctx is done, then shuts down. It returns an error when start-up fails,
// after the same orderly shutdown; a failing reconcile pass or reload is logged, counted and retried.
//
// Each phase is a method of startup.go, in this order; what a phase starts, the deferred calls stop in
// reverse.
func (s *Supervisor) Run(ctx context.Context) error {
	start := time.Now()
	// Deferred first, so it runs last: the metrics endpoint outlives the shutdown.
	defer s.startBackground()()
	watcher, cf, err := s.renderCorefile()
	if err != nil {
		return err
	}
	defer watcher.Close()
	if err := s.openKernel(); err != nil {
		return err
	}
	defer s.kernel.close() // closing our socket is what removes our table if nothing else did
	loops := newLoops()
	defer func() { s.shutdown(loops) }()
	if err := s.register(); err != nil {
		return err
	}
	if err := s.startCoreDNS(cf); err != nil {
		return err
	}
	if err := s.intercept(ctx); err != nil {
		return err
	}
	s.startLoops(loops, watcher)
	s.startServing(loops)
	s.log.Info("ready", zap.Duration("elapsed", time.Since(start)), zap.String("table", s.node.Table()),
		zap.Bool("gated", s.node.Gated()), zap.Int32("other_instances", s.node.Others()))
	select {
	case <-ctx.Done():
		s.log.Info("shutting down", zap.String("reason", context.Cause(ctx).Error()))
	case err := <-s.reload.fatal:
		s.log.Error("shutting down", zap.Error(err))
		return err
	}
	return nil
}

// manages reports whether this agent touches the kernel at all.
func (s *Supervisor) manages() bool { return s.state.Table }

// Desired is the state this agent serves ([desired.Of] of its options and the environment): the table it
// programs, as `-print-rules` prints it for the same flags on a kernel with nft_socket.
func (s *Supervisor) Desired() desired.State { return s.state }

func (s *Supervisor) writePIDFile() {
	if s.opts.PIDFile == "" {
		return
	}
	if err := os.WriteFile(s.opts.PIDFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		s.log.Warn("write pidfile", zap.String("path", s.opts.PIDFile), zap.Error(err))
	}
}
