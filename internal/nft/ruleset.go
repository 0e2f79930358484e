package nft

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/google/nftables/expr"
)

// Ruleset is the desired content of table inet nodelocaldns: a plain value, built by [Build], printed by
// [Ruleset.Text], programmed by nftconn's Conn.Apply. Sets and chains are listed in the order nft lists them.
type Ruleset struct {
	Sets   []Set
	Chains []Chain[Rule]
}

// Set is a named set of listen IPs of one family (Elements, sorted and unique), or with Concat of IPv4
// address and port pairs (`type ipv4_addr . inet_service`, Pairs, sorted and unique). A Timeout gives every
// element that timeout (`flags timeout`): the kernel deletes each one that long after it was added.
type Set struct {
	Name     string
	IPv6     bool
	Elements []netip.Addr
	Concat   bool
	Pairs    []netip.AddrPort
	Timeout  time.Duration
}

// Chain is a base chain with policy accept, or a regular chain (no hook, no rules) when Hook is "", of our
// table (R is [Rule]) or of the fallback's ([FallbackRule]): one type, one printer (text.go) and one encoder
// (exprs.go) for both.
type Chain[R tableRule] struct {
	Name     string
	Type     ChainType // "" is ChainTypeFilter
	Hook     Hook
	Priority int32
	Rules    []R
	// Takes marks the fallback's chains whose rules send new queries to kube-dns: nftconn's FallbackTable.Stop
	// empties these first, while the others still give the replies of queries already sent their address back.
	Takes bool
}

// tableRule is a rule as a chain holds it: its statements give its text and its bytecode, and a rule of our
// table also carries its comment (userdata, nil for the fallback's).
type tableRule interface {
	fmt.Stringer
	exprs() []expr.Any
	userData() []byte
}

// ChainType is a base chain's type (nft keyword).
type ChainType string

// Chain types.
const (
	ChainTypeFilter ChainType = "filter"
	ChainTypeRoute  ChainType = "route"
	ChainTypeNAT    ChainType = "nat"
)

// chainType is c's type, filter unless it says otherwise.
func (c Chain[R]) chainType() ChainType {
	if c.Type == "" {
		return ChainTypeFilter
	}
	return c.Type
}

// Hook is the netfilter hook a base chain is attached to.
type Hook string

// The hooks we use (nft keywords).
const (
	HookPrerouting Hook = "prerouting"
	HookInput      Hook = "input"
	HookOutput     Hook = "output"
	// HookPostrouting is used only by the fallback table.
	HookPostrouting Hook = "postrouting"
)

// Rule matches one transport protocol to or from the local IPs of one family on one port, counts, and
// applies its verdict: `ip daddr @local4 udp dport 53 counter notrack comment "..."`.
type Rule struct {
	IPv6    bool
	Dir     Dir
	Proto   Proto
	Port    uint16
	Gate    Gate
	Verdict Verdict
	Comment string
	// Aside matches the step-aside sets (aside4, aside6) instead of the local ones.
	Aside bool
	// Bound matches the bound sets (bound4, bound6) instead of local4 and local6: host-network clients' rules
	// while some local IP has no listener ([Spec.Unbound]).
	Bound bool
}

// set is the set r matches its address against.
func (r Rule) set() string {
	switch {
	case r.Aside && r.IPv6:
		return SetAside6
	case r.Aside:
		return SetAside4
	case r.Bound && r.IPv6:
		return SetBound6
	case r.Bound:
		return SetBound4
	case r.IPv6:
		return SetLocal6
	}
	return SetLocal4
}

// Gate makes a rule match only while a DNS server listens on the packet's destination address and port, so
// that a query nobody here can answer stays tracked and kube-proxy's DNAT takes it to kube-dns (fail open).
//
// The socket expression (net/netfilter/nft_socket.c) looks the packet up the way the stack will deliver it:
// on prerouting there is no skb->sk yet, so it calls nf_sk_lookup_slow_v4/v6 with the packet's addresses and
// ports (an established socket first, then a listener; UDP through the same lookup as delivery, reuseport
// groups included). No socket at all: the expression breaks and the rule does not match, in both families.
// With a socket found, `wildcard` is 1 when it is bound to 0.0.0.0 or :: (inet_rcv_saddr == 0 /
// ipv6_addr_any(sk_v6_rcv_saddr)) and `transparent` is the IP_TRANSPARENT bit (inet_sk_transparent).
//
//   - UDP: `socket wildcard 0` matches only a socket bound to the address itself (CoreDNS's `bind`), so a
//     server that listens on the wildcard address is never intercepted (the supervisor warns about that).
//   - TCP: `socket transparent 0`. Between SYN and ACK the lookup finds the request socket
//     (TCP_NEW_SYN_RECV), which is not a full socket: `wildcard` breaks on it (the ACK would stay tracked,
//     get DNATed and the handshake reset), while `transparent` reads it from the request socket. Our
//     listeners are never transparent, so for TCP the gate is "some socket takes this packet".
//
// On the output path skb->sk is the sender's own socket, so no gate is possible there.
type Gate string

// Gates.
const (
	GateNone        Gate = ""
	GateWildcard    Gate = "wildcard"    // socket wildcard 0
	GateTransparent Gate = "transparent" // socket transparent 0
)

// Dir says which side of the packet is the local IP (and the port).
type Dir string

// Directions: packets to the local IP (daddr/dport) or from it (saddr/sport).
const (
	DirTo   Dir = "to"
	DirFrom Dir = "from"
)

// Proto is a transport protocol keyword.
type Proto string

// Transport protocols.
const (
	ProtoTCP Proto = "tcp"
	ProtoUDP Proto = "udp"
)

// Verdict is what a rule does with a matching packet.
type Verdict string

// Verdicts.
const (
	VerdictNotrack Verdict = "notrack" // not a terminal verdict: later rules still run
	VerdictAccept  Verdict = "accept"
	// VerdictReturn ends our base chain for the packet: the step-aside rules use it to skip the rules below.
	VerdictReturn Verdict = "return"
)

// Build computes the desired table from s. It is pure and deterministic: IPs are deduplicated and sorted, and
// the rules do not depend on the IPs at all (they match the sets). s should have passed [Spec.Validate].
func Build(s Spec) *Ruleset {
	r := Registration(s)
	if s.NoInterception {
		r.Chains = []Chain[Rule]{{Name: ChainServing}}
		return r
	}
	queries := perFamily(rule(DirTo, s.DNSPort, VerdictNotrack, CommentSkipConntrack, purposeQueries, ProtoTCP, ProtoUDP))
	for i := range queries {
		if s.Ungated {
			// No socket expression: the gate is what the agent knows, the addresses a listener is bound to.
			queries[i].Bound = true
		} else {
			queries[i].Gate = map[Proto]Gate{ProtoTCP: GateTransparent, ProtoUDP: GateWildcard}[queries[i].Proto]
		}
	}
	r.Chains = []Chain[Rule]{
		{Name: ChainRawPrerouting, Hook: HookPrerouting, Priority: priorityRaw, Rules: queries},
		rawOutput(s), // as in Listening
		{Name: ChainFilterInput, Hook: HookInput, Priority: priorityFilter, Rules: perFamily(
			rule(DirTo, s.DNSPort, VerdictAccept, CommentAllowDNS, purposeQueries, ProtoTCP, ProtoUDP),
		)},
		{Name: ChainFilterOutput, Hook: HookOutput, Priority: priorityFilter, Rules: perFamily(
			rule(DirFrom, s.DNSPort, VerdictAccept, CommentAllowDNS, purposeReplies, ProtoTCP, ProtoUDP),
		)},
	}
	stepAside(r, s)
	return r
}

// stepAside makes the instance leave s.StepAside's addresses alone (the supervisor's foreign.go says when):
// their queries are not notracked, so kube-proxy's DNAT and the link-local fallback take them to kube-dns,
// through forward instead of input. Each chain that notracks queries starts
// with a return for them; the addresses are in sets of their own, so the local sets still say what the
// interface must carry. Without addresses to leave, the table is exactly what it is without this.
func stepAside(r *Ruleset, s Spec) {
	if len(s.StepAside) == 0 {
		return
	}
	r.Sets = append(r.Sets, setPair(SetAside4, SetAside6, s.StepAside)...)
	aside := perFamily(rule(DirTo, s.DNSPort, VerdictReturn, CommentStepAside, purposeQueries, ProtoTCP, ProtoUDP))
	for i := range aside {
		aside[i].Aside = true
	}
	for i, c := range r.Chains {
		switch c.Name {
		case ChainRawPrerouting, ChainRawOutput:
			r.Chains[i].Rules = append(slices.Clone(aside), c.Rules...)
		}
	}
}

// Registration is the table an instance creates first: its sets (which addresses it needs on the shared
// interface) and no chain, so it steers nothing yet ("registered, starting"). An instance that intercepts has
// its word on the link-local fallback there too (sets fallback4 and fallback6, [Spec.Fallbacks]).
func Registration(s Spec) *Ruleset {
	r := &Ruleset{Sets: setPair(SetLocal4, SetLocal6, s.LocalIPs)}
	if !s.NoInterception {
		v4 := Set{Name: SetFallback4, Concat: true}
		v6 := Set{Name: SetFallback6, Concat: true, IPv6: true}
		for _, p := range SortedPairs(s.Fallbacks) {
			if p.Addr().Is4() {
				v4.Pairs = append(v4.Pairs, p)
			} else {
				v6.Pairs = append(v6.Pairs, p)
			}
		}
		r.Sets = append(r.Sets, v4, v6)
	}
	if len(s.Unbound) > 0 || (s.Ungated && !s.NoInterception) {
		bound := slices.DeleteFunc(slices.Clone(s.LocalIPs), func(ip netip.Addr) bool { return slices.Contains(s.Unbound, ip) })
		r.Sets = append(r.Sets, setPair(SetBound4, SetBound6, bound)...)
	}
	return r
}

// setPair is the IPv4 set name4 and the IPv6 set name6 holding ips, each sorted and deduplicated.
func setPair(name4, name6 string, ips []netip.Addr) []Set {
	var v4, v6 []netip.Addr
	for _, ip := range ips {
		if ip.Is4() {
			v4 = append(v4, ip)
		} else {
			v6 = append(v6, ip)
		}
	}
	return []Set{{Name: name4, Elements: SortedUnique(v4)}, {Name: name6, IPv6: true, Elements: SortedUnique(v6)}}
}

// Listening is the table of an instance whose listeners are bound and which does not serve yet: the
// registration's sets and the raw-output chain. Host-network clients' queries to the local IPs are notracked
// from then on, and so come to us: the link-local fallback leaves untracked queries alone (fallback.go), and an
// output rule cannot be gated on a listener (there the socket expression sees the sender's socket), so the
// notrack stands for one, programmed only once the listeners are bound and gone with the table. Earlier, a
// restarting agent's queries would be refused for as long as CoreDNS took to bind; later, its own queries to a
// local IP (the `loop` directive's probes) would go to kube-dns until it serves.
func Listening(s Spec) *Ruleset {
	r := Registration(s)
	if !s.NoInterception {
		r.Chains = []Chain[Rule]{rawOutput(s)}
		stepAside(r, s)
	}
	return r
}

// rawOutput notracks the replies from the local IPs and host-network clients' queries to them (Listening says
// from when); node-cache numbers these 5-12: replies first, then host-network clients, then the liveness probe.
func rawOutput(s Spec) Chain[Rule] {
	// Host-network clients' queries cannot be gated on a listener: while some local IP has none, they
	// match the bound sets ([Spec.Unbound]).
	hostQueries := rule(DirTo, s.DNSPort, VerdictNotrack, CommentSkipConntrack, purposeHostQueries, ProtoTCP, ProtoUDP)
	hostQueries.bound = len(s.Unbound) > 0
	rules := perFamily(
		rule(DirFrom, s.DNSPort, VerdictNotrack, CommentSkipConntrack, purposeReplies, ProtoTCP, ProtoUDP),
		hostQueries,
		rule(DirTo, s.HealthPort, VerdictNotrack, CommentSkipConntrack, purposeHealth, ProtoTCP),
		rule(DirFrom, s.HealthPort, VerdictNotrack, CommentSkipConntrack, purposeHealthReply, ProtoTCP),
	)
	return Chain[Rule]{Name: ChainRawOutput, Hook: HookOutput, Priority: priorityRaw, Rules: rules}
}

// group is a set of rules that differ only in family and protocol.
type group struct {
	dir             Dir
	port            uint16
	verdict         Verdict
	prefix, purpose string
	protos          []Proto
	bound           bool // match the bound sets ([Rule.Bound])
}

func rule(dir Dir, port uint16, v Verdict, prefix, purpose string, protos ...Proto) group {
	return group{dir: dir, port: port, verdict: v, prefix: prefix, purpose: purpose, protos: protos}
}

// perFamily lays out the groups IPv4 first, then IPv6, one rule per protocol, with a comment that is unique
// within the chain: "NodeLocal DNS Cache: skip conntrack: ipv4 udp queries".
func perFamily(groups ...group) []Rule {
	var out []Rule
	for _, v6 := range []bool{false, true} {
		for _, g := range groups {
			for _, p := range g.protos {
				r := Rule{IPv6: v6, Dir: g.dir, Proto: p, Port: g.port, Verdict: g.verdict, Bound: g.bound}
				r.Comment = g.prefix + ": " + r.ipVersion() + " " + string(p) + " " + g.purpose
				out = append(out, r)
			}
		}
	}
	return out
}

// ipVersion is the family as node-cache's comments name it.
func (r Rule) ipVersion() string {
	if r.IPv6 {
		return "ipv6"
	}
	return "ipv4"
}

// SortedUnique is ips sorted, without repeats: the order a set's elements are written and compared in.
func SortedUnique(ips []netip.Addr) []netip.Addr {
	out := slices.Clone(ips)
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// SortedPairs is ps sorted, without repeats, as SortedUnique.
func SortedPairs(ps []netip.AddrPort) []netip.AddrPort {
	out := slices.Clone(ps)
	slices.SortFunc(out, netip.AddrPort.Compare)
	return slices.Compact(out)
}
