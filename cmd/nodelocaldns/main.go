// Command nodelocaldns is an nftables-native, drop-in replacement for Kubernetes' NodeLocal DNSCache agent
// (node-cache): it takes node-cache's flags, renders node-cache's Corefile template, serves DNS with embedded
// CoreDNS, and steers traffic with one nftables table it owns.
//
// May touch: what the supervisor, preflight or nodetaint touch for it; itself, with -top or -probe, the health socket it dials.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/nodelocaldns/nodelocaldns/internal/clients"
	"github.com/nodelocaldns/nodelocaldns/internal/dnsserver"
	"github.com/nodelocaldns/nodelocaldns/internal/fastpath"
	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
	"github.com/nodelocaldns/nodelocaldns/internal/nodetaint"
	"github.com/nodelocaldns/nodelocaldns/internal/options"
	"github.com/nodelocaldns/nodelocaldns/internal/preflight"
	"github.com/nodelocaldns/nodelocaldns/internal/supervisor"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	// -help is asked for: its text goes to stdout, to be paged or grepped; errors go to stderr.
	o, err := options.Parse(args, stdout)
	if errors.Is(err, options.ErrHelp) {
		writeEnvUsage(stdout)
		return 0
	}
	if err == nil && o.Mode == options.ModeServe {
		err = checkPaths(o, os.Stat)
	}
	if err != nil {
		fmt.Fprintf(stderr, "nodelocaldns: %v\n", err)
		return 2
	}
	switch o.Mode {
	case options.ModeVersion:
		fmt.Fprintf(stdout, "nodelocaldns %s (CoreDNS %s)\n", version, dnsserver.CoreDNSVersion())
		return 0
	case options.ModePlugins:
		fmt.Fprintln(stdout, strings.Join(dnsserver.Plugins(), "\n"))
		return 0
	case options.ModeProbe:
		return probe(o.HealthSocket, o.Probe, stdout, stderr)
	case options.ModeTop:
		return top(o.HealthSocket, o.TopN, o.TopJSON, stdout, stderr)
	case options.ModePrintRules:
		return printRules(o, os.Getenv, preflight.Host(), stdout, stderr)
	}

	log, err := newLogger(o.LogLevel, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "nodelocaldns: %v\n", err)
		return 1
	}
	defer log.Sync()
	if o.Mode == options.ModeTeardown {
		return teardown(o, log, supervisor.Teardown)
	}
	t := tune(os.Getenv, os.ReadFile)
	logTuning(log, t)
	return serve(o, log, t)
}

func serve(o *options.Options, log *zap.Logger, t tuning) int {
	// Every signal that would end the process leaves the node the same way (supervisor: delete our table, then
	// the interface if no other instance is left). SIGKILL cannot be caught: the kernel then removes our
	// owned table by itself.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	defer stop()
	// CoreDNS and caddy log through the standard logger, which is the process's: routed into ours here, once.
	stdlog.SetFlags(0)
	stdlog.SetOutput(dnsserver.LogWriter(log.Named("dns").Named("coredns")))

	// The default registry: CoreDNS's plugins register into it at init, so everything else registers there too,
	// and both metrics endpoints (ours, the Corefile's prometheus) serve it.
	m, err := metrics.New(prometheus.DefaultRegisterer, nil) // the supervisor sets the rule counters' source
	if err != nil {
		log.Error("register metrics", zap.Error(err))
		return 1
	}
	fast := fastpath.NewMetrics()
	if err := fast.Register(prometheus.DefaultRegisterer); err != nil {
		log.Error("register metrics", zap.Error(err))
		return 1
	}
	pf := preflight.Host().Check(o.LocalIPs) // before anything is touched, and touching nothing
	pf.Log(log.Named("preflight"))
	pf.Export(m.NodeCapability)
	cfg := supervisor.Config{Options: o, Log: log, Getenv: os.Getenv, Metrics: m, FastPath: fast,
		Gatherer: fast.Gatherer(prometheus.DefaultGatherer), Registerer: prometheus.DefaultRegisterer}
	taint, err := startupTaint(o, os.Getenv, nodetaint.ServiceAccountDir, log)
	if err != nil {
		log.Error("invalid configuration", zap.Error(err))
		return 2
	}
	if taint != nil {
		cfg.Serving = append(cfg.Serving, *taint)
	}
	if t.GCPercent != 0 {
		// From when the agent serves: start-up's garbage (CoreDNS's set-up) is not a storm of misses.
		cfg.Serving = append(cfg.Serving, supervisor.Actor{Name: "gcpace", Run: runGCPacer(t.GCPercent)})
	}
	if clients.Enabled(os.Getenv) {
		acct := clients.New(log.Named("clients"))
		if err := acct.Register(prometheus.DefaultRegisterer); err != nil {
			log.Error("register metrics", zap.Error(err))
			return 1
		}
		cfg.Clients = acct
		cfg.Serving = append(cfg.Serving, supervisor.Actor{Name: "clients", Run: acct.Run})
	}
	pods, err := podIdentity(o, os.Getenv, nodetaint.ServiceAccountDir, cfg.Clients, log)
	if err != nil {
		log.Error("invalid configuration", zap.Error(err))
		return 2
	}
	if pods != nil {
		cfg.Serving = append(cfg.Serving, *pods)
	}
	sup, err := supervisor.New(cfg)
	if err != nil {
		log.Error("invalid configuration", zap.Error(err))
		return 2
	}
	log.Info("starting", zap.String("version", version), zap.String("coredns", dnsserver.CoreDNSVersion()),
		zap.Stringers("localip", o.LocalIPs), zap.Bool("setupinterface", o.SetupInterface), zap.Bool("setupnftables", o.SetupNftables))
	if err := sup.Run(ctx); err != nil {
		log.Error("start-up failed", zap.Error(err))
		return 1
	}
	return 0
}

// teardown is `-teardown`: the same leaving sequence as a stopping instance (supervisor.Teardown). It exits 1
// when something it should have removed is left, and the log line names it.
func teardown(o *options.Options, log *zap.Logger, leave func(*options.Options, *zap.Logger) error) int {
	if err := leave(o, log); err != nil {
		log.Error("teardown failed", zap.Error(err))
		return 1
	}
	return 0
}

func newLogger(level string, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, err
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.Lock(zapcore.AddSync(w)), lvl)
	return zap.New(core), nil
}
