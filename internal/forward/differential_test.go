package forward_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	_ "github.com/coredns/coredns/plugin/forward" // the reference: registers "forward" at init
	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// The differential test runs CoreDNS's forward plugin and ours, built from the same stanza, against the same
// real upstream servers on loopback, and compares what a client gets: the rcode returned, the message written
// (rcode, flags, answers), and whether the query went on to the next plugin. The cases are those of CoreDNS's
// own black-box tests (plugin/forward's forward_test, health_test, proxy_test and setup_test; plugin/pkg/proxy's
// proxy_test and health_test), rewritten as one table. Not ported, and why:
//   - dot_test, doq_test, TestProxyTLSFail, TestProxyHTTPS, the DoQ and DoH proxy tests: tls://, https:// and
//     quic:// upstreams are carried by CoreDNS's own plugin/pkg/proxy here, unchanged;
//   - persistent_test, connect_test, dial_context_test (CoreDNS's connection cache: max_idle_conns, FIFO max_age,
//     yield after stop): internals of the transport ours replaces; internal/upstream has its own tests;
//   - TestCoreDNSOverflow, TestShouldTruncateResponse: an answer larger than the read buffer; ours reads up to
//     64 KiB, the largest a DNS message can be;
//   - recverr_linux_test: IP_RECVERR on CoreDNS's sockets; ours are connected sockets, which get ICMP errors
//     as ECONNREFUSED without it;
//   - resolve_test (hostname upstreams, resolver): refused by ours (TestHostnameUpstreamsRefused);
//   - TestSetTapPlugin: dnstap is not fed by our forward (a gap: see docs/failure-model.md);
//   - TestForwardDoesNotRetryLocalPackError: a request miekg/dns cannot pack does not reach forward through a
//     real server.

// coreDNSSetup is CoreDNS's forward setup, as its package registered it.
func coreDNSSetup(t testing.TB) caddy.SetupFunc {
	t.Helper()
	s, err := caddy.DirectiveAction("dns", "forward")
	if err != nil {
		t.Fatalf("coredns's forward is not registered: %v", err)
	}
	return s
}

// nextPlugin is what follows forward: it answers with a marker record, so a test sees the query reached it.
type nextPlugin struct{}

func (nextPlugin) Name() string { return "next" }
func (nextPlugin) ServeDNS(_ context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Answer = []dns.RR{&dns.TXT{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeTXT, Class: dns.ClassINET}, Txt: []string{"next"}}}
	_ = w.WriteMsg(m)
	return 0, nil
}

type lifecycle interface {
	OnStartup() error
	OnShutdown() error
}

// instance builds the plugin chain a Corefile block with stanza would have, started.
func instance(t testing.TB, setup caddy.SetupFunc, stanza string) (plugin.Handler, error) {
	t.Helper()
	c := caddy.NewTestController("dns", stanza)
	c.ServerBlockKeys = []string{"."}
	if err := setup(c); err != nil {
		return nil, err
	}
	cfg := dnsserver.GetConfig(c)
	var h plugin.Handler = nextPlugin{}
	for i := len(cfg.Plugin) - 1; i >= 0; i-- {
		h = cfg.Plugin[i](h)
	}
	// Start every forward of the chain (each stanza's), and stop them when the test ends.
	for x := h; x != nil; {
		l, ok := x.(lifecycle)
		if !ok {
			break
		}
		_ = l.OnStartup()
		t.Cleanup(func() { _ = l.OnShutdown() })
		x = nextOf(x)
	}
	return h, nil
}

// nextOf follows a forward to the handler after it, through the exported Next field both plugins have.
func nextOf(h plugin.Handler) plugin.Handler {
	v := reflect.ValueOf(h)
	if v.Kind() != reflect.Pointer {
		return nil
	}
	f := v.Elem().FieldByName("Next")
	if !f.IsValid() || f.IsNil() {
		return nil
	}
	n, _ := f.Interface().(plugin.Handler)
	return n
}

// writer is a client's ResponseWriter that keeps what is written; tcp says which protocol the client used.
type writer struct {
	tcp bool
	msg *dns.Msg
}

func (w *writer) LocalAddr() net.Addr {
	if w.tcp {
		return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53}
	}
	return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53}
}
func (w *writer) RemoteAddr() net.Addr {
	if w.tcp {
		return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 40000}
	}
	return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 40000}
}
func (w *writer) WriteMsg(m *dns.Msg) error { w.msg = m.Copy(); return nil }
func (w *writer) Write([]byte) (int, error) { return 0, errors.New("not used") }
func (w *writer) Close() error              { return nil }
func (w *writer) TsigStatus() error         { return nil }
func (w *writer) TsigTimersOnly(bool)       {}
func (w *writer) Hijack()                   {}

// outcome is what the client saw, printed for comparison.
func outcome(rc int, err error, w *writer) string {
	s := fmt.Sprintf("rc=%s err=%v", dns.RcodeToString[rc], err != nil)
	if w.msg == nil {
		return s + " (nothing written)"
	}
	m := w.msg
	s += fmt.Sprintf(" written=%s tc=%v", dns.RcodeToString[m.Rcode], m.Truncated)
	for _, rr := range m.Answer {
		s += " | " + strings.ReplaceAll(rr.String(), "\t", " ")
	}
	return s
}

// Upstream behaviours.
func answer(ip string) dns.HandlerFunc {
	return func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: net.ParseIP(ip)}}
		_ = w.WriteMsg(m)
	}
}

func rcode(rc int) dns.HandlerFunc {
	return func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetRcode(r, rc)
		_ = w.WriteMsg(m)
	}
}

// truncUDP answers over UDP with the TC bit and no records, over TCP in full.
func truncUDP(w dns.ResponseWriter, r *dns.Msg) {
	if _, tcp := w.RemoteAddr().(*net.TCPAddr); tcp {
		answer("192.0.2.53")(w, r)
		return
	}
	m := new(dns.Msg)
	m.SetReply(r)
	m.Truncated = true
	_ = w.WriteMsg(m)
}

// onlyTCP answers over TCP and says over UDP which protocol it was asked on.
func protoEcho(w dns.ResponseWriter, r *dns.Msg) {
	if _, tcp := w.RemoteAddr().(*net.TCPAddr); tcp {
		answer("192.0.2.6")(w, r)
		return
	}
	answer("192.0.2.17")(w, r)
}

func wrongQuestion(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Question[0].Name = "other.example."
	_ = w.WriteMsg(m)
}

func slow(d time.Duration, h dns.HandlerFunc) dns.HandlerFunc {
	return func(w dns.ResponseWriter, r *dns.Msg) {
		time.Sleep(d)
		h(w, r)
	}
}

// deadAddr is a loopback address where nothing listens (refused at once, over UDP and TCP). It is not on
// 127.0.0.1, where the transports' own sockets take their ephemeral ports: a UDP socket connected to
// 127.0.0.1:p could be given p itself, and then reads back its own query (CI saw ours answer FORMERR so, once).
// Sockets asking 127.0.0.254 get 127.0.0.1 as their source, so none can be connected to itself.
func deadAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.254:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

type diffCase struct {
	name   string
	stanza string            // %[1]s, %[2]s: the upstreams' addresses
	ups    []dns.HandlerFunc // nil: a dead address
	qname  string
	tcp    bool
	// concurrent sends this many queries at once and compares the multiset of outcomes.
	concurrent int
	// warm sends this many queries first (health checks get a chance to mark a dead upstream down).
	warm int
	// ours, when set, is what ours answers instead of CoreDNS's, by design (the reason is the case's name).
	ours string
}

func diffCases() []diffCase {
	return []diffCase{
		{name: "answer over udp", stanza: "forward . %[1]s", ups: []dns.HandlerFunc{answer("192.0.2.1")}},
		{name: "answer over tcp", stanza: "forward . %[1]s", ups: []dns.HandlerFunc{answer("192.0.2.1")}, tcp: true},
		{name: "force_tcp from a udp client", stanza: "forward . %[1]s {\nforce_tcp\n}", ups: []dns.HandlerFunc{protoEcho}},
		{name: "prefer_udp from a tcp client", stanza: "forward . %[1]s {\nprefer_udp\n}", ups: []dns.HandlerFunc{protoEcho}, tcp: true},
		{name: "client's protocol by default (udp)", stanza: "forward . %[1]s", ups: []dns.HandlerFunc{protoEcho}},
		{name: "client's protocol by default (tcp)", stanza: "forward . %[1]s", ups: []dns.HandlerFunc{protoEcho}, tcp: true},
		{name: "force_tcp wins over prefer_udp", stanza: "forward . %[1]s {\nforce_tcp\nprefer_udp\n}", ups: []dns.HandlerFunc{protoEcho}},
		{name: "nxdomain passed on", stanza: "forward . %[1]s", ups: []dns.HandlerFunc{rcode(dns.RcodeNameError)}},
		{name: "truncated passed on to a udp client", stanza: "forward . %[1]s", ups: []dns.HandlerFunc{truncUDP}},
		{name: "truncated retried over tcp with prefer_udp", stanza: "forward . %[1]s {\nprefer_udp\n}", ups: []dns.HandlerFunc{truncUDP}},
		{name: "wrong question over tcp is formerr", stanza: "forward . %[1]s", ups: []dns.HandlerFunc{wrongQuestion}, tcp: true},
		{name: "a udp datagram with our ID but another question is not our answer (spoofing): servfail after the timeout", stanza: "forward . %[1]s", ups: []dns.HandlerFunc{wrongQuestion},
			ours: "rc=SERVFAIL err=true (nothing written)"},
		{name: "except goes to the next plugin", stanza: "forward . %[1]s {\nexcept skip.example\n}", ups: []dns.HandlerFunc{answer("192.0.2.1")}, qname: "a.skip.example."},
		{name: "except does not cover from itself", stanza: "forward example %[1]s {\nexcept example\n}", ups: []dns.HandlerFunc{answer("192.0.2.1")}, qname: "example."},
		{name: "outside from goes to the next plugin", stanza: "forward other.test %[1]s", ups: []dns.HandlerFunc{answer("192.0.2.1")}},
		{name: "next on an rcode to the following forward", stanza: "forward . %[1]s {\nnext NXDOMAIN\n}\nforward . %[2]s", ups: []dns.HandlerFunc{rcode(dns.RcodeNameError), answer("192.0.2.2")}},
		{name: "next with no following forward", stanza: "forward . %[1]s {\nnext NXDOMAIN\n}", ups: []dns.HandlerFunc{rcode(dns.RcodeNameError)}},
		{name: "next_on_nodata", stanza: "forward . %[1]s {\nnext_on_nodata\n}\nforward . %[2]s", ups: []dns.HandlerFunc{rcode(dns.RcodeSuccess), answer("192.0.2.2")}},
		{name: "no next_on_nodata serves the empty answer", stanza: "forward . %[1]s\nforward . %[2]s", ups: []dns.HandlerFunc{rcode(dns.RcodeSuccess), answer("192.0.2.2")}},
		{name: "failover to the other upstream", stanza: "forward . %[1]s %[2]s {\npolicy sequential\nfailover SERVFAIL\n}", ups: []dns.HandlerFunc{rcode(dns.RcodeServerFailure), answer("192.0.2.2")}},
		{name: "failover stops after every upstream", stanza: "forward . %[1]s %[2]s {\nfailover SERVFAIL\n}", ups: []dns.HandlerFunc{rcode(dns.RcodeServerFailure), rcode(dns.RcodeServerFailure)}},
		{name: "sequential takes the first", stanza: "forward . %[1]s %[2]s {\npolicy sequential\n}", ups: []dns.HandlerFunc{answer("192.0.2.1"), answer("192.0.2.2")}},
		{name: "a dead upstream is skipped", stanza: "forward . %[1]s %[2]s {\npolicy sequential\n}", ups: []dns.HandlerFunc{nil, answer("192.0.2.2")}},
		{name: "dead upstream is servfail", stanza: "forward . %[1]s", ups: []dns.HandlerFunc{nil}},
		{name: "dead upstream over tcp is servfail", stanza: "forward . %[1]s {\nforce_tcp\n}", ups: []dns.HandlerFunc{nil}},
		{name: "every upstream down with failfast", stanza: "forward . %[1]s {\nhealth_check 50ms\nmax_fails 1\nfailfast_all_unhealthy_upstreams\n}", ups: []dns.HandlerFunc{nil}, warm: 3},
		{name: "every upstream down without failfast", stanza: "forward . %[1]s {\nhealth_check 50ms\nmax_fails 1\n}", ups: []dns.HandlerFunc{nil}, warm: 3},
		{name: "max_fails 0 never marks down", stanza: "forward . %[1]s {\nmax_fails 0\nfailfast_all_unhealthy_upstreams\n}", ups: []dns.HandlerFunc{nil}, warm: 2},
		{name: "max_concurrent refuses beyond the bound", stanza: "forward . %[1]s {\nmax_concurrent 2\n}", ups: []dns.HandlerFunc{slow(300*time.Millisecond, answer("192.0.2.1"))}, concurrent: 5},
		{name: "max_connect_attempts 1", stanza: "forward . %[1]s %[2]s {\npolicy sequential\nmax_connect_attempts 1\n}", ups: []dns.HandlerFunc{nil, answer("192.0.2.2")}},
	}
}

func TestDifferential(t *testing.T) {
	ref := coreDNSSetup(t)
	for _, tc := range diffCases() {
		t.Run(tc.name, func(t *testing.T) {
			addrs := []any{}
			for _, h := range tc.ups {
				if h == nil {
					addrs = append(addrs, deadAddr(t))
					continue
				}
				a, _ := testenv.ServeDNS(t, "127.0.0.1:0", h)
				addrs = append(addrs, a)
			}
			for len(addrs) < 2 {
				addrs = append(addrs, deadAddr(t))
			}
			stanza := fmt.Sprintf(tc.stanza, addrs...)
			theirs, err := instance(t, ref, stanza)
			if err != nil {
				t.Fatalf("coredns's setup: %v", err)
			}
			ours, err := instance(t, ourSetup, stanza)
			if err != nil {
				t.Fatalf("our setup: %v", err)
			}
			want, got := run(tc, theirs), run(tc, ours)
			if tc.ours != "" {
				if want == tc.ours {
					t.Errorf("coredns now answers as ours does (%s): make this case plain", want)
				}
				want = tc.ours
			}
			if want != got {
				t.Errorf("%s\ncoredns: %s\nours:    %s", stanza, want, got)
			}
		})
	}
}

// run asks h as the case says and describes what the client got.
func run(tc diffCase, h plugin.Handler) string {
	qname := tc.qname
	if qname == "" {
		qname = "www.example.org."
	}
	ask := func() string {
		r := new(dns.Msg)
		r.SetQuestion(qname, dns.TypeA)
		w := &writer{tcp: tc.tcp}
		ctx := context.WithValue(context.Background(), dnsserver.Key{}, &dnsserver.Server{Addr: "dns://.:53"})
		rc, err := h.ServeDNS(ctx, w, r)
		return outcome(rc, err, w)
	}
	for range tc.warm {
		ask()
		time.Sleep(150 * time.Millisecond)
	}
	if tc.concurrent == 0 {
		return ask()
	}
	var mu sync.Mutex
	counts := map[string]int{}
	var wg sync.WaitGroup
	for range tc.concurrent {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := ask()
			mu.Lock()
			counts[o]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	return fmt.Sprint(counts)
}
