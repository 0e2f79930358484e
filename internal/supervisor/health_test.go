package supervisor

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
	"github.com/nodelocaldns/nodelocaldns/internal/runner"
)

// /health fails while a reconcile or reload pass runs longer than passHung, whatever DNS does: a real runner
// whose pass blocks, on a fake clock stepped past passHung.
func TestLivenessFailsOnAHungPass(t *testing.T) {
	for _, name := range []string{"reconcile", "reload"} {
		t.Run(name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
			idle := func() *runner.Runner { return runner.New(runner.Config{MaxInterval: time.Hour, Clock: clk}, nil) }
			started, release := make(chan struct{}), make(chan struct{})
			hung := runner.New(runner.Config{MaxInterval: time.Hour, Clock: clk}, func(context.Context, []string) (bool, error) {
				close(started)
				<-release
				return false, nil
			})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { hung.Run(ctx); close(done) }()
			t.Cleanup(func() { close(release); cancel(); <-done })
			h := &health{m: testMetrics(t), reconcile: idle(), reload: idle()}
			if name == "reload" {
				h.reload = hung
			} else {
				h.reconcile = hung
			}
			hung.Trigger("test")
			<-started
			if err := h.liveness(context.Background()); err != nil && strings.Contains(err.Error(), "pass running for") {
				t.Fatalf("liveness() = %v at once, want no hung pass yet", err)
			}
			clk.Step(passHung + time.Second)
			err := h.liveness(context.Background())
			if err == nil || !strings.Contains(err.Error(), name+" pass running for") {
				t.Fatalf("liveness() = %v, want a hung %s pass", err, name)
			}
		})
	}
}

// Liveness tells overload from a hang. Overload: a UDP socket whose queue nobody drains (what a query flood
// does to CoreDNS's), beside a TCP server that answers: 64 concurrent /health checks pass and share one probe
// at a time. A hang: a TCP listener that accepts and never answers: liveness fails within the probe's
// timeout, and counts it.
func TestLivenessToldOverloadFromHang(t *testing.T) {
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	addr := udp.LocalAddr().String()
	flood, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer flood.Close()
	for range 20000 { // fill the receive queue: every further datagram, a UDP probe included, is dropped
		flood.Write(make([]byte, 512))
	}
	tcp, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	// miekg/dns answers a message without a question FORMERR itself, as CoreDNS's server does: count the
	// connections, and make each accept slow, as on a busy server, so concurrent checks overlap one probe.
	probes := &countingListener{Listener: tcp, delay: 50 * time.Millisecond}
	srv := &dns.Server{Listener: probes, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {})}
	go srv.ActivateAndServe()
	defer srv.Shutdown()

	idle := func() *runner.Runner { return runner.New(runner.Config{MaxInterval: time.Hour}, nil) }
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &health{m: m, reconcile: idle(), reload: idle(), probeAddr: addr}
	var wg sync.WaitGroup
	var failed atomic.Int32
	for range 64 {
		wg.Go(func() {
			if err := h.liveness(context.Background()); err != nil {
				failed.Add(1)
				t.Errorf("liveness under overload: %v", err)
			}
		})
	}
	wg.Wait()
	if n := probes.n.Load(); n == 0 || n > 8 {
		t.Errorf("%d probes for 64 concurrent checks, want a few (one at a time)", n)
	}

	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hung.Close()
	go func() {
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	h = &health{m: m, reconcile: idle(), reload: idle(), probeAddr: hung.Addr().String()}
	start := time.Now()
	if err := h.liveness(context.Background()); err == nil {
		t.Fatal("liveness passed with a listener that never answers")
	}
	if d := time.Since(start); d > 2*probeTimeout {
		t.Errorf("a hang took %v to fail liveness, want about %v", d, probeTimeout)
	}
	if got := livenessFailures(t, reg, "dns"); got != 1 {
		t.Errorf("liveness failures (dns) = %v, want 1", got)
	}
}

type countingListener struct {
	net.Listener
	delay time.Duration
	n     atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
		time.Sleep(l.delay)
	}
	return c, err
}

// livenessFailures reads nodelocaldns_liveness_failures_total{reason} from reg.
func livenessFailures(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "nodelocaldns_liveness_failures_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// During a reload the old servers close the connections they accepted, one answered an instant before
// included: a probe answered by this process's server, which then closes the connection before the probe looks
// at it, is this process's answer (issue 39: it was called another instance's, and /health failed 503 three
// times in a row under load). Here every probe connection is answered and closed at once: twenty checks in a row
// pass.
func TestLivenessAnsweredAndClosedByUs(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close() // at once after the answer, as a stopping server does
				co := &dns.Conn{Conn: c}
				q, err := co.ReadMsg()
				if err != nil {
					return
				}
				r := new(dns.Msg)
				r.SetRcodeFormatError(q)
				co.WriteMsg(r)
			}()
		}
	}()
	idle := func() *runner.Runner { return runner.New(runner.Config{MaxInterval: time.Hour}, nil) }
	m, err := metrics.New(prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		h := &health{m: m, reconcile: idle(), reload: idle(), probeAddr: ln.Addr().String()}
		if err := h.liveness(context.Background()); err != nil {
			t.Fatalf("check %d: %v", i+1, err)
		}
	}
}
