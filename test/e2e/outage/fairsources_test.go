package outage

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// floodSources are the flood pod's extra addresses, in 10.1.0.0/22 (four /24s of 250 addresses): the sources a
// pod spoofs where its CNI does not check them, or many pods behind one veth. The node routes the prefix to
// the flood pod, so answers reach it.
const floodSources = "10.1.0.0/22"

func floodSource(i int) string { return fmt.Sprintf("10.1.%d.%d", i/250, 1+i%250) }

// addSources puts n addresses of floodSources on the flood pod's interface and routes them to it from the node.
func addSources(t *testing.T, flooder *testenv.Peer, n int) []string {
	t.Helper()
	var b strings.Builder
	addrs := make([]string, n)
	for i := range n {
		addrs[i] = floodSource(i)
		fmt.Fprintf(&b, "addr add %s/32 dev eth0\n", addrs[i])
	}
	batch := filepath.Join(t.TempDir(), "addrs")
	if err := os.WriteFile(batch, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	flooder.Exec(t, "ip", "-batch", batch)
	testenv.Run(t, "ip", "route", "add", floodSources, "via", flooder.Addr)
	t.Cleanup(func() { testenv.Run(t, "ip", "route", "del", floodSources) })
	return addrs
}

// runFrom floods server with unique names under zone at rate queries a second, each query from the next of
// conns (one socket per source address) in turn, until ctx ends, without waiting for answers.
func (f *flood) runFrom(ctx context.Context, conns []net.Conn, zone string, rate int) {
	const tick = 10 * time.Millisecond
	perTick := max(1, rate*int(tick)/int(time.Second))
	f.answers = map[int]int{}
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() { f.read(c) })
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	m := new(dns.Msg)
	for n := 0; ctx.Err() == nil; {
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		for range perTick {
			m.SetQuestion(fmt.Sprintf("s%d.flood.%s", n, zone), dns.TypeA)
			m.Id = uint16(n)
			if buf, err := m.Pack(); err == nil {
				if _, err := conns[n%len(conns)].Write(buf); err == nil {
					f.sent.Add(1)
				}
			}
			n++
		}
	}
	time.Sleep(200 * time.Millisecond) // late answers, before the close ends the readers
	for _, c := range conns {
		c.Close()
	}
	wg.Wait()
}

// TestFairShareUnderManySourceFlood: while 250, then 1,000 source addresses of one pod flood unique external
// names at a slow upstream, another pod's 30 misses, five at a time, are all answered. Shared per address,
// the flood's addresses were each a client like the victim, and the victim, asking five at a time, was over
// its share of one slot: most of its misses were REFUSED.
func TestFairShareUnderManySourceFlood(t *testing.T) {
	testenv.RequireRoot(t)
	flooder, victim := twoPods(t)
	slow, _ := testenv.ServeDNS(t, upstream+":53", dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		time.Sleep(slowLatency)
		m := new(dns.Msg)
		m.SetReply(r)
		if len(r.Question) == 1 && r.Question[0].Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{A: []byte{10, 0, 0, 53},
				Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300}})
		}
		w.WriteMsg(m)
	}))
	startOnLoopback(t, map[string]string{"upstreamNameservers": `["` + upstream + `"]`})
	server := fairLocal + ":53"
	sources := addSources(t, flooder, 1000)
	raddr, err := net.ResolveUDPAddr("udp", server)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{250, 1000} {
		t.Run(fmt.Sprintf("%d sources", n), func(t *testing.T) {
			conns := make([]net.Conn, n)
			flooder.Do(t, func() {
				for i := range n {
					c, err := net.DialUDP("udp", &net.UDPAddr{IP: net.ParseIP(sources[i])}, raddr)
					if err != nil {
						t.Fatalf("a socket from %s: %v", sources[i], err)
					}
					conns[i] = c
				}
			})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var f flood
			done := make(chan struct{})
			go func() { defer close(done); f.runFrom(ctx, conns, fmt.Sprintf("n%d.example.", n), fairFloodQPS) }()
			time.Sleep(2 * slowLatency) // the bound is full from here on
			answered, refused, took, failures := victimMisses(t, victim, server, fmt.Sprintf("n%d", n))
			cancel()
			<-done
			t.Logf("%d flooding sources: victim %d of 30 answered, %d REFUSED, in %s; flood (upstream %s): %s",
				n, answered, refused, took.Round(time.Millisecond), slow, f.summary())
			if answered != 30 {
				t.Errorf("%d of the victim's 30 misses failed under a flood from %d sources, e.g. %s", 30-answered, n, strings.Join(failures, "; "))
			}
			if f.sent.Load() < int64(fairFloodQPS) {
				t.Errorf("the flood sent only %d queries", f.sent.Load())
			}
			time.Sleep(2 * slowLatency) // the flood's last misses leave the bound before the next case
		})
	}
}

// victimMisses asks 30 unique names from victim, five workers of six each in turn, each within 2 s, and says
// how many were answered and how many REFUSED, how long it took, and the first failures.
func victimMisses(t *testing.T, victim *testenv.Peer, server, tag string) (answered, refused int, took time.Duration, failures []string) {
	const workers, each = 5, 6
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			victim.Do(t, func() {
				for i := range each {
					name := fmt.Sprintf("v%d-%d.%s.victim.example", w, i, tag)
					got, err := harness.Lookup(server, "udp", name, 2*time.Second)
					mu.Lock()
					switch {
					case err == nil && got == "10.0.0.53":
						answered++
					default:
						if re, ok := err.(*harness.RcodeError); ok && re.Rcode == dns.RcodeRefused {
							refused++
						}
						if len(failures) < 5 {
							failures = append(failures, fmt.Sprintf("%s: %q, %v", name, got, err))
						}
					}
					mu.Unlock()
				}
			})
		})
	}
	wg.Wait()
	return answered, refused, time.Since(start), failures
}
