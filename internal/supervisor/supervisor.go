// Package supervisor owns the agent's lifecycle: the ordered start-up, the event-driven reconcile of the
// nftables table and the interface, ConfigMap reloads, readiness, and the deadline-bounded shutdown.
//
// Start-up: validate -> render the Corefile -> interface -> CoreDNS listening -> nftables table -> ready. The
// interface comes before CoreDNS because `bind` needs the listen addresses to exist; an address on the interface
// steers nothing until the table's notrack rules exist, so the table still appears only once CoreDNS listens.
// Shutdown: delete the table first (ClusterIP traffic falls back to kube-dns through kube-proxy), then the
// interface (unless -skipteardown), then stop CoreDNS; or, when a newer instance is waiting (surge rollout),
// leave both to it. Nothing here exits the process: errors travel up to main.
//
// A second instance on the node (surge rollout) serves DNS beside the first as a standby: it waits for the
// leader's interface, starts CoreDNS (SO_REUSEPORT), registers with the leader and only then says ready, so the
// leader hands over on SIGTERM instead of tearing down (lease.go for the protocol, handover.go, shutdown.go).
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/configwatch"
	"github.com/nodelocaldns/nodelocaldns/internal/corefile"
	"github.com/nodelocaldns/nodelocaldns/internal/dnsserver"
	"github.com/nodelocaldns/nodelocaldns/internal/link"
	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/options"
)

// Timing of the reconcile loop and of shutdown.
const (
	minPassInterval  = 5 * time.Millisecond  // floor between passes: bounds the cost of an adversary flushing in a loop
	configDebounce   = 20 * time.Millisecond // coalesces a ConfigMap update's burst of inotify events
	shutdownDeadline = 20 * time.Second      // below the pod's default 30 s grace period
	defaultKubeDNSCM = "/etc/kube-dns"
	// drainDelay is how long queries already steered to us get to be answered: between deleting the table and
	// removing the interface (they are answered from the addresses they were sent to), and between detaching
	// the DNS listeners and stopping CoreDNS when another instance stays (detach.go).
	drainDelay = 100 * time.Millisecond
)

// Config is what the supervisor needs besides the options.
type Config struct {
	Options *options.Options
	Log     *zap.Logger
	Getenv  func(string) string // os.Getenv in production
	Metrics *metrics.Metrics    // nil: nothing is counted
}

// Supervisor runs one agent.
type Supervisor struct {
	opts *options.Options
	log  *zap.Logger
	m    *metrics.Metrics

	params     corefile.Params
	kubeDNSDir string
	kubeDNS    corefile.KubeDNS // the last kube-dns ConfigMap accepted; only the start-up and the reload runner touch it
	ruleset    *nft.Ruleset
	linkSpec   link.Spec

	dns      *dnsserver.Server
	table    *nft.Conn
	links    *link.Manager
	lease    *lease    // held while leader
	follower *follower // registration with the leader while standby

	runner     *Runner
	reloads    *Runner
	leader     atomic.Bool
	lastPass   atomic.Pointer[error] // result of the last reconcile pass
	warnedDrop sync.Map              // foreign drop chains already warned about
}

// New validates cfg and prepares an agent; nothing is started yet.
func New(cfg Config) (*Supervisor, error) {
	o := cfg.Options
	s := &Supervisor{opts: o, log: cfg.Log, m: cfg.Metrics}
	s.kubeDNSDir = o.KubeDNSConfigDir
	if s.kubeDNSDir == "" {
		if st, err := os.Stat(defaultKubeDNSCM); err == nil && st.IsDir() {
			s.kubeDNSDir = defaultKubeDNSCM
		}
	}
	env := corefile.ServiceHostEnv(o.UpstreamSvc)
	s.params = corefile.Params{
		LocalIPs: o.LocalIPs, DNSPort: o.DNSPort, ClusterDNS: cfg.Getenv(env), ClusterDNSEnv: env,
		PrometheusEndpoint: o.PrometheusListenAddress,
	}
	spec := nft.Spec{LocalIPs: o.LocalIPs, DNSPort: o.DNSPort, HealthPort: o.HealthPort}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	s.ruleset = nft.Build(spec)
	s.linkSpec = link.Spec{Name: o.InterfaceName, IPs: o.LocalIPs}
	if err := s.linkSpec.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

// Run starts the agent, serves until ctx is done, then shuts down. It returns an error only when start-up
// fails; a failing reconcile pass or reload is logged, counted and retried.
func (s *Supervisor) Run(ctx context.Context) (err error) {
	start := time.Now()
	step := func(name string, t time.Time) {
		s.log.Info("start-up step done", zap.String("step", name), zap.Duration("elapsed", time.Since(t)))
	}

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

	// Leadership first: a standby must not touch the kernel, and must find the interface the leader made.
	if s.manages() {
		t = time.Now()
		if err := s.openKernel(); err != nil {
			return err
		}
		defer s.closeKernel()
		l, ok, err := tryAcquireLease(leaseName(s.opts.InterfaceName))
		if err != nil {
			return fmt.Errorf("acquire lease %s: %w", leaseName(s.opts.InterfaceName), err)
		}
		if ok {
			s.becomeLeader(l)
			if err := s.ensureLink(); err != nil {
				return err
			}
		} else {
			s.log.Info("another instance manages this node; serving as its successor until it hands over")
			if err := s.waitForLink(ctx); err != nil {
				return err
			}
		}
		step("interface", t)
	}

	t = time.Now()
	if s.dns, err = dnsserver.New(s.log.Named("dns")); err != nil {
		return err
	}
	s.dns.SetReadiness(s.readiness)
	if err := s.dns.Start(cf, s.opts.Corefile); err != nil {
		return err
	}
	s.log.Info("serving dns", zap.Strings("listeners", s.dns.Addrs()))
	step("coredns listening", t)
	s.writePIDFile()
	if s.manages() && !s.leader.Load() {
		// Registered before "ready": the leader must know of us before the kubelet can stop it.
		if err := s.registerStandby(ctx); err != nil {
			return err
		}
	}

	runCtx, stopRunning := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		s.shutdown(stopRunning, &wg)
	}()

	s.reloads = NewRunner(RunnerConfig{MaxInterval: 24 * time.Hour, BackoffMin: time.Second, BackoffMax: 30 * time.Second}, s.reloadPass)
	wg.Go(func() { s.reloads.Run(runCtx) })
	wg.Go(func() { watcher.Run(runCtx, func() { s.reloads.Trigger("configmap") }) })
	wg.Go(func() { s.onSIGUSR1(runCtx) })

	if s.manages() {
		t = time.Now()
		s.runner = NewRunner(RunnerConfig{MinInterval: minPassInterval, MaxInterval: s.opts.SyncInterval}, s.pass)
		if s.leader.Load() {
			if err := s.pass(ctx, []string{"start"}); err != nil {
				// The runner has not failed a pass yet, so it would wait for an event or the periodic pass:
				// ask it for one now, and its backoff takes over from there.
				s.log.Error("first reconcile pass failed; retrying", zap.Error(err))
				s.runner.Trigger(ReasonRetry)
			}
			step("nftables table", t)
		}
		s.startWatchers(runCtx, &wg)
		wg.Go(func() { s.runner.Run(runCtx) })
		if !s.leader.Load() {
			wg.Go(func() { s.awaitHandover(runCtx) })
		}
	}
	s.log.Info("ready", zap.Duration("elapsed", time.Since(start)), zap.Bool("leader", s.leader.Load()))
	<-ctx.Done()
	s.log.Info("shutting down", zap.String("reason", context.Cause(ctx).Error()))
	return nil
}

// manages reports whether this agent touches the kernel at all.
func (s *Supervisor) manages() bool { return s.opts.SetupInterface || s.opts.SetupNftables }

func (s *Supervisor) watchDirs() []string {
	dirs := []string{filepath.Dir(s.opts.BaseCorefile)}
	if s.kubeDNSDir != "" {
		dirs = append(dirs, s.kubeDNSDir)
	}
	return dirs
}

func (s *Supervisor) openKernel() error {
	var err error
	if s.opts.SetupNftables {
		if s.table, err = nft.Open(nft.WithLogger(s.log)); err != nil {
			return fmt.Errorf("open nftables: %w", err)
		}
	}
	if s.opts.SetupInterface {
		if s.links, err = link.New(s.log); err != nil {
			return fmt.Errorf("open link manager: %w", err)
		}
	}
	return nil
}

func (s *Supervisor) closeKernel() {
	if s.table != nil {
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

func (s *Supervisor) setGauge(f func(*metrics.Metrics)) {
	if s.m != nil {
		f(s.m)
	}
}

// readiness is /ready: CoreDNS serves (checked by dnsserver) and the kernel state is in place.
func (s *Supervisor) readiness() error {
	var err error
	switch {
	case !s.manages():
	case s.leader.Load():
		if p := s.lastPass.Load(); p == nil {
			err = errors.New("no reconcile pass yet")
		} else {
			err = *p
		}
	default:
		err = s.checkKernel()
	}
	s.setGauge(func(m *metrics.Metrics) {
		if err == nil {
			m.Ready.Set(1)
		} else {
			m.Ready.Set(0)
		}
	})
	return err
}
