package nft

import (
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
)

// stmts are r's statements, which give both its text ([Rule.String]) and its bytecode: `ip daddr @local4
// udp dport 53 socket wildcard 0 counter notrack`, the comment aside (userdata, not bytecode).
func (r Rule) stmts() []stmt {
	out := []stmt{inSet(r.Dir, r.IPv6, r.set()), matchPort(r.Proto, r.Dir, r.Port)}
	if r.Gate != GateNone {
		out = append(out, socketGate(r.Gate))
	}
	return append(out, counter(), verdict(r.Verdict))
}

// exprs is the bytecode of r, the same nft itself generates for r.String().
func (r Rule) exprs() []expr.Any { return stmtsExprs(r.stmts()) }

// userData is the rule's comment in the TLV format nft reads.
func (r Rule) userData() []byte { return userdata.AppendString(nil, userdata.TypeComment, r.Comment) }

// The google/nftables objects of our tables, sets, chains and rules: what nft/nftconn queues. Encoding one
// touches nothing.

// InetTable is table inet name.
func InetTable(name string) *nftables.Table {
	return &nftables.Table{Name: name, Family: nftables.TableFamilyINet}
}

// Encode is s as a set of table t, and its elements.
func (s Set) Encode(t *nftables.Table) (*nftables.Set, []nftables.SetElement) {
	set := &nftables.Set{Table: t, Name: s.Name, KeyType: nftables.TypeIPAddr}
	switch {
	case s.Concat && s.IPv6:
		set.KeyType, set.Concatenation = nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeInetService), true
	case s.Concat:
		set.KeyType, set.Concatenation = nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetService), true
	case s.IPv6:
		set.KeyType = nftables.TypeIP6Addr
	}
	set.HasTimeout = s.Timeout > 0
	elems := make([]nftables.SetElement, 0, len(s.Elements)+len(s.Pairs))
	for _, ip := range s.Elements {
		elems = append(elems, nftables.SetElement{Key: ip.AsSlice()})
	}
	for _, p := range s.Pairs {
		elems = append(elems, nftables.SetElement{Key: pairKey(p), Timeout: s.Timeout})
	}
	return set, elems
}

// pairKey is an `ipv4_addr . inet_service` or `ipv6_addr . inet_service` element's key: each field padded to
// a multiple of 4 bytes, the port big endian.
func pairKey(p netip.AddrPort) []byte {
	return append(p.Addr().AsSlice(), byte(p.Port()>>8), byte(p.Port()), 0, 0)
}

// PairOf reads an element key of a concatenated set ([Set.Concat]) back, of either family.
func PairOf(key []byte) (netip.AddrPort, bool) {
	if len(key) != 4+4 && len(key) != 16+4 {
		return netip.AddrPort{}, false
	}
	n := len(key) - 4
	ip, _ := netip.AddrFromSlice(key[:n])
	return netip.AddrPortFrom(ip, uint16(key[n])<<8|uint16(key[n+1])), true
}

// Encode is c as a chain of table t, without its rules ([Chain.EncodeRules]).
func (c Chain[R]) Encode(t *nftables.Table) *nftables.Chain {
	if c.Hook == "" {
		return &nftables.Chain{Name: c.Name, Table: t}
	}
	hook := map[Hook]*nftables.ChainHook{
		HookPrerouting:  nftables.ChainHookPrerouting,
		HookInput:       nftables.ChainHookInput,
		HookOutput:      nftables.ChainHookOutput,
		HookPostrouting: nftables.ChainHookPostrouting,
	}[c.Hook]
	accept := nftables.ChainPolicyAccept
	return &nftables.Chain{
		Name:     c.Name,
		Table:    t,
		Type:     nftables.ChainType(c.chainType()),
		Hooknum:  hook,
		Priority: nftables.ChainPriorityRef(nftables.ChainPriority(c.Priority)),
		Policy:   &accept,
	}
}

// EncodeRules are c's rules as rules of chain, the chain the library queued for c ([Chain.Encode]) in table t.
func (c Chain[R]) EncodeRules(t *nftables.Table, chain *nftables.Chain) []*nftables.Rule {
	out := make([]*nftables.Rule, len(c.Rules))
	for i, r := range c.Rules {
		out[i] = &nftables.Rule{Table: t, Chain: chain, Exprs: r.exprs(), UserData: r.userData()}
	}
	return out
}
