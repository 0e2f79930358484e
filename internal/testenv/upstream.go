package testenv

import (
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// Upstream is an authoritative-for-everything DNS server on one address (UDP and TCP) that answers every A
// query with its own fixed address, so a test can tell which server an answer came from, and counts queries.
// It is the one fake upstream of the tests: the unit tests' in front of the embedded CoreDNS and the e2e
// harness's (test/harness) alike.
type Upstream struct {
	Addr    string // host:port it listens on
	Answer  net.IP // the A record it gives for every name
	Queries atomic.Int64
	ttl     atomic.Uint32 // of the A record; SetTTL
	// delayMin and delayMax bound how long each answer waits (SetDelay); 0: it goes at once.
	delayMin, delayMax atomic.Int64

	mu     sync.Mutex
	byName map[string]int // queries per question name (lowercase, fully qualified)
	tcp    map[string]int // those of byName that came over TCP
}

// StartUpstream serves on addr ("127.0.0.53:53", "10.0.0.2:53", "127.0.0.1:0") until the test ends, answering
// A queries with answer and a TTL of 300 s.
func StartUpstream(t testing.TB, addr, answer string) *Upstream {
	t.Helper()
	u := &Upstream{Answer: net.ParseIP(answer), byName: map[string]int{}, tcp: map[string]int{}}
	u.ttl.Store(300)
	u.Addr, _ = ServeDNS(t, addr, dns.HandlerFunc(u.serve))
	return u
}

// SetTTL makes the answers from now on carry ttl.
func (u *Upstream) SetTTL(ttl uint32) { u.ttl.Store(ttl) }

// QueriesFor returns how many queries for name reached the upstream. Unlike Queries it ignores CoreDNS's own
// traffic, such as the loop plugin's HINFO probe.
func (u *Upstream) QueriesFor(name string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.byName[strings.ToLower(dns.Fqdn(name))]
}

// QueriesOverTCP returns how many of the queries for name came over TCP.
func (u *Upstream) QueriesOverTCP(name string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.tcp[strings.ToLower(dns.Fqdn(name))]
}

// SetDelay makes every answer from now on wait a time drawn evenly from [lo, hi]: an upstream as slow as
// external names often are (a few hundred ms), so that a test can have answers in flight when something happens.
func (u *Upstream) SetDelay(lo, hi time.Duration) {
	u.delayMin.Store(int64(lo))
	u.delayMax.Store(int64(hi))
}

func (u *Upstream) serve(w dns.ResponseWriter, r *dns.Msg) {
	u.Queries.Add(1)
	if lo, hi := u.delayMin.Load(), u.delayMax.Load(); hi > 0 {
		time.Sleep(time.Duration(lo + rand.Int64N(hi-lo+1)))
	}
	if len(r.Question) == 1 {
		u.mu.Lock()
		name := strings.ToLower(r.Question[0].Name)
		u.byName[name]++
		if _, ok := w.RemoteAddr().(*net.TCPAddr); ok {
			u.tcp[name]++
		}
		u.mu.Unlock()
	}
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	if len(r.Question) == 1 && r.Question[0].Qtype == dns.TypeA {
		m.Answer = append(m.Answer, &dns.A{
			Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: u.ttl.Load()},
			A:   u.Answer,
		})
	}
	w.WriteMsg(m)
}
