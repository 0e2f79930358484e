package nft

import (
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
)

// Header offsets of the fields our rules match.
const (
	ip4SaddrOffset = 12
	ip4DaddrOffset = 16
	ip4CsumOffset  = 10
	ip6SaddrOffset = 8
	ip6DaddrOffset = 24
	sportOffset    = 0
	dportOffset    = 2
)

// exprs is the bytecode of r, the same nft itself generates for r.String() (compare `nft --debug=netlink`):
// the nfproto and l4proto checks are the dependencies nft adds for `ip daddr` and `tcp dport` in an inet
// table, which is what lets `nft list` print the rule back in its short form.
func (r Rule) exprs() []expr.Any {
	nfproto, set, addrLen := byte(unix.NFPROTO_IPV4), r.set(), uint32(4)
	addrOff := uint32(ip4DaddrOffset)
	if r.Dir == DirFrom {
		addrOff = ip4SaddrOffset
	}
	if r.IPv6 {
		nfproto, addrLen = unix.NFPROTO_IPV6, 16
		addrOff = ip6DaddrOffset
		if r.Dir == DirFrom {
			addrOff = ip6SaddrOffset
		}
	}
	l4proto := byte(unix.IPPROTO_TCP)
	if r.Proto == ProtoUDP {
		l4proto = unix.IPPROTO_UDP
	}
	portOff := uint32(dportOffset)
	if r.Dir == DirFrom {
		portOff = sportOffset
	}
	verdict := []expr.Any{&expr.Notrack{}}
	switch r.Verdict {
	case VerdictAccept:
		verdict = []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}
	case VerdictReturn:
		verdict = []expr.Any{&expr.Verdict{Kind: expr.VerdictReturn}}
	}
	out := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{nfproto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: addrOff, Len: addrLen},
		&expr.Lookup{SourceRegister: 1, SetName: set},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{l4proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: portOff, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(r.Port)},
	}
	out = append(out, gateExprs(r.Gate)...)
	return append(append(out, &expr.Counter{}), verdict...)
}

// gateExprs is a rule's socket gate (see [Gate]): `socket wildcard 0` / `socket transparent 0`, none for
// GateNone. Both keys load one byte (nft's boolean). The capability probe sends the same (capability.go).
func gateExprs(g Gate) []expr.Any {
	if g == GateNone {
		return nil
	}
	key := expr.SocketKeyWildcard
	if g == GateTransparent {
		key = expr.SocketKeyTransparent
	}
	return []expr.Any{&expr.Socket{Key: key, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0}}}
}

// userData is the rule's comment in the TLV format nft reads.
func (r Rule) userData() []byte { return userdata.AppendString(nil, userdata.TypeComment, r.Comment) }

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

func nftChain(t *nftables.Table, c Chain) *nftables.Chain {
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
		Type:     nftables.ChainTypeFilter,
		Hooknum:  hook,
		Priority: nftables.ChainPriorityRef(nftables.ChainPriority(c.Priority)),
		Policy:   &accept,
	}
}
