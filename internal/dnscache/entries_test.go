package dnscache

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// coredns_cache_entries is counted when scraped (entriesGauge): each label set shows the Len of the cache that
// inserted under it last, as CoreDNS's Set on every insert would leave it, and a cache whose instance stopped
// leaves its counts. The differential test links CoreDNS's cache plugin, whose gauge ours then sets instead;
// this one runs ours alone, on a registry of its own.
func TestEntriesCountedWhenScraped(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := newEntriesGauge(reg)
	if g.vec != nil {
		t.Fatal("a fresh registry holds no gauge of CoreDNS's, yet the entries gauge fell back to one")
	}
	first, second := entriesCache(t, g), entriesCache(t, g)
	const server = "dns://169.254.20.10:53"
	check := func(what string, success, denial int) {
		t.Helper()
		got := entriesScraped(t, reg)
		want := map[string]float64{server + " success": float64(success), server + " denial": float64(denial)}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: coredns_cache_entries %v, want %v", what, got, want)
		}
	}
	if got := entriesScraped(t, reg); len(got) != 0 {
		t.Errorf("before any insert: %v, want no series, as CoreDNS sets the gauge on its first insert", got)
	}
	// A scrape in the instant between an insert making its series and storing itself as the source.
	first.entriesSeries(server)
	if got := entriesScraped(t, reg); len(got) != 0 {
		t.Errorf("a series with no source yet: %v, want it left out", got)
	}
	ask(t, first, server, "a1.example.", "a2.example.", "nx1.example.")
	check("after the first cache's inserts", 2, 1)
	ask(t, first, server, "a1.example.") // a hit inserts nothing
	check("after a hit", 2, 1)
	ask(t, second, server, "a3.example.")
	check("after the second cache's insert (a reload's new instance)", 1, 0)
	ask(t, first, server, "a4.example.", "nx2.example.")
	check("after the first cache inserts again", 3, 2)
	g.stopped(first)
	check("after the first cache's instance stopped", 3, 2)
	ask(t, first, server, "a5.example.")
	check("after the stopped cache inserts (its counts are the series' again)", 4, 2)
	g.stopped(second) // not the series' source: nothing changes
	check("after the other cache stopped", 4, 2)
}

// entriesScraped is what reg serves of coredns_cache_entries, by "server type".
func entriesScraped(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "coredns_cache_entries" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["zones"] != "." || l["view"] != "" {
				t.Errorf("labels %v, want zones \".\" and no view", l)
			}
			got[l["server"]+" "+l["type"]] = m.GetGauge().GetValue()
		}
	}
	return got
}

// entriesCache is a `cache 30` for the root zone counting its entries into g, answering a*.example with an A
// record and anything else NXDOMAIN.
func entriesCache(t *testing.T, g *entriesGauge) *Cache {
	t.Helper()
	ctl := caddy.NewTestController("dns", "cache 30")
	ctl.ServerBlockKeys = []string{"."} // a root block: a cache without zones caches nothing
	c, err := Parse(ctl)
	if err != nil {
		t.Fatal(err)
	}
	m := *NewMetrics(nil)
	m.entries = g
	c.metrics = &m
	c.Next = plugin.HandlerFunc(func(_ context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
		a := new(dns.Msg)
		a.SetReply(r)
		if r.Question[0].Name[0] == 'a' {
			rr, _ := dns.NewRR(r.Question[0].Name + " 60 IN A 192.0.2.1")
			a.Answer = []dns.RR{rr}
		} else {
			a.Rcode = dns.RcodeNameError
			soa, _ := dns.NewRR("example. 60 IN SOA ns.example. h.example. 1 2 3 4 60")
			a.Ns = []dns.RR{soa}
		}
		return 0, w.WriteMsg(a)
	})
	return c
}

func ask(t *testing.T, c *Cache, server string, names ...string) {
	t.Helper()
	ctx := context.WithValue(context.Background(), dnsserver.Key{}, &dnsserver.Server{Addr: server})
	for _, n := range names {
		r := new(dns.Msg)
		r.SetQuestion(n, dns.TypeA)
		if _, err := c.ServeDNS(ctx, discard{}, r); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
	}
}

type discard struct{}

func (discard) LocalAddr() net.Addr       { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53} }
func (discard) RemoteAddr() net.Addr      { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 40000} }
func (discard) WriteMsg(*dns.Msg) error   { return nil }
func (discard) Write([]byte) (int, error) { return 0, errors.New("not used") }
func (discard) Close() error              { return nil }
func (discard) TsigStatus() error         { return nil }
func (discard) TsigTimersOnly(bool)       {}
func (discard) Hijack()                   {}
