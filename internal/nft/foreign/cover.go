package foreign

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
)

// What a foreign base chain does to our traffic, decided from its rules (packet.go), for two reports:
//
// Covering: the addresses whose DNS a foreign drop certainly stops while we intercept. We deliver an
// intercepted query locally, through input, and reply through output; without interception the same query
// is DNATed by kube-proxy (or rewritten by the link-local fallback) and forwarded, crossing neither. So a drop
// on input or output that stops a pod's query to one of our addresses, or our reply to it, hurts only while
// we intercept: the instance steps aside for that address. A chain covers an address when, for a pod's
// untracked UDP or TCP query to it on the DNS port (or the reply from it), all of these hold:
//
//   - the chain is a base chain of a table we do not own, of type filter (or route on output), hooked on input
//     (for the query) or output (for the reply), in the address's family or inet, at any priority (our accept
//     ends only our own chain, whatever the priorities);
//   - walking its rules in order, the first rule whose verdict ends the chain and that matches the packet
//     certainly is a drop or reject, or no such rule exists and the policy is drop;
//   - before that, no rule that may match could accept, return, jump, goto or queue: a rule that only maybe
//     matches (it tests the client's address, a set, an interface other than loopback, a mark, an xt match
//     other than comment and conntrack state) and would end the chain otherwise than by a drop leaves the
//     address uncovered. So does a jump into a regular chain: its rules are not read.
//
// "Certainly" is computed: the protocol, the destination address and port (source for the reply), `ct state`
// (untracked: `ct state established,related accept` does not match, `ct state untracked` does; every other ct
// key fails on an untracked packet), `iifname "lo"` and `oifname "lo"` (never a pod's), and iptables-nft's
// comment and conntrack-state matches. Anything else is "maybe".
//
// Notracks: rules of tables we do not own that take our addresses' queries away from conntrack, so
// kube-proxy never DNATs them and nothing fails open while we do not serve: a notrack (nft's statement, or
// iptables-nft's -j NOTRACK) in a base chain on prerouting or output before conntrack (priority below -200)
// whose rule may match a query to one of our addresses on the DNS port. Other instances' tables (gated) and
// the fallback table are ours.

// conntrackPriority is NF_IP_PRI_CONNTRACK: a notrack only acts before it.
const conntrackPriority = -200

// coversFamily says whether a chain of family fam sees packets of ip's family.
func coversFamily(fam nftables.TableFamily, ip netip.Addr) bool {
	switch fam {
	case nftables.TableFamilyINet:
		return true
	case nftables.TableFamilyIPv4:
		return ip.Is4()
	case nftables.TableFamilyIPv6:
		return ip.Is6()
	}
	return false
}

// drops walks ch for p and says whether it certainly drops it, and by what.
func (ch Chain) drops(p packet) (string, bool) {
	for _, r := range ch.Rules {
		m, v, _ := p.match(r.Exprs)
		if m == no || v == verdictNone {
			continue
		}
		switch {
		case v == verdictDrop && m == yes:
			return fmt.Sprintf("%s handle %d", ch.Chain, r.Handle), true
		case v == verdictDrop:
			continue // dropped or not: either way not accepted here
		case v == verdictReturn && m == yes:
			return ch.policyDrops()
		default:
			return "", false // may accept, or leaves the chain where we do not follow
		}
	}
	return ch.policyDrops()
}

func (ch Chain) policyDrops() (string, bool) {
	if ch.PolicyDrop {
		return ch.Chain + " policy drop", true
	}
	return "", false
}

// Covering returns, for each of ips that a foreign drop covers (see above) on port, the first chain and rule
// that does. chains is what [Scan] read.
func Covering(chains []Chain, ips []netip.Addr, port uint16) map[netip.Addr]string {
	out := map[netip.Addr]string{}
	for _, ip := range ips {
		for _, ch := range chains {
			reply := ch.Hook == nft.HookOutput
			if (ch.Hook != nft.HookInput && !reply) || !coversFamily(ch.Family, ip) || ch.ours() {
				continue
			}
			if ch.Type != nftables.ChainTypeFilter && !(reply && ch.Type == nftables.ChainTypeRoute) {
				continue // nat chains never see untracked packets
			}
			for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
				if by, ok := ch.drops(packet{addr: ip, proto: proto, port: port, reply: reply}); ok {
					out[ip] = by
					break
				}
			}
			if _, ok := out[ip]; ok {
				break
			}
		}
	}
	return out
}

// Notrack is one rule of a table we do not own that may notrack queries to our addresses.
type Notrack struct {
	Chain  string
	Handle uint64
}

func (n Notrack) String() string { return fmt.Sprintf("%s handle %d", n.Chain, n.Handle) }

// Notracks lists the notrack rules of chains (see above) that may match a query to ips on port.
func Notracks(chains []Chain, ips []netip.Addr, port uint16) []Notrack {
	var out []Notrack
	for _, ch := range chains {
		if ch.ours() {
			continue
		}
		if (ch.Hook != nft.HookPrerouting && ch.Hook != nft.HookOutput) || ch.Priority >= conntrackPriority {
			continue
		}
		for _, r := range ch.Rules {
			if !slices.ContainsFunc(r.Exprs, isNotrack) {
				continue
			}
			for _, ip := range ips {
				if !coversFamily(ch.Family, ip) {
					continue
				}
				udp, _, _ := packet{addr: ip, proto: unix.IPPROTO_UDP, port: port}.match(r.Exprs)
				tcp, _, _ := packet{addr: ip, proto: unix.IPPROTO_TCP, port: port}.match(r.Exprs)
				if udp != no || tcp != no {
					out = append(out, Notrack{Chain: ch.Chain, Handle: r.Handle})
					break
				}
			}
		}
	}
	return out
}

// ours says whether the chain's table is one of ours by name: an inet instance table, a leaving instance's
// drain table or the fallback's.
func (ch Chain) ours() bool {
	return ch.Family == nftables.TableFamilyINet && nft.IsOurTableName(ch.Table)
}
