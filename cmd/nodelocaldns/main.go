// Command nodelocaldns is an nftables-native, drop-in replacement for Kubernetes' NodeLocal DNSCache agent
// (node-cache): it takes node-cache's flags, renders node-cache's Corefile template, serves DNS with embedded
// CoreDNS, and steers traffic with one nftables table it owns.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	// Root CAs compiled in, used only when the system has none: the image is one static binary on an empty base,
	// and a `forward . tls://` upstream must still verify its server.
	_ "golang.org/x/crypto/x509roots/fallback"

	"github.com/nodelocaldns/nodelocaldns/internal/dnsserver"
	"github.com/nodelocaldns/nodelocaldns/internal/link"
	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/options"
	"github.com/nodelocaldns/nodelocaldns/internal/supervisor"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	o, err := options.Parse(args, stderr)
	if errors.Is(err, options.ErrHelp) {
		return 0
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
	case options.ModePrintRules:
		spec := nft.Spec{LocalIPs: o.LocalIPs, DNSPort: o.DNSPort, HealthPort: o.HealthPort}
		if err := spec.Validate(); err != nil {
			fmt.Fprintf(stderr, "nodelocaldns: %v\n", err)
			return 2
		}
		fmt.Fprint(stdout, nft.Build(spec).String())
		return 0
	}

	log, err := newLogger(o.LogLevel, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "nodelocaldns: %v\n", err)
		return 1
	}
	defer log.Sync()
	if o.Mode == options.ModeTeardown {
		return teardown(o, log)
	}
	t := tune(os.Getenv, os.ReadFile)
	logTuning(log, t)
	if t.Stacks {
		go newStackTuner(log.Named("tuning")).run()
	}
	return serve(o, log)
}

func serve(o *options.Options, log *zap.Logger) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	// The table's counters are read at scrape time. Scrapes of our endpoint and of CoreDNS's prometheus endpoint
	// (the same registry) run concurrently, so the connection is opened once, on first use.
	var counters func() ([]metrics.RuleCounter, error)
	if o.SetupNftables {
		open := sync.OnceValues(func() (*nft.Conn, error) { return nft.Open() })
		counters = func() ([]metrics.RuleCounter, error) {
			c, err := open()
			if err != nil {
				return nil, err
			}
			return ruleCounters(c)
		}
	}
	m, err := metrics.New(prometheus.DefaultRegisterer, counters)
	if err != nil {
		log.Error("register metrics", zap.Error(err))
		return 1
	}
	go serveMetrics(ctx, log, o.MetricsListenAddress)

	sup, err := supervisor.New(supervisor.Config{Options: o, Log: log, Getenv: os.Getenv, Metrics: m})
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

// serveMetrics serves /metrics until ctx is done. As in node-cache, the agent serves DNS without its own metrics
// endpoint rather than not at all; unlike node-cache, a failed bind (say, node-cache still holds the port during a
// migration) is retried, so the endpoint appears once the port is free.
func serveMetrics(ctx context.Context, log *zap.Logger, addr string) {
	const retry = 5 * time.Second
	for {
		err := metrics.Serve(ctx, addr, prometheus.DefaultGatherer)
		if err == nil || ctx.Err() != nil {
			return
		}
		log.Error("metrics server; retrying", zap.String("address", addr), zap.Duration("retry", retry), zap.Error(err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
	}
}

func ruleCounters(c *nft.Conn) ([]metrics.RuleCounter, error) {
	rcs, err := c.Counters()
	if err != nil {
		return nil, err
	}
	out := make([]metrics.RuleCounter, len(rcs))
	for i, rc := range rcs {
		out[i] = metrics.RuleCounter{Chain: rc.Chain, Comment: rc.Comment, Packets: rc.Packets, Bytes: rc.Bytes}
	}
	return out, nil
}

// teardown removes what an earlier run left behind: the table, then the interface.
func teardown(o *options.Options, log *zap.Logger) int {
	code := 0
	if c, err := nft.Open(); err != nil {
		log.Error("open nftables", zap.Error(err))
		code = 1
	} else {
		if err := c.Teardown(); err != nil {
			log.Error("delete nftables table", zap.Error(err))
			code = 1
		}
		c.Close()
	}
	if m, err := link.New(log); err != nil {
		log.Error("open link manager", zap.Error(err))
		code = 1
	} else {
		if err := m.Remove(o.InterfaceName); err != nil {
			log.Error("remove interface", zap.Error(err))
			code = 1
		}
		m.Close()
	}
	if code == 0 {
		log.Info("removed table and interface", zap.String("table", "inet "+nft.TableName), zap.String("interface", o.InterfaceName))
	}
	return code
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
