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

// addChain queues c and its rules into table t, and says how many rules.
func addChain[R tableRule](ops nftOps, t *nftables.Table, c Chain[R]) int {
	chain := ops.AddChain(nftChain(t, c))
	for _, r := range c.Rules {
		ops.AddRule(&nftables.Rule{Table: t, Chain: chain, Exprs: r.exprs(), UserData: r.userData()})
	}
	return len(c.Rules)
}

// tableNamed, nftSet and nftChain are the google/nftables objects for an instance's table and our names.
func tableNamed(name string) *nftables.Table {
	return &nftables.Table{Name: name, Family: nftables.TableFamilyINet}
}

func nftSet(t *nftables.Table, s Set) (*nftables.Set, []nftables.SetElement) {
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

// pairOf reads an element key pairKey wrote, of either family.
func pairOf(key []byte) (netip.AddrPort, bool) {
	if len(key) != 4+4 && len(key) != 16+4 {
		return netip.AddrPort{}, false
	}
	n := len(key) - 4
	ip, _ := netip.AddrFromSlice(key[:n])
	return netip.AddrPortFrom(ip, uint16(key[n])<<8|uint16(key[n+1])), true
}

func nftChain[R tableRule](t *nftables.Table, c Chain[R]) *nftables.Chain {
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
