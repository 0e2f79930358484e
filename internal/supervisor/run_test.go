package supervisor

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/nodelocaldns/nodelocaldns/internal/fastpath"
	"github.com/nodelocaldns/nodelocaldns/internal/options"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// runIP is a loopback address of its own (loopback holds all of 127/8), so this test shares no listener with
// another test running on the machine.
const runIP = "127.0.0.77"

var ranOnce atomic.Bool

// The whole Run, without the kernel (-setupinterface=false -setupiptables=false): start-up, a reload, and
// shutdown, while /health and /ready are asked continuously from the moment CoreDNS starts serving them. Under
// -race this is what shows that the probes, answered on CoreDNS's goroutines from dns.Start on, read nothing
// Run writes afterwards.
func TestRunServesProbesThroughStartReloadAndStop(t *testing.T) {
	if !ranOnce.CompareAndSwap(false, true) {
		t.Skip("caddy and dnsserver allow one embedded CoreDNS per process: run this test with -count=1")
	}
	dir := t.TempDir()
	dnsPort, healthPort := freePort(t, "udp"), freePort(t, "tcp")
	base := filepath.Join(dir, "coredns", "Corefile.base")
	written := filepath.Join(dir, "Corefile")
	if err := os.MkdirAll(filepath.Dir(base), 0o755); err != nil {
		t.Fatal(err)
	}
	corefile := func(plugin string) []byte {
		return fmt.Appendf(nil, ".:%d {\n    bind %s\n    health %s:%d\n    %s\n}\n", dnsPort, runIP, runIP, healthPort, plugin)
	}
	if err := os.WriteFile(base, corefile("whoami"), 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := options.Parse([]string{"-localip", runIP, "-setupinterface=false", "-setupiptables=false",
		"-dns.port", strconv.Itoa(dnsPort), "-health-port", strconv.Itoa(healthPort),
		"-basecorefile", base, "-conf", written, "-kubednscm", filepath.Join(dir, "no-kube-dns")}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	// A Serving actor starts once the agent serves (its DNS answers then) and is stopped at shutdown.
	var servedAtStart, servingStopped atomic.Bool
	serving := Actor{Name: "serving probe", Run: func(ctx context.Context) {
		m := new(dns.Msg).SetQuestion("example.org.", dns.TypeA)
		r, err := dns.Exchange(m, net.JoinHostPort(runIP, strconv.Itoa(dnsPort)))
		servedAtStart.Store(err == nil && r.Rcode == dns.RcodeSuccess)
		<-ctx.Done()
		servingStopped.Store(true)
	}}
	// Each component logs through a child logger named after it; the lifecycle's own lines through the root.
	observed, logs := observer.New(zap.InfoLevel)
	log := zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), observed))
	s, err := New(Config{Options: o, Log: log, Getenv: func(string) string { return "" },
		Metrics: testMetrics(t), FastPath: fastpath.NewMetrics(), Serving: []Actor{serving}})
	if err != nil {
		t.Fatal(err)
	}

	// Ask both probes in a loop for the whole run, as the kubelet would (only much more often).
	var healthy, ready atomic.Bool
	probing, stopProbing := context.WithCancel(context.Background())
	probesDone := make(chan struct{})
	go func() {
		defer close(probesDone)
		c := &http.Client{Timeout: time.Second}
		for probing.Err() == nil {
			for path, ok := range map[string]*atomic.Bool{"/health": &healthy, "/ready": &ready} {
				if resp, err := c.Get(fmt.Sprintf("http://%s:%d%s", runIP, healthPort, path)); err == nil {
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						ok.Store(true)
					}
				}
			}
		}
	}()
	defer func() { stopProbing(); <-probesDone }()

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx) }()

	testenv.Eventually(t, 20*time.Second, "/health and /ready to answer 200", func() bool { return healthy.Load() && ready.Load() })
	if err := os.WriteFile(base, corefile("errors"), 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "the reload to write the new Corefile", func() bool {
		b, err := os.ReadFile(written)
		return err == nil && bytes.Contains(b, []byte("errors")) && !bytes.Contains(b, []byte("whoami"))
	})
	stop()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("Run = %v after the context ended, want nil", err)
		}
		if !servedAtStart.Load() || !servingStopped.Load() {
			t.Errorf("serving actor: DNS answered when it started %v, stopped by shutdown %v; want both", servedAtStart.Load(), servingStopped.Load())
		}
		for msg, logger := range map[string]string{"ready": "", "reloaded coredns": "reload", "stopped": ""} {
			lines := logs.FilterMessage(msg).All()
			if len(lines) == 0 || lines[0].LoggerName != logger {
				t.Errorf("log line %q: %d lines, the first from logger %q; want one from %q", msg, len(lines), loggerOf(lines), logger)
			}
		}
	case <-time.After(shutdownDeadline + 5*time.Second):
		t.Fatal("Run did not return after the context ended")
	}
}

func loggerOf(lines []observer.LoggedEntry) string {
	if len(lines) == 0 {
		return ""
	}
	return lines[0].LoggerName
}

// freePort is a port nothing listens on now (for network "udp" or "tcp"), below the ephemeral range
// (testenv.FreePort): a port bound and released in that range can be the next connection's source port.
func freePort(t *testing.T, network string) int {
	t.Helper()
	p, err := strconv.Atoi(testenv.FreePort(t, network))
	if err != nil {
		t.Fatal(err)
	}
	return p
}
