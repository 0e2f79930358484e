package supervisor

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/configwatch"
	"github.com/nodelocaldns/nodelocaldns/internal/dnsserver"
	"github.com/nodelocaldns/nodelocaldns/internal/instance"
	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
	"github.com/nodelocaldns/nodelocaldns/internal/nft"
)

// The phases of start-up, in the order Run calls them. Each logs its duration.

// stepDone logs that a phase ended.
func (s *Supervisor) stepDone(name string, since time.Time) {
	s.log.Info("start-up step done", zap.String("step", name), zap.Duration("elapsed", time.Since(since)))
}

// renderCorefile renders the Corefile and writes it for operators to read. The ConfigMap watcher is set up
// before the read, so no change is lost; the caller closes it.
func (s *Supervisor) renderCorefile() (*configwatch.Watcher, []byte, error) {
	t := time.Now()
	watcher, err := configwatch.New(configwatch.Config{Log: s.log, Dirs: s.config.watchDirs(), Keys: s.config.watchKeys(), Polling: s.m.ConfigPolling})
	if err != nil {
		return nil, nil, err
	}
	cf, err := s.config.render()
	if err != nil {
		watcher.Close()
		return nil, nil, fmt.Errorf("render corefile: %w", err)
	}
	s.config.write(cf)
	s.stepDone("render corefile", t)
	return watcher, cf, nil
}

// openKernel opens our netlink handles (none when the agent manages nothing) and builds what acts on them:
// the instance state machine and the reconciler. The caller closes s.kernel.
func (s *Supervisor) openKernel() error {
	k, err := newKernel(s.log, s.m, s.state.Table, s.state.Interface)
	if err != nil {
		return err
	}
	s.kernel = k
	s.node = instance.New(s.log.Named("node"), s.m, s.state.NFT, s.state.Link, k.registry(), k.linkManager())
	tables, ours := k.foreignTables()
	foreign := newForeignReport(s.log.Named("foreign"), s.m, tables, ours, s.state.NFT, s.opts.StepAside)
	fb := newFallback(s.log.Named("fallback"), s.m, k.fallbackTable(), s.state, s.clock)
	s.reconcile = newReconciler(s.log.Named("reconcile"), s.m, s.state.Link.Name, s.opts.SyncInterval, s.node, fb, foreign)
	s.node.SetQuiesce(s.lastOut)
	return nil
}

// register creates our table (sets only), puts the link-local fallback in place for every live instance's
// addresses (from now until CoreDNS listens, queries to them go to kube-dns), and makes the interface carry
// those addresses.
func (s *Supervisor) register() error {
	t := time.Now()
	if err := s.node.Register(); err != nil {
		setupError(s.m, metrics.ErrNftables)
		return err
	}
	// node-cache's leftovers blackhole pods' ClusterIP queries whenever we do not serve: gone before we start.
	s.reconcile.removeNodeCache()
	ips, ins, err := s.node.Addresses()
	if err != nil {
		setupError(s.m, metrics.ErrNftables)
		return fmt.Errorf("list instance tables: %w", err)
	}
	if change, err := s.reconcile.ensureFallback(ins); err != nil {
		// Not fatal: DNS is served without it; each pass tries again.
		setupError(s.m, metrics.ErrNftables)
		s.log.Warn("link-local fallback not in place", zap.Error(err))
	} else if change != "" {
		s.log.Info("link-local fallback in place", zap.String("table", "inet "+nft.FallbackTableName), zap.String("change", change))
	}
	changes, err := s.node.Carry(ips)
	if err != nil {
		setupError(s.m, metrics.ErrInterfaceAdd)
		return fmt.Errorf("ensure interface %q: %w", s.state.Link.Name, err)
	}
	if s.kernel.links != nil {
		s.log.Info("interface ready", zap.String("interface", s.state.Link.Name), zap.String("kind", s.kernel.links.Kind()), zap.Strings("changes", changes))
	}
	s.stepDone("registered and interface", t)
	return nil
}

// startCoreDNS starts CoreDNS from cf and waits for the `loop` directive's first probes.
func (s *Supervisor) startCoreDNS(cf []byte) error {
	t := time.Now()
	dns, err := dnsserver.New(s.log.Named("dns"), s.dnsOpts)
	if err != nil {
		return err
	}
	s.dns = dns
	// Start runs the health listener and the loop probes on CoreDNS's goroutines, and they call back: they
	// are handed the objects they read, all built here, before Start, and never replaced.
	s.reload = newReloader(s.log.Named("reload"), s.m, s.config, dns)
	s.reload.reloaded = func() { // a reload's `bind` may add or drop a local IP (listeners.go)
		if err := s.checkListeners(); err != nil {
			s.log.Error("re-check listeners after reload", zap.Error(err))
		}
	}
	h := &health{
		m: s.m, node: s.node, lastPass: &s.reconcile.lastPass, reconcile: s.reconcile.runner, reload: s.reload.runner,
		probeAddr: net.JoinHostPort(s.opts.LocalIPs[0].String(), strconv.Itoa(int(s.opts.DNSPort))),
	}
	dns.SetReadiness(h.readiness)
	dns.SetLiveness(h.liveness)
	dns.OnLoop(s.reload.onLoop)
	dns.OnListening(s.node.Listen)
	if err := dns.Start(cf, s.opts.Corefile); err != nil {
		return err
	}
	s.log.Info("serving dns", zap.Strings("listeners", dns.Addrs()))
	if err := s.checkListeners(); err != nil {
		return err
	}
	// A configuration that forwards to itself must never get the clients' queries: intercept only once the
	// `loop` probes came back clean (or gave up: an unreachable upstream must not hold start-up).
	if !dns.WaitLoopChecks(loopCheckWait) {
		s.log.Warn("loop detection still probing; serving anyway", zap.Duration("waited", loopCheckWait))
	}
	select {
	case err := <-s.reload.fatal:
		return err
	default:
	}
	s.stepDone("coredns listening", t)
	s.writePIDFile()
	return nil
}

// intercept adds our chains (we serve), deletes the tables earlier versions left, and runs the first
// reconcile pass, whose result readiness reads.
func (s *Supervisor) intercept(ctx context.Context) error {
	t := time.Now()
	// A foreign drop that covers an address is stepped aside for from the first programming on.
	_ = s.reconcile.lookAtForeign() // not serving yet: only remembered
	if err := s.node.Serve(); err != nil {
		setupError(s.m, metrics.ErrNftables)
		return err
	}
	s.stepDone("serving", t)
	if err := s.node.DeleteLegacy(); err != nil {
		s.log.Warn("delete tables left by earlier versions", zap.Error(err))
	}
	if s.manages() {
		s.reconcile.pass(ctx, []string{"start"})
	} else {
		s.reconcile.lastPass.store(nil)
	}
	return nil
}

// loops is what the reconcile and reload loops run under; shutdown stops them first.
type loops struct {
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup
}

func newLoops() *loops {
	l := &loops{}
	l.ctx, l.stop = context.WithCancel(context.Background())
	return l
}

// startServing starts the actors that wait for the agent to serve; shutdown stops them with the loops.
func (s *Supervisor) startServing(l *loops) {
	for _, a := range s.serving {
		l.wg.Go(func() { a.Run(l.ctx) })
	}
}

// startLoops starts the reload runner with the ConfigMap watcher and SIGUSR1, and, when we manage the
// kernel, the reconcile runner with its watchers.
func (s *Supervisor) startLoops(l *loops, watcher *configwatch.Watcher) {
	s.reload.start(l.ctx, &l.wg, watcher)
	if s.manages() {
		s.reconcile.start(l.ctx, &l.wg, s.kernel)
	}
}
