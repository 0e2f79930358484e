package harness

import (
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// Upstream is testenv's fake upstream, which the unit tests share.
type Upstream = testenv.Upstream

// StartUpstream serves on addr ("127.0.0.53:53", "10.0.0.2:53", "127.0.0.1:0") until the test ends
// (testenv.StartUpstream).
func StartUpstream(t testing.TB, addr, answer string) *Upstream {
	t.Helper()
	return testenv.StartUpstream(t, addr, answer)
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
