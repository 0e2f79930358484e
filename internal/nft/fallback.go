package nft

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
)

// The link-local fallback. With no instance listening, a query to a local IP that no Service backs (the
// link-local address, 169.254.20.10 by convention) has nothing behind it: the stack refuses it. The fallback
// table sends it to the cluster's own DNS instead, in the kernel, whether an instance runs or not: after
// conntrack and before kube-proxy's DNAT it rewrites the destination to the kube-dns ClusterIP, so kube-proxy
// (any mode) takes it to a kube-dns pod like any query to that Service.
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
//	input        101 host-reply       as pod-reply, after IPVS's own reply un-NAT (98)
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
// What it covers is a lease: every element of sets covered4 and covered6 carries a timeout, which each instance renews on
// its passes. An uninstall that ran no hook leaves the table, and within the lease its rules match nothing
// more. It aims at kube-dns's ClusterIP, never at a Service our install creates: a Service deleted with us
// has no address left for the fallback to hand to whoever gets it next.

// FallbackSpec is everything the fallback table depends on.
type FallbackSpec struct {
	// Targets are the kube-dns Service's ClusterIPs, at most one per family (dual-stack: both).
	Targets []netip.Addr
	// Covered are the (local IP, DNS port) pairs to fall back for: those of every live instance. Pairs of a
	// family no target has, and the targets themselves, are left out.
	Covered []netip.AddrPort
	// Lease is how long each covered pair stays in the table without being renewed.
	Lease time.Duration
}

// Fallback is the desired content of table inet [FallbackTableName]: a plain value, built by [BuildFallback],
// printed by [Fallback.String], programmed by nftconn's FallbackTable.Apply.
type Fallback struct {
	// Sets are covered4 and covered6, each there when its family has a target: the covered pairs, each
	// with the lease as its timeout.
	Sets   []Set
	Chains []Chain[FallbackRule]
	// Skipped are the pairs the table cannot cover (a family no target has).
	Skipped []netip.AddrPort
	// Stamp says which generation of these rules the table is, and towards which targets: the first rule's
	// comment (fallback_stamp.go).
	Stamp FallbackStamp
}

// Covered are the pairs the table falls back for, sorted.
func (f *Fallback) Covered() []netip.AddrPort {
	var out []netip.AddrPort
	for _, s := range f.Sets {
		out = append(out, s.Pairs...)
	}
	return SortedPairs(out)
}

// FallbackRule is a sequence of statements; its text and its bytecode come from the same statements.
type FallbackRule []stmt

func (r FallbackRule) String() string { return stmtsText(r) }

// exprs is the rule's bytecode.
func (r FallbackRule) exprs() []expr.Any { return stmtsExprs(r) }

// userData is the rule's comment (the stamp, on the first rule), if it has one.
func (r FallbackRule) userData() []byte {
	for _, s := range r {
		if q, ok := strings.CutPrefix(s.text, "comment "); ok && len(s.exprs) == 0 {
			if c, err := strconv.Unquote(q); err == nil {
				return userdata.AppendString(nil, userdata.TypeComment, c)
			}
		}
	}
	return nil
}

// SameDecision reports whether s names f's targets.
func (s FallbackStamp) SameDecision(f *Fallback) bool {
	return slices.Equal(s.Targets, f.Stamp.Targets)
}

// Validate reports the first reason the spec cannot be programmed.
func (s FallbackSpec) Validate() error {
	if len(s.Targets) == 0 {
		return errors.New("no kube-dns ClusterIP to fall back to")
	}
	var families [2]bool
	for _, t := range s.Targets {
		if !t.IsValid() || t.IsUnspecified() || t.Is4In6() {
			return fmt.Errorf("kube-dns ClusterIP %v: not a unicast IPv4 or IPv6 address", t)
		}
		if families[b2i(t.Is6())] {
			return fmt.Errorf("kube-dns ClusterIPs %v: at most one per family", s.Targets)
		}
		families[b2i(t.Is6())] = true
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

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// target is s's ClusterIP of ip's family, if it has one.
func (s FallbackSpec) target(ip netip.Addr) (netip.Addr, bool) {
	for _, t := range s.Targets {
		if t.Is4() == ip.Is4() {
			return t, true
		}
	}
	return netip.Addr{}, false
}

// BuildFallback computes the fallback table from s. It is pure and deterministic: the targets and pairs are
// sorted and deduplicated, so every instance given the same instances builds the same table. Each family with
// a target gets its set and its rules (IPv4 first); a spec with no pair to cover builds them with empty sets,
// which steer nothing.
func BuildFallback(s FallbackSpec) *Fallback {
	var pods, hosts, masq, replies []FallbackRule
	targets := slices.Clone(s.Targets)
	slices.SortFunc(targets, netip.Addr.Compare)
	targets = slices.Compact(targets)
	f := &Fallback{Stamp: FallbackStamp{Generation: fallbackGeneration, Targets: targets}}
	for _, target := range targets {
		set := Set{Name: SetCovered4, Concat: true, Timeout: s.Lease}
		if target.Is6() {
			set.Name, set.IPv6 = SetCovered6, true
		}
		var ports []uint16
		for _, p := range SortedPairs(s.Covered) {
			if p.Addr() != target && p.Addr().Is4() == target.Is4() {
				set.Pairs = append(set.Pairs, p)
				ports = append(ports, p.Port())
			}
		}
		f.Sets = append(f.Sets, set)
		slices.Sort(ports)
		ports = slices.Compact(ports)
		for _, p := range []Proto{ProtoUDP, ProtoTCP} {
			rewrite := FallbackRule{inPairs(target, DirTo, DirTo, p, set.Name), tracked(), counter(), setAddr(DirTo, target)}
			pods, hosts = append(pods, rewrite), append(hosts, rewrite)
			m := FallbackRule{inPairs(target, DirFrom, DirTo, p, set.Name), masquerade()}
			if masqueradeCounted {
				m = FallbackRule{m[0], counter(), m[1]}
			}
			masq = append(masq, m)
			for _, port := range ports {
				replies = append(replies, FallbackRule{ctDirection(ctReply), matchAddr(DirFrom, target), matchPort(p, DirFrom, port), setAddrToOriginal(target)})
			}
		}
	}
	if len(pods) > 0 {
		pods[0] = append(slices.Clone(pods[0]), commentStmt(f.Stamp.String()))
	}
	for _, p := range SortedPairs(s.Covered) {
		if _, ok := s.target(p.Addr()); !ok {
			f.Skipped = append(f.Skipped, p)
		}
	}
	f.Chains = []Chain[FallbackRule]{
		{Name: ChainPodPrerouting, Type: ChainTypeFilter, Hook: HookPrerouting, Priority: priorityMangle, Rules: pods, Takes: true},
		{Name: ChainPodReply, Type: ChainTypeFilter, Hook: HookPostrouting, Priority: prioritySrcNAT + 1, Rules: replies},
		{Name: ChainHostOutput, Type: ChainTypeRoute, Hook: HookOutput, Priority: priorityMangle, Rules: hosts, Takes: true},
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
	for i, set := range f.Sets {
		if i > 0 {
			b.WriteString("\n")
		}
		writeSet(&b, set)
	}
	for _, c := range f.Chains {
		b.WriteString("\n")
		writeChain(&b, c)
	}
	b.WriteString("}\n")
	return b.String()
}
