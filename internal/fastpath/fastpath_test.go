package fastpath_test

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/miekg/dns"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelocaldns/nodelocaldns/internal/dnscache"
	"github.com/nodelocaldns/nodelocaldns/internal/dnsserver"
	"github.com/nodelocaldns/nodelocaldns/internal/fastpath"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// Conventions: CoreDNS is embedded as the agent embeds it (internal/dnsserver registers the server type), with
// the agent's own fast path turned off so that each test drives a fastpath.Path of its own; everything listens
// on 127.0.0.1 with kernel-chosen ports. The upstream (testenv.StartUpstream) answers every A query with
// 192.0.2.1 and the TTL it is set to, and counts queries per name.

// startUpstream is the tests' upstream: testenv's, answering 192.0.2.1.
func startUpstream(t testing.TB) *testenv.Upstream {
	t.Helper()
	return testenv.StartUpstream(t, "127.0.0.1:0", "192.0.2.1")
}

var registerOnce sync.Once

// startCoreDNS starts CoreDNS from a server block's body, with a fast path of the test's own, and returns the
// UDP address both serve.
func startCoreDNS(t testing.TB, body string) (*fastpath.Path, netip.AddrPort) {
	t.Helper()
	return startCoreDNSOn(t, body, nil, fastpath.NewMetrics())
}

// startCoreDNSOn is startCoreDNS with the fast path counting into m and, when clk is not nil, both the block's
// cache and the fast path telling the time by clk: the test ages entries by stepping it, not by waiting.
func startCoreDNSOn(t testing.TB, body string, clk *clocktesting.FakeClock, m *fastpath.Metrics) (*fastpath.Path, netip.AddrPort) {
	t.Helper()
	registerOnce.Do(func() { // registers CoreDNS's server type and our directives with caddy
		if _, err := dnsserver.New(zap.NewNop(), dnsserver.Options{}); err != nil {
			t.Fatal(err)
		}
	})
	corefile := ".:0 {\n bind 127.0.0.1\n" + body + "\n}\n"
	in, err := dnsserver.Input([]byte(corefile), "Corefile")
	if err != nil {
		t.Fatal(err)
	}
	inst, err := caddy.Start(in)
	if err != nil {
		t.Fatal(err)
	}
	p := fastpath.New(zaptest.NewLogger(t), m)
	if clk != nil {
		caches := dnscache.ServersOf(inst).Caches("127.0.0.1:0")
		if len(caches) == 0 {
			t.Fatal("no cache in the block to set the clock of")
		}
		for _, c := range caches { // before any query: every entry is stored at the clock's time
			c.SetClock(clk.Now)
		}
		p.SetClock(clk.Now)
	}
	p.Sync(inst)
	t.Cleanup(func() {
		p.Close()
		inst.ShutdownCallbacks()
		inst.Stop()
	})
	for _, sl := range inst.Servers() {
		if a, ok := sl.LocalAddr().(*net.UDPAddr); ok {
			return p, a.AddrPort()
		}
	}
	t.Fatal("no UDP listener")
	return nil, netip.AddrPort{}
}

func ask(t *testing.T, server netip.AddrPort, name string) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	r, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(m, server.String())
	if err != nil {
		t.Fatalf("query %s: %v", name, err)
	}
	return r
}

// waitStored waits until the fast path holds want answers: it learns just after CoreDNS's answer went out.
func waitStored(t *testing.T, p *fastpath.Path, addr netip.AddrPort, want int) {
	t.Helper()
	testenv.Eventually(t, 2*time.Second, fmt.Sprintf("%d answers stored", want), func() bool { return p.Stored(addr) == want })
}

// waitAnswerable waits until the fast path answers name itself.
func waitAnswerable(t *testing.T, p *fastpath.Path, addr netip.AddrPort, name string) {
	t.Helper()
	sink, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	q := packed(t, name, 1)
	testenv.Eventually(t, 2*time.Second, "the fast path to answer "+name, func() bool {
		_, ok := p.Answer(addr, q, sink.LocalAddr().(*net.UDPAddr).AddrPort(), nil)
		return ok
	})
}

func packed(t *testing.T, name string, id uint16) []byte {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	m.Id = id
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A hit is answered with CoreDNS's answer, the query's ID, and without allocating.
func TestHitDoesNotAllocate(t *testing.T) {
	up := startUpstream(t)
	p, addr := startCoreDNS(t, "prometheus 127.0.0.1:0\n cache 30\n forward . "+up.Addr)
	ask(t, addr, "hit.example.") // fetched: cached by CoreDNS
	if p.Stored(addr) != 0 {
		t.Fatalf("%d answers stored after a miss, want none: only answers from the cache are learned", p.Stored(addr))
	}
	ask(t, addr, "hit.example.") // answered from CoreDNS's cache, the first time: remembered, not stored
	if p.Stored(addr) != 0 {
		t.Fatalf("%d answers stored after the first answer from the cache, want none: stored the second time", p.Stored(addr))
	}
	ask(t, addr, "hit.example.") // from the cache again: learned
	waitStored(t, p, addr, 1)
	client, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	from := client.LocalAddr().(*net.UDPAddr).AddrPort()
	q := packed(t, "hit.example.", 0xbeef)
	out := make([]byte, 0, 512)
	out, ok := p.Answer(addr, q, from, out)
	if !ok {
		t.Fatal("the fast path did not answer a query CoreDNS just answered from its cache")
	}
	var m dns.Msg
	if err := m.Unpack(out); err != nil || m.Id != 0xbeef || len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "192.0.2.1" {
		t.Fatalf("answer %v (%v), want ID beef and 192.0.2.1", &m, err)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		client.SetReadBuffer(1 << 20)
		if out, ok = p.Answer(addr, q, from, out); !ok {
			t.Fatal("not answered")
		}
	})
	if allocs != 0 {
		t.Errorf("a hit allocates %v times, want 0", allocs)
	}
	if n := up.QueriesFor("hit.example."); n != 1 {
		t.Errorf("upstream saw %d queries, want 1", n)
	}
}

// Over the network: the fast path's sockets get the queries, and what it cannot answer reaches CoreDNS.
func TestServesOverTheNetwork(t *testing.T) {
	up := startUpstream(t)
	_, addr := startCoreDNS(t, "cache 30\n forward . "+up.Addr)
	for i := range 5 {
		r := ask(t, addr, "net.example.")
		if len(r.Answer) != 1 {
			t.Fatalf("query %d: %v", i, r)
		}
	}
	if n := up.QueriesFor("net.example."); n != 1 {
		t.Errorf("upstream saw %d queries for 5 lookups, want 1", n)
	}
}

// An answer is not served once the cache plugin's item expired (here the upstream's 2 s TTL), nor after the
// cache evicted it: the query goes to CoreDNS, which fetches it again.
func TestNeverServesWhatTheCacheDropped(t *testing.T) {
	up := startUpstream(t)
	clk := clocktesting.NewFakeClock(time.Now())
	p, addr := startCoreDNSOn(t, "cache 30 {\n success 1024 30 1\n }\n forward . "+up.Addr, clk, fastpath.NewMetrics())
	up.SetTTL(2)
	for range 3 { // a miss, two answers from the cache: learned
		ask(t, addr, "short.example.")
	}
	waitStored(t, p, addr, 1)
	ask(t, addr, "short.example.")
	clk.Step(2100 * time.Millisecond)
	ask(t, addr, "short.example.")
	if n := up.QueriesFor("short.example."); n != 2 {
		t.Errorf("upstream saw %d queries for short.example., want 2 (once more after the TTL)", n)
	}

	up.SetTTL(300)
	for range 3 { // learned
		ask(t, addr, "victim.example.")
	}
	waitAnswerable(t, p, addr, "victim.example.")
	// The cache plugin's shards hold 1024/256 = 4 items and evict one at random when full: 40 more names in the
	// victim's shard leave it there with a chance of (3/4)^37, under 1e-4.
	shard := func(name string) uint64 { return dnscache.Key(name, dns.TypeA, dns.ClassINET, false, false) & 255 }
	want := shard("victim.example.")
	filled := 0
	for i := 0; filled < 40; i++ {
		name := fmt.Sprintf("n%d.example.", i)
		if shard(name) == want {
			ask(t, addr, name)
			filled++
		}
	}
	before := p.Stored(addr)
	ask(t, addr, "victim.example.")
	if n := up.QueriesFor("victim.example."); n != 2 {
		t.Errorf("upstream saw %d queries for the evicted name, want 2: the fast path answered what the cache evicted (%d stored)", n, before)
	}
}

// Server blocks whose cache hits do more than answer from the cache are left to CoreDNS: a plugin before cache
// that logs every query; and a block without a cache.
func TestStepsAside(t *testing.T) {
	up := startUpstream(t)
	for _, body := range []string{
		"log\n cache 30",
		"forward . " + up.Addr, // no cache at all
	} {
		t.Run(strings.Fields(body)[0]+" "+strings.Join(strings.Fields(body)[1:], " "), func(t *testing.T) {
			if !strings.HasPrefix(body, "forward") {
				body += "\n forward . " + up.Addr
			}
			p, addr := startCoreDNS(t, body)
			for range 3 {
				ask(t, addr, "aside.example.")
			}
			if n := p.Stored(addr); n != -1 {
				t.Errorf("the fast path serves this block (%d answers stored), want it left to CoreDNS", n)
			}
		})
	}
}

// The sweeper pauses while the store is empty (an idle agent wakes for nothing) and resumes when an answer is
// stored: an entry that can no longer be served still leaves the store within a sweep or two.
func TestSweeperResumesAfterIdle(t *testing.T) {
	up := startUpstream(t)
	clk := clocktesting.NewFakeClock(time.Now())
	p, addr := startCoreDNSOn(t, "cache 30 {\n success 1024 30 1\n }\n forward . "+up.Addr, clk, fastpath.NewMetrics())
	time.Sleep(1500 * time.Millisecond) // a sweep of the empty store: the sweeper pauses
	up.SetTTL(2)
	for range 3 { // a miss, two answers from the cache: learned
		ask(t, addr, "idle.example.")
	}
	waitStored(t, p, addr, 1)
	clk.Step(3 * time.Second) // past the TTL: nothing the entry could serve
	deadline := time.Now().Add(10 * time.Second)
	for p.Stored(addr) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("an expired entry still stored 10 s later (%d): the sweeper did not resume after the store was empty", p.Stored(addr))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
