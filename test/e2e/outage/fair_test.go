package outage

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

const (
	slowLatency  = 500 * time.Millisecond // an external name's upstream latency: a few hundred ms is normal
	fairFloodQPS = 2000                   // 1000 in flight at slowLatency: four times the bound of 250
)

// TestFairShareUnderFlood: while one pod floods unique external names at a slow upstream, another pod's
// misses are all answered. With one bound for everyone (forward's max_concurrent alone), the flood holds all
// of it and the victim's misses are REFUSED.
func TestFairShareUnderFlood(t *testing.T) {
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

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var f flood
	floodErr := make(chan error, 1)
	go flooder.Do(t, func() { floodErr <- f.run(ctx, server, "flood.example.", fairFloodQPS) })
	time.Sleep(2 * slowLatency) // the bound is full from here on

	const workers, each = 5, 6
	var mu sync.Mutex
	var answered, refused int
	var failures []string
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			victim.Do(t, func() {
				for i := range each {
					name := fmt.Sprintf("v%d-%d.victim.example", w, i)
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
	took := time.Since(start)
	cancel()
	if err := <-floodErr; err != nil {
		t.Fatal(err)
	}
	t.Logf("victim: %d of %d answered, %d REFUSED, in %s; flood (upstream %s): %s",
		answered, workers*each, refused, took.Round(time.Millisecond), slow, f.summary())
	if answered != workers*each {
		t.Errorf("%d of the victim's %d misses failed under another pod's flood, e.g. %s",
			workers*each-answered, workers*each, strings.Join(failures, "; "))
	}
	if f.sent.Load() < int64(fairFloodQPS) {
		t.Errorf("the flood sent only %d queries", f.sent.Load())
	}
}
