package forward

import (
	"net"
	"net/netip"
	"slices"

	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/addr"
)

// The client's identity towards the upstream (docs/clients.md, "Towards kube-dns"): with it on, a query this
// forward sends to a marked upstream carries the address of the client that asked, as an EDNS0 Client Subnet
// option (RFC 7871) of the full address (/32 or /128, scope 0), so that the upstream's query log (CoreDNS's
// dnstap) names the pod behind the cache. Stock CoreDNS prints no EDNS0 option in its `log` plugin's line and
// no stock plugin hands one to metadata; dnstap records each query's wire message, options included.
//
// The answer is the same for every client: kube-dns answers cluster names with no ECS (scope 0, good for all),
// and our cache keys entries by name, type, class, DO and CD as CoreDNS's does, storing no OPT. So the option
// is taken off the answer before the client or the cache sees it: the client never gets back an address it did
// not send, and a client that sent no EDNS gets no OPT.

// CarryClientSubnet marks the upstreams of f whose address is to as carrying the client's address, and unmarks
// the others; a zero to unmarks all. It returns how many are marked. Queries in flight may see either state.
func (f *Forward) CarryClientSubnet(to netip.Addr) int {
	n := 0
	for _, p := range f.proxies {
		ap, err := netip.ParseAddrPort(p.addr)
		on := err == nil && to.IsValid() && ap.Addr().Unmap() == to.Unmap()
		p.clientSubnet.Store(on)
		if on {
			n++
		}
	}
	return n
}

// ecsFamily is RFC 7871's FAMILY (IANA address family numbers).
const (
	ecsFamilyIPv4 = 1
	ecsFamilyIPv6 = 2
)

// withClientSubnet returns a copy of r (which the cache and the rest of the chain still hold) whose OPT carries
// the client's address as an ECS option, in place of any the client sent. A query without OPT gets one that
// advertises 512 bytes, no EDNS's size, so that the upstream answers within what the client can take. r itself
// is returned when the client's address is unknown.
func withClientSubnet(r *dns.Msg, client net.Addr) *dns.Msg {
	ap, _ := addr.Client(client)
	ip := ap.Addr().Unmap()
	if !ip.IsValid() {
		return r
	}
	ecs := &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: ecsFamilyIPv4, SourceNetmask: 32, Address: ip.AsSlice()}
	if ip.Is6() {
		ecs.Family, ecs.SourceNetmask = ecsFamilyIPv6, 128
	}
	m := *r
	m.Extra = make([]dns.RR, 0, len(r.Extra)+1)
	var opt *dns.OPT
	for _, rr := range r.Extra {
		if o, ok := rr.(*dns.OPT); ok && opt == nil {
			opt = &dns.OPT{Hdr: o.Hdr, Option: make([]dns.EDNS0, 0, len(o.Option)+1)}
			for _, e := range o.Option {
				if e.Option() != dns.EDNS0SUBNET {
					opt.Option = append(opt.Option, e)
				}
			}
			rr = opt
		}
		m.Extra = append(m.Extra, rr)
	}
	if opt == nil {
		opt = &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
		opt.SetUDPSize(dns.MinMsgSize)
		m.Extra = append(m.Extra, opt)
	}
	opt.Option = append(opt.Option, ecs)
	return &m
}

// withoutClientSubnet takes off an answer what withClientSubnet added to its query (r is the client's): the ECS
// option, and the OPT itself when the client sent none.
func withoutClientSubnet(ret, r *dns.Msg) {
	clientOPT := r.IsEdns0() != nil
	ret.Extra = slices.DeleteFunc(ret.Extra, func(rr dns.RR) bool {
		o, ok := rr.(*dns.OPT)
		if !ok {
			return false
		}
		if !clientOPT {
			return true
		}
		o.Option = slices.DeleteFunc(o.Option, func(e dns.EDNS0) bool { return e.Option() == dns.EDNS0SUBNET })
		return false
	})
}
