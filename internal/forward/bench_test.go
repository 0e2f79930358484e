package forward_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/forward"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// BenchmarkServeDNS is a miss through the forward: ServeDNS of concurrent queries, each a name of its own, over
// our transport to a loopback server, with force_tcp and without. The server runs in the same process: compare
// allocations and ns/op between builds of this package, not against a real upstream. client_subnet=true is the
// cost of -upstream-client-subnet (clientsubnet.go) on a miss.
func BenchmarkServeDNS(b *testing.B) {
	addr := answering(b)
	for _, bc := range []struct {
		opt    string
		subnet bool // the upstream carries the client's address
	}{{"force_tcp", false}, {"prefer_udp", false}, {"force_tcp", true}, {"prefer_udp", true}} {
		b.Run(fmt.Sprintf("%s/client_subnet=%v", bc.opt, bc.subnet), func(b *testing.B) {
			h, err := instance(b, ourSetup, fmt.Sprintf("forward . %s {\n%s\n}", addr, bc.opt))
			if err != nil {
				b.Fatal(err)
			}
			if bc.subnet {
				h.(*forward.Forward).CarryClientSubnet(netip.MustParseAddr("127.0.0.1"))
			}
			var n atomic.Int64
			b.SetParallelism(16)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				req := new(dns.Msg)
				w := discard{}
				for pb.Next() {
					req.SetQuestion(fmt.Sprintf("b%d.example.", n.Add(1)), dns.TypeA)
					if rc, err := h.ServeDNS(context.Background(), w, req); err != nil || rc != 0 {
						b.Error(rc, err)
						return
					}
				}
			})
		})
	}
}

// answering starts a loopback upstream that answers every name with one A record.
func answering(tb testing.TB) string {
	addr, _ := testenv.ServeDNS(tb, "127.0.0.1:0", dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: net.IPv4(10, 0, 0, 1)}}
		_ = w.WriteMsg(m)
	}))
	return addr
}

// discard is a UDP client's ResponseWriter that keeps nothing.
type discard struct{}

func (discard) LocalAddr() net.Addr       { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53} }
func (discard) RemoteAddr() net.Addr      { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 7), Port: 40000} }
func (discard) WriteMsg(*dns.Msg) error   { return nil }
func (discard) Write([]byte) (int, error) { return 0, errors.New("not used") }
func (discard) Close() error              { return nil }
func (discard) TsigStatus() error         { return nil }
func (discard) TsigTimersOnly(bool)       {}
func (discard) Hijack()                   {}
