// Package supervisor owns the agent's lifecycle: the ordered start-up, the event-driven reconcile of the
// interface, ConfigMap reloads, readiness, and the deadline-bounded shutdown.
//
// Start-up: validate -> render the Corefile -> register our owned nftables table (sets only) -> interface
// carries the union of every live instance's addresses -> CoreDNS listening -> our chains (serving) -> ready.
// The interface comes before CoreDNS because `bind` needs the listen addresses to exist; the chains come last
// and are gated on a live listener anyway. Shutdown, for every signal that ends the process: delete our table
// (ClusterIP traffic falls back to kube-dns through kube-proxy), then remove the interface if no other
// instance is left, else hand our DNS listeners over to them (detach.go), then stop CoreDNS. The kernel
// removes our table by itself if the process dies (node.go). Nothing here exits the process: errors travel up
// to main.
package supervisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/configwatch"
	"github.com/nodelocaldns/nodelocaldns/internal/corefile"
	"github.com/nodelocaldns/nodelocaldns/internal/dnsserver"
	"github.com/nodelocaldns/nodelocaldns/internal/fastpath"
	"github.com/nodelocaldns/nodelocaldns/internal/link"
	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/options"
)

// Timing of the reconcile loop and of shutdown.
const (
	minPassInterval  = 5 * time.Millisecond // floor between passes: bounds the cost of an event storm
	shutdownDeadline = 20 * time.Second     // below the pod's default 30 s grace period
	loopsStop        = 5 * time.Second      // of which the reconcile and reload loops may take this much
	defaultKubeDNSCM = "/etc/kube-dns"
	// drainDelay is how long queries already steered to us get to be answered: between deleting the table and
	// removing the interface (they are answered from the addresses they were sent to), and between detaching
	// the DNS listeners and stopping CoreDNS when another instance stays (detach.go).
	drainDelay = 100 * time.Millisecond
	// loopCheckWait bounds how long start-up waits for the `loop` directive's probes before intercepting.
	loopCheckWait = 2 * time.Second
)

// Config is what the supervisor needs besides the options.
type Config struct {
	Options *options.Options
	Log     *zap.Logger
	Getenv  func(string) string // os.Getenv in production
	Metrics *metrics.Metrics    // nil: nothing is counted
	// Gatherer is served on -metrics-listen-address for the agent's whole life; nil serves no endpoint.
	Gatherer prometheus.Gatherer
	// Background runs beside the agent for its whole life: started first, stopped last (background.go).
	Background []Actor
}

// Supervisor runs one agent.
type Supervisor struct {
	opts       *options.Options
	log        *zap.Logger
	m          *metrics.Metrics
	gatherer   prometheus.Gatherer
	background []Actor

	params     corefile.Params
	kubeDNSDir string
	kubeDNS    corefile.KubeDNS // the last kube-dns ConfigMap accepted; only the start-up and the reload runner touch it

	node    *node
	table   *nft.Conn
	links   *link.Manager
	dns     *dnsserver.Server
	dnsOpts dnsserver.Options
	runner  *runner
	reloads *runner

	lastPass   atomicErr // result of the last reconcile pass
	warnedDrop sync.Map  // foreign drop chains already warned about
	loops      loopState
}

// New validates cfg and prepares an agent; nothing is started yet.
func New(cfg Config) (*Supervisor, error) {
	o := cfg.Options
	s := &Supervisor{opts: o, log: cfg.Log, m: cfg.Metrics, gatherer: cfg.Gatherer, background: cfg.Background}
	s.kubeDNSDir = o.KubeDNSConfigDir
	if s.kubeDNSDir == "" {
		if st, err := os.Stat(defaultKubeDNSCM); err == nil && st.IsDir() {
			s.kubeDNSDir = defaultKubeDNSCM
		}
	}
	env := corefile.ServiceHostEnv(o.UpstreamSvc)
	s.params = corefile.Params{
		LocalIPs: o.LocalIPs, DNSPort: o.DNSPort, ClusterDNS: cfg.Getenv(env), ClusterDNSEnv: env,
		PrometheusEndpoint: o.PrometheusListenAddress, Directives: dnsserver.Directives(),
	}
	s.dnsOpts = dnsserver.Options{FastPath: fastpath.Enabled(cfg.Getenv)}
	spec := nft.Spec{LocalIPs: o.LocalIPs, DNSPort: o.DNSPort, HealthPort: o.HealthPort, NoInterception: !o.SetupNftables}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	linkSpec := link.Spec{Name: o.InterfaceName, IPs: o.LocalIPs}
	if err := linkSpec.Validate(); err != nil {
		return nil, err
	}
	s.node = &node{log: cfg.Log, m: cfg.Metrics, ifname: o.InterfaceName, spec: spec}
	return s, nil
}

// Run starts the agent, serves until ctx is done, then shuts down. It returns an error when start-up fails,
// after the same orderly shutdown; a failing reconcile pass or reload is logged, counted and retried.
func (s *Supervisor) Run(ctx context.Context) (err error) {
	start := time.Now()
	step := func(name string, t time.Time) {
		s.log.Info("start-up step done", zap.String("step", name), zap.Duration("elapsed", time.Since(t)))
	}
	// Deferred first, so it runs last: the metrics endpoint and the tuner outlive the shutdown.
	defer s.startBackground()()

	t := time.Now()
	watcher, err := configwatch.New(configwatch.Config{Log: s.log, Dirs: s.watchDirs(), Polling: s.m.ConfigPollingGauge()})
	if err != nil {
		return err
	}
	defer watcher.Close()
	cf, err := s.render()
	if err != nil {
		return fmt.Errorf("render corefile: %w", err)
	}
	s.writeCorefile(cf)
	step("render corefile", t)

	if s.manages() {
		if err := s.openKernel(); err != nil {
			return err
		}
		defer s.closeKernel() // closing our socket is what removes our table if nothing else did
	}
	runCtx, stopRunning := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { s.shutdown(stopRunning, &wg) }()

	t = time.Now()
	if err := s.node.register(); err != nil {
		s.setupError(metrics.ErrNftables)
		return err
	}
	if changes, err := s.node.ensureLink(); err != nil {
		s.setupError(metrics.ErrInterfaceAdd)
		return fmt.Errorf("ensure interface %q: %w", s.opts.InterfaceName, err)
	} else if s.links != nil {
		s.log.Info("interface ready", zap.String("interface", s.opts.InterfaceName), zap.String("kind", s.links.Kind()), zap.Strings("changes", changes))
	}
	step("registered and interface", t)

	t = time.Now()
	if s.dns, err = dnsserver.New(s.log.Named("dns"), s.dnsOpts); err != nil {
		return err
	}
	s.dns.SetReadiness(s.readiness)
	s.dns.SetLiveness(s.liveness)
	s.dns.OnLoop(s.onLoop)
	if err := s.dns.Start(cf, s.opts.Corefile); err != nil {
		return err
	}
	s.log.Info("serving dns", zap.Strings("listeners", s.dns.Addrs()))
	if err := s.checkListeners(); err != nil {
		return err
	}
	// A configuration that forwards to itself must never get the clients' queries: intercept only once the
	// `loop` probes came back clean (or gave up: an unreachable upstream must not hold start-up).
	if !s.dns.WaitLoopChecks(loopCheckWait) {
		s.log.Warn("loop detection still probing; serving anyway", zap.Duration("waited", loopCheckWait))
	}
	select {
	case err := <-s.fatal():
		return err
	default:
	}
	step("coredns listening", t)
	s.writePIDFile()

	t = time.Now()
	if err := s.node.serve(); err != nil {
		s.setupError(metrics.ErrNftables)
		return err
	}
	step("serving", t)
	if s.table != nil {
		// A table an earlier version left (unowned, its notrack not gated) would blackhole the ClusterIP
		// whenever we do not serve. An earlier version still running re-creates its own; it goes for good when
		// that instance stops or when we leave.
		if legacy, err := s.table.DeleteLegacy(); err != nil {
			s.log.Warn("delete tables left by earlier versions", zap.Error(err))
		} else if len(legacy) > 0 {
			s.log.Info("deleted tables left by earlier versions", zap.Strings("tables", legacy))
		}
	}
	if s.manages() {
		s.pass(ctx, []string{"start"}) // readiness reads its result
	} else {
		s.lastPass.store(nil)
	}

	s.reloads = newRunner(runnerConfig{maxInterval: 24 * time.Hour, backoffMin: time.Second, backoffMax: 30 * time.Second}, s.reloadPass)
	wg.Go(func() { s.reloads.run(runCtx) })
	wg.Go(func() { watcher.Run(runCtx, func() { s.reloads.trigger("configmap") }) })
	wg.Go(func() { s.onSIGUSR1(runCtx) })
	if s.manages() {
		s.runner = newRunner(runnerConfig{minInterval: minPassInterval, maxInterval: s.opts.SyncInterval, damp: s.damping()}, s.pass)
		s.startWatchers(runCtx, &wg)
		wg.Go(func() { s.runner.run(runCtx) })
	}
	s.log.Info("ready", zap.Duration("elapsed", time.Since(start)), zap.String("table", s.tableName()),
		zap.Bool("gated", s.node.gated.Load()), zap.Int32("other_instances", s.node.others.Load()))
	select {
	case <-ctx.Done():
		s.log.Info("shutting down", zap.String("reason", context.Cause(ctx).Error()))
	case err := <-s.fatal():
		s.log.Error("shutting down", zap.Error(err))
		return err
	}
	return nil
}

// shutdown stops the loops, leaves the node (node.leave), hands our listeners over when another instance
// stays, and stops CoreDNS, all within shutdownDeadline: a step still running then is abandoned and the
// process exits (the kernel removes our table with our socket).
func (s *Supervisor) shutdown(stopRunning context.CancelFunc, wg *sync.WaitGroup) {
	start := time.Now()
	b := newBounded(s.log, shutdownDeadline)
	stopRunning()
	// A loop stuck in a pass (a CoreDNS reload that never returns) must not keep us from leaving the node.
	b.do("stop loops", loopsStop, wg.Wait)
	var othersServe atomic.Bool
	b.do("leave the node", 0, func() { othersServe.Store(s.node.leave(s.opts.SkipTeardown, drainDelay)) })
	if s.dns != nil {
		if othersServe.Load() {
			b.do("hand queries over", 0, s.passQueries)
		}
		b.do("stop coredns", 0, func() {
			if err := s.dns.Stop(); err != nil {
				s.log.Warn("stop coredns", zap.Error(err))
			}
		})
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

// manages reports whether this agent touches the kernel at all.
func (s *Supervisor) manages() bool { return s.opts.SetupInterface || s.opts.SetupNftables }

func (s *Supervisor) tableName() string {
	if s.table == nil {
		return ""
	}
	return "inet " + s.table.Table()
}

func (s *Supervisor) watchDirs() []string {
	dirs := []string{filepath.Dir(s.opts.BaseCorefile)}
	if s.kubeDNSDir != "" {
		dirs = append(dirs, s.kubeDNSDir)
	}
	return dirs
}

// openKernel opens our nftables socket (always, when we manage anything: even without interception our table
// is how other instances know which addresses we need) and the link manager.
func (s *Supervisor) openKernel() error {
	var err error
	if s.table, err = nft.Open(nft.WithLogger(s.log)); err != nil {
		return fmt.Errorf("open nftables: %w", err)
	}
	s.node.reg = s.table
	// Scrapes read our rules' counters through this same socket: it owns our table, whatever its name.
	withMetrics(s.m, func(m *metrics.Metrics) { m.RuleCounters.SetSource(s.ruleCounters) })
	if s.opts.SetupInterface {
		if s.links, err = link.New(s.log); err != nil {
			return fmt.Errorf("open link manager: %w", err)
		}
		s.node.links = s.links
	}
	return nil
}

func (s *Supervisor) closeKernel() {
	if s.table != nil {
		withMetrics(s.m, func(m *metrics.Metrics) { m.RuleCounters.SetSource(nil) })
		s.table.Close()
	}
	if s.links != nil {
		s.links.Close()
	}
}

func (s *Supervisor) writePIDFile() {
	if s.opts.PIDFile == "" {
		return
	}
	if err := os.WriteFile(s.opts.PIDFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		s.log.Warn("write pidfile", zap.String("path", s.opts.PIDFile), zap.Error(err))
	}
}
