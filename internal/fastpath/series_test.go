package fastpath_test

import (
	"testing"
	"time"

	"github.com/miekg/dns"
)

// One name asked with EDNS padding of many lengths is one label set of metrics: the request size is each
// answer's own, not part of the key (keyed by it, the set grew by one per length until a reload).
func TestSeriesNotKeyedByRequestLength(t *testing.T) {
	up := startUpstream(t)
	p, addr := startCoreDNS(t, "prometheus 127.0.0.1:0\n cache 30\n forward . "+up.Addr)
	const lengths = 20
	for n := range lengths {
		m := new(dns.Msg)
		m.SetQuestion("padded.example.", dns.TypeA)
		m.SetEdns0(1232, false)
		m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_PADDING{Padding: make([]byte, n*7)})
		for range 3 { // a miss, then two hits: the fast path learns the second
			if _, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(m, addr.String()); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitStored(t, p, addr, lengths)
	if n := p.Series(addr); n != 1 {
		t.Errorf("%d label sets for one name asked with %d request lengths, want 1", n, lengths)
	}
}
