package dnsserver

import (
	"context"
	"crypto/rand"
	"fmt"
	"math/big"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/miekg/dns"
	"github.com/nodelocaldns/nodelocaldns/internal/chain"
)

// The `loop` directive keeps upstream's syntax (no arguments, once per server block) and its detection: at
// start-up the server sends itself a HINFO query for a random name under its zone; if that query comes back
// to it more than twice, the configuration forwards to itself. Upstream then calls log.Fatalf, which exits the
// process without any teardown. Here the detection is reported to the agent (Server.OnLoop), which fails
// start-up or refuses the reload in order, and the looping query is answered SERVFAIL instead of being passed
// on again, which breaks the circle.

const (
	loopProbeFor  = 30 * time.Second // how long the probe is retried while the server cannot be reached
	loopWatchFor  = 2 * time.Second  // how long after a probe was answered a returning probe still counts
	loopThreshold = 2                // seen more than this many times: a loop
)

// LoopError says a configuration forwards queries back to itself.
type LoopError struct {
	Generation int    // the configuration it was found in: 1 is the first, each reload adds one
	Zone, Addr string // the server block
	QName      string // the probe's name; empty for a loop the Corefile states (selfloop.go)
	Upstream   string // the forward target that names the block's own address, for a stated loop
}

func (e *LoopError) Error() string {
	if e.QName == "" {
		return fmt.Sprintf("forwarding loop in zone %q (configuration %d): it forwards to %s, which is its own address %s",
			e.Zone, e.Generation, e.Upstream, e.Addr)
	}
	return fmt.Sprintf("forwarding loop detected for zone %q at %s (configuration %d): the probe HINFO %s came back to us",
		e.Zone, e.Addr, e.Generation, e.QName)
}

type loopHandler struct {
	next  plugin.Handler
	zone  string
	qname string
	addr  string

	checked chan struct{} // closed once the first probe came back (with or without a loop) or gave up
	// bound is closed by bind, once the instance it belongs to started and is the only one serving.
	bound chan struct{}

	mu       sync.Mutex
	gen      int              // the configuration's generation, from bind
	report   func(*LoopError) // from bind
	seen     int
	off      bool
	reported bool
}

func setupLoop(c *caddy.Controller) error {
	zone := "."
	for i := 0; c.Next(); i++ {
		if i > 0 {
			return plugin.Error("loop", plugin.ErrOnce)
		}
		if c.NextArg() {
			return plugin.Error("loop", c.ArgErr())
		}
		if len(c.ServerBlockKeys) > 0 {
			if z := plugin.Host(c.ServerBlockKeys[0]).NormalizeExact(); len(z) > 0 {
				zone = z[0]
			}
		}
	}
	l := &loopHandler{zone: zone, qname: randomLabel() + "." + randomLabel() + "." + strings.TrimPrefix(zone, "."),
		checked: make(chan struct{}), bound: make(chan struct{})}
	p := pendingFor(c)
	p.loops = append(p.loops, l)
	if zone == "." {
		l.qname = randomLabel() + "." + randomLabel() + "."
	}
	cfg := dnsserver.GetConfig(c)
	cfg.AddPlugin(func(next plugin.Handler) plugin.Handler {
		l.next = next
		return l
	})
	c.OnStartup(func() error {
		host := ""
		if len(cfg.ListenHosts) > 0 {
			host = cfg.ListenHosts[0]
		}
		l.addr = net.JoinHostPort(host, cfg.Port)
		go l.probe()
		return nil
	})
	c.OnShutdown(func() error { l.disable(); return nil })
	return nil
}

func randomLabel() string {
	n, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return fmt.Sprint(time.Now().UnixNano())
	}
	return n.String()
}

// bind tells l the configuration it belongs to started as generation gen, and whom to report a loop to.
func (l *loopHandler) bind(gen int, report func(*LoopError)) {
	l.mu.Lock()
	l.gen, l.report = gen, report
	l.mu.Unlock()
	close(l.bound)
}

// probe sends the HINFO query to our own listener until it is answered (or the deadline passes), then keeps
// counting returns for loopWatchFor.
func (l *loopHandler) probe() {
	// During a reload the previous instance still reads from the listeners this one inherited until caddy
	// stops it: a probe it answered (with the old configuration) would look like no loop. So the first probe
	// waits until this instance serves alone. A handler never bound belongs to a configuration that failed to
	// start: there is nothing to probe.
	select {
	case <-l.bound:
	case <-time.After(loopProbeFor):
		l.disable()
		close(l.checked)
		return
	}
	m := new(dns.Msg)
	m.SetQuestion(l.qname, dns.TypeHINFO)
	c := &dns.Client{Timeout: 5 * time.Second}
	defer func() {
		select {
		case <-l.checked:
		default:
			close(l.checked)
		}
	}()
	for deadline := time.Now().Add(loopProbeFor); time.Now().Before(deadline); {
		if _, _, err := c.Exchange(m, l.addr); err == nil || l.isLoop() {
			close(l.checked)
			break
		}
		l.mu.Lock()
		l.seen = 0
		l.mu.Unlock()
		time.Sleep(time.Second)
	}
	time.Sleep(loopWatchFor)
	l.disable()
}

// WaitLoopChecks waits until every `loop` directive of the running configuration has had its probe answered
// (or found a loop), at most timeout. The agent intercepts nothing before that, so that a configuration that
// loops never gets the clients' queries.
func (s *Server) WaitLoopChecks(timeout time.Duration) bool {
	s.mu.Lock()
	checks := s.loopChecks
	s.mu.Unlock()
	deadline := time.After(timeout)
	for _, c := range checks {
		select {
		case <-c:
		case <-deadline:
			return false
		}
	}
	return true
}

func (l *loopHandler) disable() {
	l.mu.Lock()
	l.off = true
	l.mu.Unlock()
}

func (l *loopHandler) isLoop() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reported
}

func (l *loopHandler) Name() string { return "loop" }

func (l *loopHandler) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	if len(r.Question) == 1 && r.Question[0].Qtype == dns.TypeHINFO && strings.EqualFold(r.Question[0].Name, l.qname) {
		l.mu.Lock()
		if !l.off {
			l.seen++
		}
		report := l.seen > loopThreshold && !l.reported && l.report != nil
		looping := l.seen > loopThreshold
		l.reported = l.reported || report
		f, gen := l.report, l.gen
		l.mu.Unlock()
		if report {
			f(&LoopError{Generation: gen, Zone: l.zone, Addr: l.addr, QName: l.qname})
		}
		if looping {
			m := new(dns.Msg)
			m.SetRcode(r, dns.RcodeServerFailure)
			w.WriteMsg(m)
			return dns.RcodeServerFailure, nil
		}
	}
	return chain.Next(l.Name(), l.next, ctx, w, r)
}
