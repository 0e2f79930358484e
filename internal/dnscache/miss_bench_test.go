package dnscache_test

import (
	"context"
	"fmt"
	"net"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/chain"
	"github.com/nodelocaldns/nodelocaldns/internal/dnscache"
)

// BenchmarkMiss is what a miss asks of the cache: the lookup, the request passed on, the answer the next plugin
// writes (a fresh message, as forward's) capped, packed into an entry and written on. Each query is a name of
// its own (the name's formatting is two of the allocations counted); compare allocations and ns/op between builds of this package.
func BenchmarkMiss(b *testing.B) {
	c := caddy.NewTestController("dns", "cache 30")
	c.ServerBlockKeys = []string{"."}
	if err := dnscache.Setup(nil)(c); err != nil {
		b.Fatal(err)
	}
	next := plugin.HandlerFunc(func(_ context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: net.IPv4(10, 0, 0, 1)}}
		return 0, chain.WriteOwned(w, m) // as forward hands its answer over
	})
	cfg := dnsserver.GetConfig(c)
	h := cfg.Plugin[len(cfg.Plugin)-1](next)
	ctx := context.WithValue(context.Background(), dnsserver.Key{}, &dnsserver.Server{Addr: "dns://bench"})
	r := new(dns.Msg)
	w := &discardWriter{}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		r.SetQuestion(fmt.Sprintf("m%d.example.", i), dns.TypeA)
		if _, err := h.ServeDNS(ctx, w, r); err != nil {
			b.Fatal(err)
		}
	}
}

// discardWriter is a UDP client's writer that keeps nothing.
type discardWriter struct{ writer }

func (*discardWriter) WriteMsg(*dns.Msg) error { return nil }
