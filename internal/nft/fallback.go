package nft

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// The link-local fallback. With no instance listening, a query to a local IP that only we serve (the
// link-local address, 169.254.20.10 by convention) has nothing behind it: the stack refuses it. The fallback
// table sends it to kube-dns instead, in the kernel, with no process alive: before conntrack it rewrites the
// destination to the kube-dns-upstream ClusterIP, so conntrack and kube-proxy (any mode) see an ordinary query
// to a Service and take it to a kube-dns pod; the reply's source is rewritten back, so the client accepts it.
//
// Why a rewrite and not a DNAT: netfilter binds one NAT per direction of a connection (the first nat chain
// that translates wins, nf_nat_inet_fn), so a DNAT to the ClusterIP would keep kube-proxy's own DNAT from
// running in iptables and nftables modes. The ClusterIP it aims at is kube-dns-upstream's (the agent's own
// upstream, never intercepted), not kube-dns's, so a live instance that listens on the kube-dns ClusterIP but
// not on the link-local address never answers from the wrong source.
//
//	prerouting  -302 (instance tables' mark-prerouting: a serving instance with a listener bound to the
//	                 address marks the query taken, gated as its notrack at -300 is)
//	prerouting  -301 pod-prerouting   unless taken: mark it with the address's index, rewrite daddr to upstream
//	prerouting  -150 pod-mark         copy the mark into the connection's ct mark, clear it on the packet
//	postrouting  101 pod-reply        replies of marked connections from upstream: saddr back to the address
//	output      -300 (instance tables' mark-output: every instance whose listeners are bound marks
//	                 host-network queries to its addresses taken)
//	output      -250 host-output      (type route) unless taken: the same rewrite
//	output      -150 host-mark        as pod-mark
//	postrouting  100 host-masquerade  (type nat) the host's source is the local address itself, which every
//	                                  node holds: masquerade it, or a kube-dns pod on another node answers
//	                                  its own node
//	input        101 host-reply       as pod-reply, after the nat hook (100) undid kube-proxy's DNAT
//
// The mark is a 3-bit field of the packet and connection mark (fallbackMarkMask) holding the address's
// index + 1, so the reply is given back the address it was sent to; the other bits are left alone (kube-proxy
// uses 0x4000 and 0x8000, Calico the upper 16 bits, Cilium 0x0f00). The packet's field is cleared again at
// -150, before anything else reads marks for routing. Its last value, 7, is the instances' "taken" mark.
//
// So pods' queries go to an instance only while it serves and listens on the address, as its notrack's own
// gate says; until then (a start-up, a reload whose `loop` check is pending, a crash) they go to kube-dns,
// whatever the address. Host-network clients cannot be gated on a listener (on output the packet carries its
// sender's socket), so they go to an instance from its registration on: a starting instance's own queries to
// a local IP (the `loop` directive's probes) reach it, not kube-dns. Both marks go with the instance's owned
// table, SIGKILL included; the fallback itself needs no socket expression.
//
// The table is not owned: it must outlive every instance (a crash, a pod delete, a drain). Every instance
// keeps it in place, idempotently (each builds the same table from the union of the live instances'
// addresses), and `-teardown` deletes it.

// FallbackSpec is everything the fallback table depends on.
type FallbackSpec struct {
	// LocalIPs are the addresses to fall back for: the union of every live instance's addresses. Those not in
	// Upstream's family, and Upstream itself, are left out.
	LocalIPs []netip.Addr
	// Upstream is the kube-dns-upstream Service's ClusterIP.
	Upstream netip.Addr
	// DNSPort is the port queries are sent to (`-dns.port`); kube-dns answers on the same port.
	DNSPort uint16
}

// Fallback is the desired content of table inet [FallbackTableName]: a plain value, built by [BuildFallback],
// printed by [Fallback.String], programmed by [Conn.ApplyFallback].
type Fallback struct {
	Chains []FallbackChain
	// Covered are the addresses the table falls back for, in mark order; Skipped those it cannot (another
	// family than the upstream's, or more than [MaxFallbackIPs]).
	Covered, Skipped []netip.Addr
}

// FallbackChain is a base chain of the fallback table.
type FallbackChain struct {
	Name     string
	Type     ChainType
	Hook     Hook
	Priority int32
	Rules    []FallbackRule
}

// ChainType is a base chain's type (nft keyword).
type ChainType string

// Chain types.
const (
	ChainTypeFilter ChainType = "filter"
	ChainTypeRoute  ChainType = "route"
	ChainTypeNAT    ChainType = "nat"
)

// FallbackRule is a sequence of statements; its text and its bytecode come from the same statements.
type FallbackRule []stmt

func (r FallbackRule) String() string {
	parts := make([]string, len(r))
	for i, s := range r {
		parts[i] = s.text
	}
	return strings.Join(parts, " ")
}

// MaxFallbackIPs is how many addresses one family's fallback can tell apart in the mark's field.
const MaxFallbackIPs = markTaken>>fallbackMarkShift - 1 // field values 1..6; 0 is "not ours", 7 "alive"

// ErrFallbackIPv6 says why an IPv6 upstream gets no fallback yet: rewriting an IPv6 address needs the
// transport checksum's pseudo-header updated (NFT_PAYLOAD_L4CSUM_PSEUDOHDR), and google/nftables v0.3.0
// sends NFTA_PAYLOAD_CSUM_FLAGS only together with an L3 checksum, which IPv6 has not: the kernel would
// forward every rewritten query with a wrong checksum. TestPayloadCsumFlagsNeedL3Csum pins that behaviour.
var ErrFallbackIPv6 = errors.New("the link-local fallback needs an IPv4 upstream ClusterIP (IPv6 rewrites are not supported yet)")

// Validate reports the first reason the spec cannot be programmed.
func (s FallbackSpec) Validate() error {
	if !s.Upstream.IsValid() || s.Upstream.IsUnspecified() {
		return errors.New("no upstream ClusterIP to fall back to")
	}
	if !s.Upstream.Is4() {
		return ErrFallbackIPv6
	}
	if s.DNSPort == 0 {
		return errors.New("dns port 0")
	}
	return nil
}

// BuildFallback computes the fallback table from s. It is pure and deterministic: the addresses are
// deduplicated and sorted, so every instance given the same union builds the same table. A spec with no
// address to cover builds a table without rules' addresses: chains only, which steer nothing.
func BuildFallback(s FallbackSpec) *Fallback {
	f := &Fallback{}
	for _, ip := range sortedUnique(s.LocalIPs) {
		switch {
		case ip == s.Upstream:
		case ip.Is4() != s.Upstream.Is4() || len(f.Covered) == MaxFallbackIPs:
			f.Skipped = append(f.Skipped, ip)
		default:
			f.Covered = append(f.Covered, ip)
		}
	}
	up, port := s.Upstream, s.DNSPort
	var podPre, podMark, podReply, hostOut, hostMark, hostMasq, hostReply []FallbackRule
	for i, ip := range f.Covered {
		m := uint32(i+1) << fallbackMarkShift
		for _, p := range []Proto{ProtoUDP, ProtoTCP} {
			podPre = append(podPre, FallbackRule{matchAddr(DirTo, ip), matchPort(p, DirTo, port), notTaken(), counter(), setMarkField(m), setAddr(DirTo, up)})
			hostOut = append(hostOut, FallbackRule{matchAddr(DirTo, ip), matchPort(p, DirTo, port), notTaken(), counter(), setMarkField(m), setAddr(DirTo, up)})
		}
		keep := FallbackRule{matchMarkField(m), setCtMarkField(m), clearMarkField()}
		podMark, hostMark = append(podMark, keep), append(hostMark, keep)
		reply := FallbackRule{ctDirection(ctReply), matchCtMarkField(m), matchAddr(DirFrom, up), setAddr(DirFrom, ip)}
		podReply, hostReply = append(podReply, reply), append(hostReply, reply)
		hostMasq = append(hostMasq, FallbackRule{ctDirection(ctOriginal), matchCtMarkField(m), matchAddr(DirFrom, ip), masquerade()})
	}
	f.Chains = []FallbackChain{
		{Name: ChainPodPrerouting, Type: ChainTypeFilter, Hook: HookPrerouting, Priority: priorityRaw - 1, Rules: podPre},
		{Name: ChainPodMark, Type: ChainTypeFilter, Hook: HookPrerouting, Priority: priorityMangle, Rules: podMark},
		{Name: ChainPodReply, Type: ChainTypeFilter, Hook: HookPostrouting, Priority: prioritySrcNAT + 1, Rules: podReply},
		{Name: ChainHostOutput, Type: ChainTypeRoute, Hook: HookOutput, Priority: priorityHostRewrite, Rules: hostOut},
		{Name: ChainHostMark, Type: ChainTypeFilter, Hook: HookOutput, Priority: priorityMangle, Rules: hostMark},
		{Name: ChainHostMasquerade, Type: ChainTypeNAT, Hook: HookPostrouting, Priority: prioritySrcNAT, Rules: hostMasq},
		{Name: ChainHostReply, Type: ChainTypeFilter, Hook: HookInput, Priority: prioritySrcNAT + 1, Rules: hostReply},
	}
	return f
}

// String prints the table in nft syntax, byte for byte what `nft -s list table inet nodelocaldns-fallback`
// prints for it (nft prints a masked set `x & m ^ v` as `x & (m|v) | v`, and names priorities relative to
// the standard ones).
func (f *Fallback) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s {\n", FallbackTableName)
	for i, c := range f.Chains {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "\tchain %s {\n\t\ttype %s hook %s priority %s; policy accept;\n", c.Name, c.Type, c.Hook, priorityName(c.Hook, c.Priority))
		for _, r := range c.Rules {
			fmt.Fprintf(&b, "\t\t%s\n", r)
		}
		b.WriteString("\t}\n")
	}
	b.WriteString("}\n")
	return b.String()
}
