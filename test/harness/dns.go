package harness

import (
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// Upstream is an authoritative-for-everything DNS server on one address (UDP and TCP) that answers every A
// query with its own fixed address, so a test can tell which server an answer came from, and counts queries.
type Upstream struct {
	Addr    string // host:port it listens on
	Answer  net.IP // the A record it gives for every name
	TTL     uint32
	Queries atomic.Int64
	// delayMin and delayMax bound how long each answer waits (SetDelay); 0: it goes at once.
	delayMin, delayMax atomic.Int64

	mu     sync.Mutex
	byName map[string]int // queries per question name (lowercase, fully qualified)
	tcp    map[string]int // those of byName that came over TCP
}

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

// StartUpstream serves on addr ("127.0.0.53:53", "10.0.0.2:53", "127.0.0.1:0") until the test ends.
func StartUpstream(t testing.TB, addr, answer string) *Upstream {
	t.Helper()
	u := &Upstream{Answer: net.ParseIP(answer), TTL: 300}
	u.Addr, _ = testenv.ServeDNS(t, addr, dns.HandlerFunc(u.serve))
	return u
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
		if u.byName == nil {
			u.byName, u.tcp = map[string]int{}, map[string]int{}
		}
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
			Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: u.TTL},
			A:   u.Answer,
		})
	}
	w.WriteMsg(m)
}

// Lookup sends one A query for name to server over net ("udp" or "tcp") and returns the first A record's
// address, or an error (timeout, no answer, non-success rcode).
func Lookup(server, netw, name string, timeout time.Duration) (string, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	c := &dns.Client{Net: netw, Timeout: timeout}
	r, _, err := c.Exchange(m, server)
	if err != nil {
		return "", err
	}
	return firstA(r)
}

// firstA is the address of r's first A record, or an RcodeError.
func firstA(r *dns.Msg) (string, error) {
	if r.Rcode != dns.RcodeSuccess {
		return "", &RcodeError{Rcode: r.Rcode}
	}
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			return a.A.String(), nil
		}
	}
	return "", &RcodeError{Rcode: r.Rcode, NoData: true}
}

// RcodeError is a DNS answer that is not a usable A record.
type RcodeError struct {
	Rcode  int
	NoData bool
}

func (e *RcodeError) Error() string {
	if e.NoData {
		return "no A record in the answer"
	}
	return "rcode " + dns.RcodeToString[e.Rcode]
}
