package fastpath_test

import (
	"net"
	"net/netip"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelocaldns/nodelocaldns/internal/fastpath"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// Blocks with prefetch and serve_stale are the fast path's too, with the cache's semantics: fresh hits are
// answered inline; a hit due for a prefetch and a stale one go through CoreDNS's chain, where the cache answers
// (stale with its RESPONSE_TTL) and refreshes in the background.

func TestServesPrefetch(t *testing.T) {
	up := startUpstream(t)
	up.SetTTL(4)
	clk := clocktesting.NewFakeClock(time.Now())
	p, addr := startCoreDNSOn(t, "cache 30 {\n success 1024 30 0\n prefetch 2 1m 50%\n }\n forward . "+up.Addr, clk, fastpath.NewMetrics())
	for range 3 { // a miss, two hits: learned
		ask(t, addr, "pf.example.")
	}
	waitStored(t, p, addr, 1)
	if !fastAnswers(t, p, addr, "pf.example.") {
		t.Fatal("the fast path does not answer a fresh hit in a block with prefetch")
	}
	// At 2.5 s the entry has 1 s of its 4 left (under 50%) and 3 hits (over 2): the next hit is due for a prefetch, which
	// only the cache starts. The fast path must hand it over.
	clk.Step(2500 * time.Millisecond)
	if fastAnswers(t, p, addr, "pf.example.") {
		t.Fatal("the fast path answered a hit due for a prefetch: the cache would have refreshed it")
	}
	r := ask(t, addr, "pf.example.")
	if len(r.Answer) != 1 || r.Answer[0].Header().Ttl > 2 {
		t.Errorf("answer to the prefetching hit: %v, want the old entry's (TTL <= 2)", r.Answer)
	}
	testenv.Eventually(t, 2*time.Second, "the prefetch reaches the upstream", func() bool { return up.QueriesFor("pf.example.") == 2 })
}

func TestServesStale(t *testing.T) {
	for _, tc := range []struct{ name, opts string }{
		{"immediate", "serve_stale 10s immediate 30s"},
		{"verify prefer_positive", "serve_stale 10s verify 0 30s\n serve_stale_policy prefer_positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := startUpstream(t)
			up.SetTTL(1)
			clk := clocktesting.NewFakeClock(time.Now())
			p, addr := startCoreDNSOn(t, "cache 30 {\n success 1024 30 0\n "+tc.opts+"\n }\n forward . "+up.Addr, clk, fastpath.NewMetrics())
			for range 3 { // a miss, two hits: learned
				ask(t, addr, "st.example.")
			}
			waitStored(t, p, addr, 1)
			if !fastAnswers(t, p, addr, "st.example.") {
				t.Fatal("the fast path does not answer a fresh hit in a block with serve_stale")
			}
			clk.Step(1100 * time.Millisecond)
			if fastAnswers(t, p, addr, "st.example.") {
				t.Fatal("the fast path answered an expired entry: serving it stale is the cache's")
			}
			r := ask(t, addr, "st.example.")
			want := uint32(30) // immediate: the stale entry, with RESPONSE_TTL
			if tc.name != "immediate" {
				want = 1 // verify: the refreshed answer
			}
			if len(r.Answer) != 1 || r.Answer[0].Header().Ttl != want {
				t.Errorf("answer after expiry: %v, want TTL %d", r.Answer, want)
			}
			testenv.Eventually(t, 2*time.Second, "the refresh reaches the upstream", func() bool { return up.QueriesFor("st.example.") == 2 })
		})
	}
}

// fastAnswers reports whether the fast path answers name itself now (counting the hit, as its reader would).
func fastAnswers(t *testing.T, p *fastpath.Path, addr netip.AddrPort, name string) bool {
	t.Helper()
	sink, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	_, ok := p.Answer(addr, packed(t, name, 7), sink.LocalAddr().(*net.UDPAddr).AddrPort(), nil)
	return ok
}
