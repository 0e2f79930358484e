package dnscache_test

import (
	"context"
	"testing"
	"time"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/dnscache"
)

// BenchmarkHitServe is what a fast-path hit asks of the cache: the lookup CoreDNS's would do, the TTL, the
// prefetch count where configured, and the two counters.
func BenchmarkHitServe(b *testing.B) {
	for _, directive := range []string{"cache 30", "cache 30 {\n prefetch 2 1m 10%\n serve_stale 1h\n serve_stale_policy prefer_positive\n}"} {
		b.Run(map[bool]string{true: "plain", false: "resilient"}[directive == "cache 30"], func(b *testing.B) {
			s := build(b, dnscache.Setup(nil), directive, "dns://bench", map[string]string{"b.example.": "a 300"})
			r := new(dns.Msg)
			r.SetQuestion("b.example.", dns.TypeA)
			var hit *dnscache.Hit
			for range 2 {
				ctx, rep := dnscache.WithReport(context.WithValue(context.Background(), dnsserver.Key{}, s.srv))
				s.h.ServeDNS(ctx, &writer{}, r)
				hit = rep.Hit
			}
			if hit == nil {
				b.Fatal("no hit reported")
			}
			for b.Loop() {
				if _, ok := hit.Serve(time.Now()); !ok {
					b.Fatal("not served")
				}
			}
		})
	}
}
