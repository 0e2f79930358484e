package serve

import (
	"net"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// zoneUpstream is a small authoritative server for the fast path's differential test, over UDP and TCP on addr,
// with one of each kind of answer a node-local cache sees (names relative to the cluster domain):
//
//	web.svc        A 10.1.0.1, AAAA fd00::1 (TTL 300)
//	_http._tcp.web.svc  SRV 0 100 80 web.svc, with web.svc's A in the additional section
//	big.svc        A 10.2.0.1 ... 10.2.0.60: over 512 bytes, truncated over UDP without EDNS
//	nodata.svc     A 10.1.0.2 and no AAAA (NODATA with the SOA)
//	1.0.1.10.in-addr.arpa  PTR web.svc
//	anything else  NXDOMAIN with the SOA
//
// Answers carry the question's name as asked (its case), as real servers do.
func zoneUpstream(t *testing.T, addr string) {
	t.Helper()
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Authoritative = true
		q := r.Question[0]
		name := strings.ToLower(q.Name)
		hdr := func(t uint16) dns.RR_Header {
			return dns.RR_Header{Name: q.Name, Rrtype: t, Class: dns.ClassINET, Ttl: 300}
		}
		soa := &dns.SOA{Hdr: dns.RR_Header{Name: "cluster.local.", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 30},
			Ns: "ns.dns.cluster.local.", Mbox: "hostmaster.cluster.local.", Serial: 1, Refresh: 7200, Retry: 1800,
			Expire: 86400, Minttl: 30}
		switch {
		case name == "web.svc.cluster.local." && q.Qtype == dns.TypeA:
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr(dns.TypeA), A: net.ParseIP("10.1.0.1")})
		case name == "web.svc.cluster.local." && q.Qtype == dns.TypeAAAA:
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr(dns.TypeAAAA), AAAA: net.ParseIP("fd00::1")})
		case name == "_http._tcp.web.svc.cluster.local." && q.Qtype == dns.TypeSRV:
			m.Answer = append(m.Answer, &dns.SRV{Hdr: hdr(dns.TypeSRV), Priority: 0, Weight: 100, Port: 80, Target: "web.svc.cluster.local."})
			m.Extra = append(m.Extra, &dns.A{Hdr: dns.RR_Header{Name: "web.svc.cluster.local.", Rrtype: dns.TypeA,
				Class: dns.ClassINET, Ttl: 300}, A: net.ParseIP("10.1.0.1")})
		case name == "big.svc.cluster.local." && q.Qtype == dns.TypeA:
			for i := range 60 {
				m.Answer = append(m.Answer, &dns.A{Hdr: hdr(dns.TypeA), A: net.IPv4(10, 2, 0, byte(i+1))})
			}
		case name == "nodata.svc.cluster.local.":
			if q.Qtype == dns.TypeA {
				m.Answer = append(m.Answer, &dns.A{Hdr: hdr(dns.TypeA), A: net.ParseIP("10.1.0.2")})
			} else {
				m.Ns = append(m.Ns, soa)
			}
		case name == "1.0.1.10.in-addr.arpa." && q.Qtype == dns.TypePTR:
			m.Answer = append(m.Answer, &dns.PTR{Hdr: hdr(dns.TypePTR), Ptr: "web.svc.cluster.local."})
		default:
			m.Rcode = dns.RcodeNameError
			m.Ns = append(m.Ns, soa)
		}
		if o := r.IsEdns0(); o != nil {
			m.SetEdns0(4096, o.Do())
		}
		w.WriteMsg(m)
	})
	testenv.ServeDNS(t, addr, h)
}
