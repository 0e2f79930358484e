package clients

import (
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// Conventions: clients are 10.0.x.y (heavy ones 10.0.0.x), spoofed ones 10.1.0.0/16 and up; names under
// example.test.

func addr(s string) netip.AddrPort { return netip.AddrPortFrom(netip.MustParseAddr(s), 5353) }

// fakeClock is a clock a test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newTestAccounting(t *testing.T) (*Accounting, *fakeClock) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	return newAccounting(zap.NewNop(), clk.now), clk
}

func TestSizesAreWhatTheBoundAssumes(t *testing.T) {
	if s := unsafe.Sizeof(client{}); s > clientStructBytes {
		t.Errorf("client is %d bytes; clientStructBytes says %d", s, clientStructBytes)
	}
	if s := unsafe.Sizeof(event{}); s != eventBytes {
		t.Errorf("event is %d bytes; eventBytes says %d", s, eventBytes)
	}
}

func TestCountsEachClientsAnswersByKind(t *testing.T) {
	a, _ := newTestAccounting(t)
	s := a.NewShard()
	for range 3 {
		s.Hit(addr("10.0.0.1"), "a.example.test.", dns.RcodeSuccess)
	}
	s.Hit(addr("10.0.0.1"), "nx.example.test.", dns.RcodeNameError)
	s.Publish()
	a.Answer(addr("10.0.0.1"), "miss.example.test.", dns.RcodeServerFailure, false, 3*time.Millisecond)
	a.Answer(addr("10.0.0.1"), "miss.example.test.", dns.RcodeRefused, false, 1*time.Millisecond)
	a.Answer(netip.AddrPortFrom(netip.MustParseAddr("fd00::1"), 53), "six.example.test.", dns.RcodeNotImplemented, true, 0)

	snap := a.Snapshot(10)
	if snap.Answers != 7 || snap.Tracked != 2 || snap.TailBound != 0 {
		t.Fatalf("snapshot %+v: want 7 answers from 2 clients, no tail", snap)
	}
	c := find(t, snap, "10.0.0.1")
	want := Client{Answers: 6, NoError: 3, NXDomain: 1, ServFail: 1, Refused: 1, Hits: 4, Misses: 2, MissLatencyMs: 2}
	if c.Answers != want.Answers || c.NoError != want.NoError || c.NXDomain != want.NXDomain || c.ServFail != want.ServFail ||
		c.Refused != want.Refused || c.Hits != want.Hits || c.Misses != want.Misses || c.MissLatencyMs != want.MissLatencyMs {
		t.Errorf("10.0.0.1: %+v, want %+v", c, want)
	}
	if len(c.TopNames) != 3 || c.TopNames[0] != (Name{Name: "a.example.test.", Count: 3}) || c.TopNames[1].Count != 2 {
		t.Errorf("10.0.0.1's names %+v: want a.example.test. 3, miss.example.test. 2, nx.example.test. 1", c.TopNames)
	}
	if c := find(t, snap, "fd00::1"); c.Other != 1 || c.Hits != 1 {
		t.Errorf("fd00::1: %+v, want one other rcode, a hit", c)
	}
}

func find(t *testing.T, s Snapshot, a string) Client {
	t.Helper()
	for _, c := range s.Clients {
		if c.Addr == a {
			return c
		}
	}
	t.Fatalf("%s not in the snapshot %+v", a, s.Clients)
	return Client{}
}

// Space-saving's guarantees, under 100,000 spoofed sources of one query each interleaved with five heavy
// clients: the heavy ones are in the table with exact counts (they entered before the flood), the table
// never holds more than MaxClients, and no client outside it got more than the tail bound.
func TestHeavyClientsStayExactUnderSpoofedSources(t *testing.T) {
	a, _ := newTestAccounting(t)
	s := a.NewShard()
	const spoofed, heavy = 100_000, 5
	sent := map[string]uint64{}
	for i := range spoofed {
		if i%2 == 0 { // each heavy client asks once for every two spoofed sources
			for h := range heavy {
				s.Hit(addr(fmt.Sprintf("10.0.0.%d", h+1)), "heavy.example.test.", dns.RcodeSuccess)
				sent[fmt.Sprintf("10.0.0.%d", h+1)]++
			}
		}
		sp := netip.AddrFrom4([4]byte{10, byte(1 + i>>16), byte(i >> 8), byte(i)})
		s.Hit(netip.AddrPortFrom(sp, 1), fmt.Sprintf("s%d.example.test.", i), dns.RcodeNameError)
		s.Publish()
		if i%256 == 0 {
			a.Snapshot(0) // drains, as the drain goroutine would
		}
	}
	snap := a.Snapshot(heavy)
	if snap.Tracked != MaxClients || snap.Answers != spoofed+sum(sent) || snap.Dropped != 0 {
		t.Fatalf("tracked %d answers %d dropped %d: want %d, %d, 0", snap.Tracked, snap.Answers, snap.Dropped, MaxClients, spoofed+sum(sent))
	}
	for h := range heavy {
		a := fmt.Sprintf("10.0.0.%d", h+1)
		c := find(t, snap, a)
		if c.Answers != sent[a] || c.Overcount != 0 {
			t.Errorf("%s: %d answers (overcount %d), sent %d", a, c.Answers, c.Overcount, sent[a])
		}
	}
	if snap.TailBound == 0 || snap.TailBound > spoofed/MaxClients*2 {
		t.Errorf("tail bound %d: want above 0 and about spoofed/MaxClients (%d)", snap.TailBound, spoofed/MaxClients)
	}
}

func sum(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}

// The bound holds: the heap the table and a full ring keep live, after 100,000 sources each asking a name of
// the longest length, is under WorstCaseBytes.
func TestMemoryStaysUnderTheBound(t *testing.T) {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	a, _ := newTestAccounting(t)
	s := a.NewShard()
	long := make([]byte, maxName)
	for i := range long {
		long[i] = 'a'
	}
	for i := range 100_000 {
		sp := netip.AddrFrom4([4]byte{10, byte(1 + i>>16), byte(i >> 8), byte(i)})
		name := string(long[:maxName-8]) + fmt.Sprintf("%08d", i) // a new string each: as a miss's name
		s.Hit(netip.AddrPortFrom(sp, 1), name, dns.RcodeNameError)
		s.Publish()
		if (i+1)%(ringSize/2) == 0 {
			a.Snapshot(0)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	live := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	bound := WorstCaseBytes(1)
	t.Logf("100,000 sources: %d bytes live, bound %d (%.1f MiB)", live, bound, float64(bound)/(1<<20))
	if live > bound {
		t.Errorf("%d bytes live after 100,000 sources, over the bound %d", live, bound)
	}
	runtime.KeepAlive(a)
	runtime.KeepAlive(s)
}

func TestAFullRingDropsAndCounts(t *testing.T) {
	a, _ := newTestAccounting(t)
	s := a.NewShard()
	for range ringSize + 10 {
		s.Hit(addr("10.0.0.1"), "a.example.test.", dns.RcodeSuccess)
	}
	s.Publish()
	snap := a.Snapshot(1)
	if snap.Answers != ringSize || snap.Dropped != 10 {
		t.Fatalf("answers %d dropped %d: want %d and 10", snap.Answers, snap.Dropped, ringSize)
	}
	s.Hit(addr("10.0.0.1"), "a.example.test.", dns.RcodeSuccess) // room again once drained
	s.Publish()
	if snap := a.Snapshot(1); snap.Answers != ringSize+1 {
		t.Errorf("answers %d after the drain: want %d", snap.Answers, ringSize+1)
	}
}

// Writers and the drain run at once (go test -race): nothing is lost while the ring has room.
func TestConcurrentWritersAndDrain(t *testing.T) {
	a, _ := newTestAccounting(t)
	var wg sync.WaitGroup
	const writers, each = 4, 50_000
	for w := range writers {
		s := a.NewShard()
		wg.Go(func() {
			defer s.Release()
			for i := range each {
				s.Hit(addr(fmt.Sprintf("10.0.0.%d", w+1)), "a.example.test.", dns.RcodeSuccess)
				if i%16 == 15 {
					s.Publish()
				}
			}
			s.Publish()
		})
	}
	wg.Go(func() {
		for range each / 10 {
			a.Answer(addr("10.0.1.1"), "miss.example.test.", dns.RcodeSuccess, false, time.Millisecond)
		}
	})
	stop := make(chan struct{})
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for {
			select {
			case <-stop:
				return
			case <-a.wakeC:
				a.Snapshot(0)
			}
		}
	}()
	wg.Wait()
	close(stop)
	<-drained
	snap := a.Snapshot(10)
	if got := snap.Answers + snap.Dropped; got != writers*each+each/10 {
		t.Errorf("answers %d + dropped %d = %d: want %d", snap.Answers, snap.Dropped, got, writers*each+each/10)
	}
	a.mu.Lock()
	a.drain()
	a.mu.Unlock()
	if n := len(a.shards); n != 1 {
		t.Errorf("%d shards left after the writers released theirs: want the handler's alone", n)
	}
}

func TestRatesAreOverTheLastWindow(t *testing.T) {
	a, clk := newTestAccounting(t)
	s := a.NewShard()
	for i := range 200 {
		rc := dns.RcodeNameError
		if i%4 == 0 {
			rc = dns.RcodeSuccess
		}
		s.Hit(addr("10.0.0.1"), "x.example.test.", rc)
	}
	s.Hit(addr("10.0.0.2"), "quiet.example.test.", dns.RcodeSuccess)
	s.Publish()
	clk.add(2 * time.Second)
	a.closeWindow()
	snap := a.Snapshot(10)
	if snap.Clients[0].Addr != "10.0.0.1" || snap.Clients[0].Rate != 100 || snap.Clients[0].NXRate != 75 || snap.Clients[0].HitRate != 100 {
		t.Fatalf("first client %+v: want 10.0.0.1 at 100/s, 75 NXDOMAIN/s", snap.Clients[0])
	}
	clk.add(time.Second)
	a.closeWindow()
	if c := a.Snapshot(1).Clients[0]; c.Rate != 0 || c.Answers != 200 {
		t.Errorf("after a quiet window: %+v, want rate 0, 200 answers", c)
	}
}

func TestNamesKeepTheMostAsked(t *testing.T) {
	var ns topNames
	for i := range 50 {
		ns.add("hot.example.test.")
		ns.add(fmt.Sprintf("cold%d.example.test.", i))
	}
	if ns[0].name != "hot.example.test." || ns[0].count != 50 || ns[0].over != 0 {
		t.Errorf("names %+v: want hot.example.test. first with 50, exact", ns)
	}
}

// The hit path's part: recording a hit and publishing allocate nothing, the ring full or not.
func TestHitDoesNotAllocate(t *testing.T) {
	a, _ := newTestAccounting(t)
	s := a.NewShard()
	from, name := addr("10.0.0.1"), "a.example.test."
	if n := testing.AllocsPerRun(3*ringSize, func() { s.Hit(from, name, dns.RcodeSuccess); s.Publish() }); n != 0 {
		t.Errorf("%v allocations per hit", n)
	}
}

// BenchmarkHit is a reader's cost per hit: record and, as per batch of 16, publish.
func BenchmarkHit(b *testing.B) {
	a := newAccounting(zap.NewNop(), time.Now)
	s := a.NewShard()
	from, name := addr("10.0.0.1"), "a.example.test."
	go a.Run(b.Context())
	for i := 0; b.Loop(); i++ {
		s.Hit(from, name, dns.RcodeSuccess)
		if i%16 == 15 {
			s.Publish()
		}
	}
}

// The gauge set is the last window's top clients, replaced: a client that stops asking leaves it once others
// outrank it, and the series never number more than publishTop per name.
func TestMetricsAreTheTopReplaced(t *testing.T) {
	a, clk := newTestAccounting(t)
	reg := prometheus.NewRegistry()
	if err := a.Register(reg); err != nil {
		t.Fatal(err)
	}
	s := a.NewShard()
	round := func(base int) {
		for c := range 2 * publishTop {
			for range c + 1 {
				s.Hit(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(base), byte(c)}), 1), "a.example.test.", dns.RcodeSuccess)
			}
		}
		s.Publish()
		clk.add(time.Second)
		a.closeWindow()
	}
	round(1)
	got := rates(t, reg)
	if len(got) != publishTop || got["10.0.1.19"] != 20 {
		t.Fatalf("series after the first window %v: want %d, 10.0.1.19 at 20 a second", got, publishTop)
	}
	round(2) // others, all asking; the first ones quiet
	got = rates(t, reg)
	if len(got) != publishTop {
		t.Errorf("%d series: want %d", len(got), publishTop)
	}
	for c := range got {
		if !strings.HasPrefix(c, "10.0.2.") {
			t.Errorf("%s still in the set after a quiet window", c)
		}
	}
}

// rates is nodelocaldns_top_client_answers_per_second by client, as reg serves it.
func rates(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == "nodelocaldns_top_client_answers_per_second" {
			for _, m := range mf.GetMetric() {
				out[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// One warning names a client that crossed the NXDOMAIN share or the rate, once a minute at most; a quiet
// client is never named, and a window names at most alertsPerWindow.
func TestAlertNamesTheClientOnce(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	a := newAccounting(zap.New(core), clk.now)
	s := a.NewShard()
	hits := func(from netip.AddrPort, n int, name string, rcode int) {
		for i := range n {
			s.Hit(from, name, rcode)
			if i%256 == 255 {
				s.Publish()
				a.Snapshot(0) // drains, as the drain goroutine would
			}
		}
		s.Publish()
	}
	window := func(nx, loud, quiet int, spoofed int) {
		hits(addr("10.0.0.1"), nx, "api.example.com.default.svc.cluster.local.", dns.RcodeNameError)
		hits(addr("10.0.0.2"), loud, "a.example.test.", dns.RcodeSuccess)
		hits(addr("10.0.0.3"), quiet, "a.example.test.", dns.RcodeNameError)
		for i := range spoofed {
			hits(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, 0, byte(i)}), 1), alertRate, "x.", dns.RcodeSuccess)
		}
		clk.add(time.Second)
		a.closeWindow()
	}
	window(200, alertRate, alertNXMinRate-1, 0)
	named := map[string]string{}
	for _, e := range logs.TakeAll() {
		named[e.ContextMap()["client"].(string)] = e.ContextMap()["crossed"].(string)
	}
	if named["10.0.0.1"] != "nxdomain share" || named["10.0.0.2"] != "rate" || len(named) != 2 {
		t.Errorf("named %v: want 10.0.0.1 for its NXDOMAIN share and 10.0.0.2 for its rate, not the quiet 10.0.0.3", named)
	}
	window(200, alertRate, 0, 0)
	if n := logs.Len(); n != 0 {
		t.Errorf("%d lines in the next window: want none (a minute apart at most once)", n)
	}
	clk.add(alertEvery)
	a.closeWindow()     // a quiet minute
	window(0, 0, 0, 10) // ten new loud clients at once
	if n := logs.Len(); n != alertsPerWindow {
		t.Errorf("%d lines for ten loud clients in one window: want %d", n, alertsPerWindow)
	}
}

// BenchmarkDrain is the drain's cost per answer, from one address (as the bench's load) and from 1,000
// interleaved ones (a node's pods: a map lookup each).
func BenchmarkDrain(b *testing.B) {
	for _, n := range []int{1, 1000} {
		b.Run(fmt.Sprintf("sources=%d", n), func(b *testing.B) {
			a := newAccounting(zap.NewNop(), time.Now)
			s := a.NewShard()
			from := make([]netip.AddrPort, n)
			for i := range from {
				from[i] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), 1)
			}
			for i := 0; b.Loop(); i++ {
				s.Hit(from[i%n], "a.example.test.", dns.RcodeSuccess)
				if i%256 == 255 {
					s.Publish()
					a.mu.Lock()
					a.drain()
					a.mu.Unlock()
				}
			}
		})
	}
}

// With a namer (pod identity), snapshots name each client.
func TestNamerNamesClients(t *testing.T) {
	a, _ := newTestAccounting(t)
	a.SetNamer(func(addr netip.Addr) string {
		if addr == netip.MustParseAddr("10.0.0.1") {
			return "default/web-1"
		}
		return ""
	})
	s := a.NewShard()
	s.Hit(addr("10.0.0.1"), "a.example.test.", dns.RcodeSuccess)
	s.Hit(addr("10.0.0.2"), "a.example.test.", dns.RcodeSuccess)
	s.Publish()
	snap := a.Snapshot(2)
	if find(t, snap, "10.0.0.1").Name != "default/web-1" || find(t, snap, "10.0.0.2").Name != "" {
		t.Errorf("clients %+v: want 10.0.0.1 named default/web-1, 10.0.0.2 unnamed", snap.Clients)
	}
}

// With pod identity, answers are counted per namespace: a pod's, the node's host network, and unknown for an
// address no pod has; a namespace no client belongs to any more leaves at the window's close.
func TestNamespaceCounters(t *testing.T) {
	a, clk := newTestAccounting(t)
	pods := map[netip.Addr]string{
		netip.MustParseAddr("10.0.0.1"):     "default/web-1",
		netip.MustParseAddr("10.0.0.2"):     "default/web-2",
		netip.MustParseAddr("10.0.0.3"):     "shop/cart-1",
		netip.MustParseAddr("192.168.0.10"): "host network (kube-system/kube-proxy-x)",
	}
	var mu sync.Mutex
	a.SetNamer(func(addr netip.Addr) string { mu.Lock(); defer mu.Unlock(); return pods[addr] })
	reg := prometheus.NewRegistry()
	if err := a.Register(reg); err != nil {
		t.Fatal(err)
	}
	s := a.NewShard()
	s.Hit(addr("10.0.0.1"), "a.", dns.RcodeSuccess)
	s.Hit(addr("10.0.0.2"), "nx.", dns.RcodeNameError)
	s.Hit(addr("10.0.0.3"), "sf.", dns.RcodeServerFailure)
	s.Hit(addr("192.168.0.10"), "a.", dns.RcodeSuccess)
	s.Hit(addr("10.9.9.9"), "a.", dns.RcodeSuccess)
	s.Publish()
	clk.add(time.Second)
	a.closeWindow()
	want := map[string]Namespace{"default": {Answers: 2, NXDomain: 1}, "shop": {Answers: 1, ServFail: 1},
		"host network": {Answers: 1}, "unknown": {Answers: 1}}
	if got := a.Snapshot(0).Namespaces; !equalNS(got, want) {
		t.Errorf("namespaces %v, want %v", got, want)
	}
	mfs, _ := reg.Gather()
	seen := 0
	for _, mf := range mfs {
		if mf.GetName() == "nodelocaldns_namespace_answers_total" {
			seen = len(mf.GetMetric())
		}
	}
	if seen != 4 {
		t.Errorf("%d nodelocaldns_namespace_answers_total series, want 4", seen)
	}
	mu.Lock()
	pods[netip.MustParseAddr("10.0.0.3")] = "" // shop's pod left the node
	mu.Unlock()
	clk.add(time.Second)
	a.closeWindow()
	if got := a.Snapshot(0).Namespaces; got["shop"] != (Namespace{}) || got["unknown"].Answers != 1 || len(got) != 3 {
		t.Errorf("after shop's pod left: %v, want shop gone", got)
	}
}

func equalNS(a, b map[string]Namespace) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
