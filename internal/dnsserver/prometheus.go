package dnsserver

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/metrics"
	"github.com/coredns/coredns/plugin/metrics/vars"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/sockholder"
)

// The `prometheus` directive keeps upstream's syntax (`prometheus [ADDRESS] { runtime_metrics }`), handler and
// series, but its HTTP listener belongs to the process, like health's: opened through listenlimit (bounded as
// listenlimit.CoreDNSMetrics, every address in one pool) and kept across reloads, so a scrape never blinks
// either. Upstream's listener (plugin/metrics OnStartup) is opened with nothing bounding its connections: one
// pod holding idle connections to :9253 took the agent to its descriptor limit and towards its memory limit.
//
// Upstream's plugin cannot be unregistered (caddy keeps one setup per name, and dns64 and template import
// plugin/metrics, which registers it), so ours is registered as metricsDirective, takes upstream's place in the
// execution order, and the Corefile handed to caddy names it (corefileForCaddy); Directives and Plugins show
// `prometheus` as users write it.
const (
	metricsDirective = "prometheus_nodelocaldns"
	userMetrics      = "prometheus"
	// defaultMetricsAddr is upstream's default.
	defaultMetricsAddr = "localhost:9153"
)

// Bounds of the metrics listeners beyond listenlimit's: upstream's timeouts (5 s), a bounded request header.
const (
	metricsReadHeaderTimeout = 2 * time.Second
	metricsTimeout           = 5 * time.Second
	metricsMaxHeader         = 8 << 10
)

func setupPrometheus(c *caddy.Controller) error {
	env := envOf()
	m := metrics.New(defaultMetricsAddr)
	i := 0
	for c.Next() {
		if i > 0 {
			return plugin.Error(userMetrics, plugin.ErrOnce)
		}
		i++
		for _, z := range plugin.OriginsFromArgsOrServerBlock(nil, c.ServerBlockKeys) {
			m.AddZone(z)
		}
		switch args := c.RemainingArgs(); len(args) {
		case 0:
		case 1:
			if _, _, err := net.SplitHostPort(args[0]); err != nil {
				return plugin.Error(userMetrics, err)
			}
			m.Addr = args[0]
		default:
			return plugin.Error(userMetrics, c.ArgErr())
		}
		for c.NextBlock() {
			switch c.Val() {
			case "runtime_metrics":
				if len(c.RemainingArgs()) != 0 {
					return plugin.Error(userMetrics, c.ArgErr())
				}
				if err := env.runtimeMetrics(); err != nil {
					return plugin.Error(userMetrics, err)
				}
			case "tls":
				return plugin.Error(userMetrics, c.Err("tls is not supported by nodelocaldns"))
			default:
				return plugin.Error(userMetrics, c.Errf("unknown option: %s", c.Val()))
			}
		}
	}
	// coredns_plugin_enabled, as upstream keeps it: set for the configuration that starts, reset before a
	// restart, set again for the old one when the restart fails.
	enabled := func() error {
		conf := dnsserver.GetConfig(c)
		for _, h := range conf.ListenHosts {
			addr := conf.Transport + "://" + net.JoinHostPort(h, conf.Port)
			for _, p := range conf.Handlers() {
				vars.PluginEnabled.WithLabelValues(addr, conf.Zone, conf.ViewName, p.Name()).Set(1)
			}
		}
		return nil
	}
	c.OnStartup(enabled)
	c.OnRestartFailed(enabled)
	c.OnRestart(func() error { vars.PluginEnabled.Reset(); return nil })
	if err := setBuildInfo(env.reg); err != nil {
		return plugin.Error(userMetrics, err)
	}
	pendingFor(c).metrics[m.Addr] = true
	dnsserver.GetConfig(c).AddPlugin(func(next plugin.Handler) plugin.Handler {
		m.Next = next
		return &metricsHandler{Metrics: m}
	})
	return nil
}

// setBuildInfo sets coredns_build_info in reg, where plugin/metrics registers it (in the default registry) and
// only its own setup sets it: registering the same gauge again hands back the registered one.
func setBuildInfo(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Name:      "build_info",
		Help:      "A metric with a constant '1' value labeled by version, revision, and goversion from which CoreDNS was built.",
	}, []string{"version", "revision", "goversion"})
	if err := reg.Register(g); err != nil {
		are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err)
		if !ok {
			return fmt.Errorf("register coredns_build_info: %w", err)
		}
		if g, ok = are.ExistingCollector.(*prometheus.GaugeVec); !ok {
			return fmt.Errorf("coredns_build_info is registered as %T", are.ExistingCollector)
		}
	}
	g.WithLabelValues(coremain.CoreVersion, coremain.GitCommit, runtime.Version()).Set(1)
	return nil
}

// syncMetrics opens metrics listeners for wanted addresses and closes the ones no longer wanted, as syncHealth
// does for health's. They serve the Server's gatherer (Options.Gatherer): the agent's is the default registry,
// where CoreDNS's plugins register, which is what upstream's serve.
// An address that cannot be bound is logged, with who holds it, and DNS serves on without its metrics, as with
// upstream's plugin; the next reload tries it again.
func (s *Server) syncMetrics(wanted map[string]bool) {
	for addr := range wanted {
		if _, ok := s.metrics[addr]; ok {
			continue
		}
		ln, err := s.metricsPool.Open(addr)
		if err != nil {
			s.log.Error("coredns metrics listener not opened; serving without it", zap.String("address", addr),
				zap.Error(sockholder.Explain(err)))
			continue
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(s.gatherer, promhttp.HandlerOpts{}))
		ml := &httpListener{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: metricsReadHeaderTimeout,
			ReadTimeout: metricsTimeout, WriteTimeout: metricsTimeout, IdleTimeout: metricsTimeout, MaxHeaderBytes: metricsMaxHeader}}
		go ml.srv.Serve(ln)
		s.metrics[addr] = ml
		s.log.Info("coredns metrics listening", zap.String("address", ln.Addr().String()))
	}
	for addr, ml := range s.metrics {
		if !wanted[addr] {
			ml.close()
			delete(s.metrics, addr)
		}
	}
}
