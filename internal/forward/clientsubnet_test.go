package forward_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"

	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/forward"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// echoECS is an upstream that keeps the last query it got and answers with its OPT echoed, ECS included, as an
// ECS-aware server does (scope 24).
type echoECS struct {
	mu   sync.Mutex
	last *dns.Msg
}

func (e *echoECS) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	e.mu.Lock()
	e.last = r.Copy()
	e.mu.Unlock()
	m := new(dns.Msg)
	m.SetReply(r)
	m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: net.IPv4(10, 0, 0, 1)}}
	if o := r.IsEdns0(); o != nil {
		echo := &dns.OPT{Hdr: o.Hdr}
		for _, opt := range o.Option {
			if s, ok := opt.(*dns.EDNS0_SUBNET); ok {
				c := *s
				c.SourceScope = 24
				opt = &c
			}
			echo.Option = append(echo.Option, opt)
		}
		m.Extra = append(m.Extra, echo)
	}
	_ = w.WriteMsg(m)
}

func (e *echoECS) got() *dns.Msg {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.last
}

// from is a client's ResponseWriter from a given address, keeping what is written.
type from struct {
	remote net.Addr
	msg    *dns.Msg
}

func (w *from) LocalAddr() net.Addr       { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53} }
func (w *from) RemoteAddr() net.Addr      { return w.remote }
func (w *from) WriteMsg(m *dns.Msg) error { w.msg = m.Copy(); return nil }
func (w *from) Write([]byte) (int, error) { return 0, errors.New("not used") }
func (w *from) Close() error              { return nil }
func (w *from) TsigStatus() error         { return nil }
func (w *from) TsigTimersOnly(bool)       {}
func (w *from) Hijack()                   {}

func ecsOf(m *dns.Msg) *dns.EDNS0_SUBNET {
	if o := m.IsEdns0(); o != nil {
		for _, e := range o.Option {
			if s, ok := e.(*dns.EDNS0_SUBNET); ok {
				return s
			}
		}
	}
	return nil
}

func TestClientSubnet(t *testing.T) {
	up := &echoECS{}
	addr, _ := testenv.ServeDNS(t, "127.0.0.1:0", up)
	upAddr := netip.MustParseAddrPort(addr).Addr()
	v4 := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 7), Port: 40000}
	v6 := &net.TCPAddr{IP: net.ParseIP("fd00::7"), Port: 40000}
	for _, tc := range []struct {
		name   string
		to     netip.Addr // the upstream marked
		client net.Addr
		edns   bool              // the client's query has an OPT
		sent   *dns.EDNS0_SUBNET // an ECS the client sent
		want   string            // the ECS the upstream got, "" for none
		size   uint16            // the UDP size the upstream was offered, when want is set
	}{
		{name: "off", client: v4, edns: true},
		{name: "another upstream", to: netip.MustParseAddr("10.96.0.10"), client: v4, edns: true},
		{name: "v4 client", to: upAddr, client: v4, edns: true, want: "127.0.0.7/32/0", size: 1232},
		{name: "v6 client", to: upAddr, client: v6, edns: true, want: "[fd00::7]/128/0", size: 1232},
		{name: "no client (a prefetch)", to: upAddr, client: &net.TCPAddr{}, edns: true},
		{name: "no EDNS", to: upAddr, client: v4, want: "127.0.0.7/32/0", size: 512},
		{name: "the client's ECS replaced", to: upAddr, client: v4, edns: true, want: "127.0.0.7/32/0", size: 1232,
			sent: &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, Address: net.IPv4(192, 0, 2, 0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := instance(t, ourSetup, fmt.Sprintf("forward . %s", addr))
			if err != nil {
				t.Fatal(err)
			}
			wantMarked := 0
			if tc.to == upAddr {
				wantMarked = 1
			}
			if n := h.(*forward.Forward).CarryClientSubnet(tc.to); n != wantMarked {
				t.Fatalf("CarryClientSubnet marked %d upstreams, want %d", n, wantMarked)
			}
			r := new(dns.Msg)
			r.SetQuestion("svc.cluster.local.", dns.TypeA)
			if tc.edns {
				r.SetEdns0(1232, false)
				if tc.sent != nil {
					o := r.IsEdns0()
					o.Option = append(o.Option, tc.sent)
				}
			}
			before := r.String()
			w := &from{remote: tc.client}
			if rc, err := h.ServeDNS(context.Background(), w, r); rc != 0 || err != nil {
				t.Fatalf("ServeDNS: %d %v", rc, err)
			}
			if r.String() != before {
				t.Errorf("the client's query was changed:\n%s\nwas\n%s", r, before)
			}
			got := up.got()
			switch s := ecsOf(got); {
			case tc.want == "" && s != nil:
				t.Errorf("upstream got ECS %s, want none", s)
			case tc.want != "" && (s == nil || s.String() != tc.want):
				t.Errorf("upstream got ECS %v, want %s", s, tc.want)
			case tc.want != "" && got.IsEdns0().UDPSize() != tc.size:
				t.Errorf("upstream was offered %d bytes, want %d", got.IsEdns0().UDPSize(), tc.size)
			}
			if tc.want == "" {
				return
			}
			// The answer loses what was added: no ECS, and no OPT for a client that sent none.
			switch {
			case w.msg == nil:
				t.Fatal("nothing written")
			case !tc.edns && w.msg.IsEdns0() != nil:
				t.Errorf("a client without EDNS got an OPT:\n%s", w.msg)
			case ecsOf(w.msg) != nil:
				t.Errorf("the client got ECS %s back", ecsOf(w.msg))
			case len(w.msg.Answer) != 1:
				t.Errorf("answer lost: %s", w.msg)
			}
		})
	}
}
