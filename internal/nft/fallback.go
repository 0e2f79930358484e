package nft

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// The link-local fallback. With no instance listening, a query to a local IP that no Service backs (the
// link-local address, 169.254.20.10 by convention) has nothing behind it: the stack refuses it. The fallback
// table sends it to the cluster's own DNS instead, in the kernel, with no process alive: after conntrack
// and before kube-proxy's DNAT it rewrites the destination to the kube-dns ClusterIP, so kube-proxy (any
// mode) takes it to a kube-dns pod like any query to that Service.
//
//	prerouting  -300 (instance tables' raw-prerouting: a serving instance with a listener bound to the
//	                 address notracks the query, gated on that listener; node-cache's NOTRACK is here too)
//	prerouting  -200 conntrack: the connection is recorded with the address the client sent to
//	prerouting  -150 pod-prerouting   a tracked query to a covered address: daddr set to kube-dns's ClusterIP
//	prerouting  -100 (kube-proxy's DNAT of that ClusterIP to a kube-dns pod)
//	postrouting  101 pod-reply        IPVS only: the reply's source back to the address the client asked
//	output      -300 (instance tables' raw-output: an instance whose listeners are bound notracks host-network
//	                 queries to its addresses)
//	output      -150 host-output      (type route) as pod-prerouting
//	postrouting  100 host-masquerade  (type nat) the host's source is the local address itself, which every
//	                                  node holds: masquerade it, or a kube-dns pod on another node answers
//	                                  its own node
//	input        101 host-reply       as pod-reply, after IPVS's own reply un-NAT (99)
//
// "Taken" is "untracked": the fallback leaves alone every query that something before conntrack took
// (`ct state != untracked`). So pods' queries go to an instance only while it serves and listens on the
// address, as its notrack's own gate says; host-network clients' from the moment its listeners are bound.
// Nothing here reads or writes a packet or connection mark, which other networking software owns.
//
// Replies need no rewrite in iptables and nftables modes: conntrack recorded the address the client sent to,
// so undoing kube-proxy's DNAT gives the reply that source. IPVS un-NATs a reply to its own virtual address
// instead; pod-reply and host-reply then write the connection's original destination back, which for any
// other reply from the ClusterIP is the address it already has.
//
// The table is not owned: it must outlive every instance (a crash, a pod delete, a rollout without surge).
// What it covers is a lease: every element of set covered4 carries a timeout, which each instance renews on
// its passes. An uninstall that ran no hook leaves the table, and within the lease its rules match nothing
// more. It aims at kube-dns's ClusterIP, never at a Service our install creates: a Service deleted with us
// has no address left for the fallback to hand to whoever gets it next.

// FallbackSpec is everything the fallback table depends on.
type FallbackSpec struct {
	// Target is the kube-dns Service's ClusterIP.
	Target netip.Addr
	// Covered are the (local IP, DNS port) pairs to fall back for: those of every live instance. Pairs not in
	// Target's family, and Target itself, are left out.
	Covered []netip.AddrPort
	// Lease is how long each covered pair stays in the table without being renewed.
	Lease time.Duration
}

// Fallback is the desired content of table inet [FallbackTableName]: a plain value, built by [BuildFallback],
// printed by [Fallback.String], programmed by [Conn.ApplyFallback].
type Fallback struct {
	Set    Set // covered4: the covered pairs, each with the lease as its timeout
	Chains []FallbackChain
	// Skipped are the pairs the table cannot cover (another family than the target's).
	Skipped []netip.AddrPort
}

// Covered are the pairs the table falls back for, sorted.
func (f *Fallback) Covered() []netip.AddrPort { return f.Set.Pairs }

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

// ErrFallbackIPv6 says why an IPv6 kube-dns ClusterIP gets no fallback yet: rewriting an IPv6 address needs
// the transport checksum's pseudo-header updated (NFT_PAYLOAD_L4CSUM_PSEUDOHDR), and google/nftables v0.3.0
// sends NFTA_PAYLOAD_CSUM_FLAGS only together with an L3 checksum, which IPv6 has not: the kernel would
// forward every rewritten query with a wrong checksum. TestPayloadCsumFlagsNeedL3Csum pins that behaviour.
var ErrFallbackIPv6 = errors.New("the link-local fallback needs an IPv4 kube-dns ClusterIP (IPv6 rewrites are not supported yet)")

// Validate reports the first reason the spec cannot be programmed.
func (s FallbackSpec) Validate() error {
	if !s.Target.IsValid() || s.Target.IsUnspecified() {
		return errors.New("no kube-dns ClusterIP to fall back to")
	}
	if !s.Target.Is4() {
		return ErrFallbackIPv6
	}
	if s.Lease <= 0 {
		return fmt.Errorf("lease %v: must be positive", s.Lease)
	}
	for _, p := range s.Covered {
		if p.Port() == 0 {
			return fmt.Errorf("covered %v: port 0", p)
		}
	}
	return nil
}

// BuildFallback computes the fallback table from s. It is pure and deterministic: the pairs are
// deduplicated and sorted, so every instance given the same instances builds the same table. A spec with no
// pair to cover builds the chains with an empty set, which steer nothing.
func BuildFallback(s FallbackSpec) *Fallback {
	f := &Fallback{Set: Set{Name: SetCovered4, Concat: true, Timeout: s.Lease}}
	var ports []uint16
	for _, p := range sortedPairs(s.Covered) {
		switch {
		case p.Addr() == s.Target:
		case p.Addr().Is4() != s.Target.Is4():
			f.Skipped = append(f.Skipped, p)
		default:
			f.Set.Pairs = append(f.Set.Pairs, p)
			ports = append(ports, p.Port())
		}
	}
	slices.Sort(ports)
	ports = slices.Compact(ports)
	var pods, hosts, masq, replies []FallbackRule
	for _, p := range []Proto{ProtoUDP, ProtoTCP} {
		rewrite := FallbackRule{inPairs(DirTo, DirTo, p, SetCovered4), tracked(), counter(), setAddr(DirTo, s.Target)}
		pods, hosts = append(pods, rewrite), append(hosts, rewrite)
		masq = append(masq, FallbackRule{inPairs(DirFrom, DirTo, p, SetCovered4), masquerade()})
		for _, port := range ports {
			replies = append(replies, FallbackRule{ctDirection(ctReply), matchAddr(DirFrom, s.Target), matchPort(p, DirFrom, port), setAddrToOriginal()})
		}
	}
	f.Chains = []FallbackChain{
		{Name: ChainPodPrerouting, Type: ChainTypeFilter, Hook: HookPrerouting, Priority: priorityMangle, Rules: pods},
		{Name: ChainPodReply, Type: ChainTypeFilter, Hook: HookPostrouting, Priority: prioritySrcNAT + 1, Rules: replies},
		{Name: ChainHostOutput, Type: ChainTypeRoute, Hook: HookOutput, Priority: priorityMangle, Rules: hosts},
		{Name: ChainHostMasquerade, Type: ChainTypeNAT, Hook: HookPostrouting, Priority: prioritySrcNAT, Rules: masq},
		{Name: ChainHostReply, Type: ChainTypeFilter, Hook: HookInput, Priority: prioritySrcNAT + 1, Rules: slices.Clone(replies)},
	}
	return f
}

// String prints the table in nft syntax, what `nft -s list table inet nodelocaldns-fallback` prints for it
// (the kernel lists a hash set's elements in its hash's order: compare with the element lines sorted), and
// names priorities relative to the standard ones.
func (f *Fallback) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s {\n", FallbackTableName)
	writeSet(&b, f.Set)
	for _, c := range f.Chains {
		b.WriteString("\n")
		fmt.Fprintf(&b, "\tchain %s {\n\t\ttype %s hook %s priority %s; policy accept;\n", c.Name, c.Type, c.Hook, priorityName(c.Hook, c.Priority))
		for _, r := range c.Rules {
			fmt.Fprintf(&b, "\t\t%s\n", r)
		}
		b.WriteString("\t}\n")
	}
	b.WriteString("}\n")
	return b.String()
}

func sortedPairs(ps []netip.AddrPort) []netip.AddrPort {
	out := slices.Clone(ps)
	slices.SortFunc(out, netip.AddrPort.Compare)
	return slices.Compact(out)
}
