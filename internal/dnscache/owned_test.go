package dnscache_test

import (
	"context"
	"net"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/chain"
	"github.com/nodelocaldns/nodelocaldns/internal/dnscache"
)

// keeper is a client's writer that keeps the message it is given.
type keeper struct {
	writer
	got *dns.Msg
}

func (k *keeper) WriteMsg(m *dns.Msg) error { k.got = m; return nil }

// An answer handed over (chain.WriteOwned, as our forward writes) is capped and written on in place; one written
// with WriteMsg (a plugin's stored records) is copied first and stays as its plugin keeps it.
func TestOwnedAnswerTakenOver(t *testing.T) {
	for _, handOver := range []bool{true, false} {
		c := caddy.NewTestController("dns", "cache 30")
		c.ServerBlockKeys = []string{"."}
		if err := dnscache.Setup(nil)(c); err != nil {
			t.Fatal(err)
		}
		var sent *dns.Msg
		next := plugin.HandlerFunc(func(_ context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
			sent = new(dns.Msg)
			sent.SetReply(r)
			sent.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 3600}, A: net.IPv4(10, 0, 0, 1)}}
			if handOver {
				return 0, chain.WriteOwned(w, sent)
			}
			return 0, w.WriteMsg(sent)
		})
		cfg := dnsserver.GetConfig(c)
		h := cfg.Plugin[len(cfg.Plugin)-1](next)
		ctx := context.WithValue(context.Background(), dnsserver.Key{}, &dnsserver.Server{Addr: "dns://test"})
		r := new(dns.Msg)
		r.SetQuestion("owned.example.", dns.TypeA)
		w := &keeper{}
		if _, err := h.ServeDNS(ctx, w, r); err != nil {
			t.Fatal(err)
		}
		if w.got == nil || w.got.Answer[0].Header().Ttl != 30 {
			t.Fatalf("handed over %v: the client got %v, want the answer capped to 30 s", handOver, w.got)
		}
		switch {
		case handOver && w.got != sent:
			t.Error("an answer handed over was copied")
		case !handOver && (w.got == sent || sent.Answer[0].Header().Ttl != 3600):
			t.Errorf("an answer written with WriteMsg was changed in place (TTL %d)", sent.Answer[0].Header().Ttl)
		}
		// The entry it stored answers the next query (from the cache, the next plugin not asked).
		sent = nil
		w2 := &keeper{}
		if _, err := h.ServeDNS(ctx, w2, r); err != nil || sent != nil || w2.got == nil || len(w2.got.Answer) != 1 {
			t.Errorf("handed over %v: the second query was not answered from the cache: %v %v", handOver, err, w2.got)
		}
	}
}
