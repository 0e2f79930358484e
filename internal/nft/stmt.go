package nft

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// stmt is one statement of a rule, of our tables or the fallback's: how nft lists it and the bytecode nft
// generates for it (compare `nft --debug=netlink`), each with the dependencies nft adds in an inet table
// (`meta nfproto` before an address, `meta l4proto` before a port), so that `nft list` prints the rule back in
// its short form. One value gives both, so the text a golden file pins is the bytecode the kernel gets.
type stmt struct {
	text  string
	exprs []expr.Any
}

// stmtsText and stmtsExprs are a rule's text and bytecode from its statements.
func stmtsText(ss []stmt) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = s.text
	}
	return strings.Join(parts, " ")
}

func stmtsExprs(ss []stmt) []expr.Any {
	var out []expr.Any
	for _, s := range ss {
		out = append(out, s.exprs...)
	}
	return out
}

// Header offsets of the fields our rules match: every statement and every reader of rule bytecode takes them
// from AddrOffset and PortOffset (nft/foreign's readers too).
const (
	ip4SaddrOffset = 12
	ip4DaddrOffset = 16
	ip4CsumOffset  = 10
	ip6SaddrOffset = 8
	ip6DaddrOffset = 24
	sportOffset    = 0
	dportOffset    = 2
)

// nft's rendering of ct directions, and the kernel's values.
const (
	ctOriginal = 0 // IP_CT_DIR_ORIGINAL
	ctReply    = 1 // IP_CT_DIR_REPLY
)

const (
	stmtReg = 1 // NFT_REG_1, the register every statement uses in turn
	// regPort4 is where a concatenation's second field goes after an IPv4 address in stmtReg: the next 32-bit
	// register (NFT_REG32_01), as nft lays out `ip daddr . udp dport`.
	regPort4 = 9
	// regPort6 is the same after an IPv6 address, which fills stmtReg: NFT_REG_2, as nft lays out
	// `ip6 daddr . udp dport`.
	regPort6 = 2
)

// l3 is the family of ip as nft names it in a rule, and its NFPROTO.
func l3(ip netip.Addr) (name string, nfproto byte) { return l3Of(ip.Is6()) }

func l3Of(v6 bool) (name string, nfproto byte) {
	if v6 {
		return "ip6", unix.NFPROTO_IPV6
	}
	return "ip", unix.NFPROTO_IPV4
}

// AddrOffset is where the destination (DirTo) or source address sits in the IPv4 or IPv6 header, and its length.
func AddrOffset(dir Dir, v6 bool) (offset, length uint32) {
	switch {
	case !v6 && dir == DirTo:
		return ip4DaddrOffset, 4
	case !v6:
		return ip4SaddrOffset, 4
	case dir == DirTo:
		return ip6DaddrOffset, 16
	}
	return ip6SaddrOffset, 16
}

// PortOffset is where the destination (DirTo) or source port sits in a TCP or UDP header (2 bytes).
func PortOffset(dir Dir) uint32 {
	if dir == DirTo {
		return dportOffset
	}
	return sportOffset
}

func dirWord(dir Dir) string {
	if dir == DirTo {
		return "daddr"
	}
	return "saddr"
}

func portWord(dir Dir) (string, uint32) {
	if dir == DirTo {
		return "dport", PortOffset(dir)
	}
	return "sport", PortOffset(dir)
}

func l4(p Proto) byte {
	if p == ProtoTCP {
		return unix.IPPROTO_TCP
	}
	return unix.IPPROTO_UDP
}

// matchAddr is `ip saddr 10.96.0.10` (DirFrom) or `ip daddr ...` (DirTo).
func matchAddr(dir Dir, ip netip.Addr) stmt {
	name, _ := l3(ip)
	return stmt{fmt.Sprintf("%s %s %s", name, dirWord(dir), ip), append(loadAddr(dir, ip.Is6()),
		&expr.Cmp{Op: expr.CmpOpEq, Register: stmtReg, Data: ip.AsSlice()})}
}

// inSet is `ip daddr @local4` (DirTo) or `ip6 saddr @local6` (DirFrom, IPv6): the address looked up in set.
func inSet(dir Dir, v6 bool, set string) stmt {
	name, _ := l3Of(v6)
	return stmt{fmt.Sprintf("%s %s @%s", name, dirWord(dir), set), append(loadAddr(dir, v6),
		&expr.Lookup{SourceRegister: stmtReg, SetName: set})}
}

// loadAddr loads the address on side dir into reg, after checking the family.
func loadAddr(dir Dir, v6 bool) []expr.Any {
	_, nfproto := l3Of(v6)
	off, n := AddrOffset(dir, v6)
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: stmtReg},
		&expr.Cmp{Op: expr.CmpOpEq, Register: stmtReg, Data: []byte{nfproto}},
		&expr.Payload{DestRegister: stmtReg, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n},
	}
}

// socketGate is `socket wildcard 0` / `socket transparent 0` (see [Gate]); both keys load one byte (nft's
// boolean). The capability probe sends the same ([GateExprs]).
func socketGate(g Gate) stmt {
	key := expr.SocketKeyWildcard
	if g == GateTransparent {
		key = expr.SocketKeyTransparent
	}
	return stmt{"socket " + string(g) + " 0", []expr.Any{&expr.Socket{Key: key, Register: stmtReg}, &expr.Cmp{Op: expr.CmpOpEq, Register: stmtReg, Data: []byte{0}}}}
}

// GateExprs is the bytecode of gate g as our rules carry it: what preflight's capability probe asks the kernel
// to accept.
func GateExprs(g Gate) []expr.Any { return socketGate(g).exprs }

// verdict is `notrack`, `accept` or `return`.
func verdict(v Verdict) stmt {
	switch v {
	case VerdictAccept:
		return stmt{string(v), []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}}
	case VerdictReturn:
		return stmt{string(v), []expr.Any{&expr.Verdict{Kind: expr.VerdictReturn}}}
	}
	return stmt{string(VerdictNotrack), []expr.Any{&expr.Notrack{}}}
}

// matchPort is `udp sport 53` (DirFrom) or `udp dport 53` (DirTo).
func matchPort(p Proto, dir Dir, port uint16) stmt {
	word, off := portWord(dir)
	return stmt{fmt.Sprintf("%s %s %d", p, word, port), []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: stmtReg},
		&expr.Cmp{Op: expr.CmpOpEq, Register: stmtReg, Data: []byte{l4(p)}},
		&expr.Payload{DestRegister: stmtReg, Base: expr.PayloadBaseTransportHeader, Offset: off, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: stmtReg, Data: binaryutil.BigEndian.PutUint16(port)},
	}}
}

// inPairs is `ip daddr . udp dport @covered4` (`ip6 daddr . udp dport @covered6` for an IPv6 family): the
// packet's address on side addr and its port on side port, looked up together in an `ipv4_addr .
// inet_service` (`ipv6_addr . inet_service`) set.
func inPairs(family netip.Addr, addr, port Dir, p Proto, set string) stmt {
	name, nfproto := l3(family)
	pw, off := portWord(port)
	addrOff, addrLen := AddrOffset(addr, family.Is6())
	regPort := uint32(regPort4)
	if family.Is6() {
		regPort = regPort6
	}
	return stmt{fmt.Sprintf("%s %s . %s %s @%s", name, dirWord(addr), p, pw, set), []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: stmtReg},
		&expr.Cmp{Op: expr.CmpOpEq, Register: stmtReg, Data: []byte{nfproto}},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: stmtReg},
		&expr.Cmp{Op: expr.CmpOpEq, Register: stmtReg, Data: []byte{l4(p)}},
		&expr.Payload{DestRegister: stmtReg, Base: expr.PayloadBaseNetworkHeader, Offset: addrOff, Len: addrLen},
		&expr.Payload{DestRegister: regPort, Base: expr.PayloadBaseTransportHeader, Offset: off, Len: 2},
		&expr.Lookup{SourceRegister: stmtReg, SetName: set},
	}}
}

// tracked is `ct state != untracked`: no notrack before conntrack took the packet, so nothing listening here
// claimed it (an instance's gated notrack, node-cache's NOTRACK).
func tracked() stmt {
	return stmt{"ct state != untracked", []expr.Any{
		&expr.Ct{Key: expr.CtKeySTATE, Register: stmtReg},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: stmtReg, Data: binaryutil.NativeEndian.PutUint32(expr.CtStateBitUNTRACKED)},
	}}
}

// setAddr is `ip daddr set 10.96.0.10` (or `ip6 daddr set fd00::a`): a stateless rewrite, with the transport
// checksum's pseudo-header updated (csum_flags NFT_PAYLOAD_L4CSUM_PSEUDOHDR) and, for IPv4, the header checksum.
func setAddr(dir Dir, ip netip.Addr) stmt {
	name, _ := l3(ip)
	return stmt{fmt.Sprintf("%s %s set %s", name, dirWord(dir), ip), []expr.Any{
		&expr.Immediate{Register: stmtReg, Data: ip.AsSlice()}, writeAddr(dir, ip),
	}}
}

// RewriteExprs is the bytecode of the fallback's address rewrite towards ip on side dir (`ip6 daddr set
// fd00::a`): what preflight's capability probe asks the kernel to accept.
func RewriteExprs(dir Dir, ip netip.Addr) []expr.Any { return setAddr(dir, ip).exprs }

// setAddrToOriginal is `ip saddr set ct original ip daddr` (`ip6 ...` for an IPv6 family): the reply's source
// becomes the address its client sent the query to, whatever rewrote it since. In an inet table the kernel
// loads the whole 16-byte address field of the tuple (NFT_CT_DST), whose first 4 bytes are an IPv4 address, as
// nft itself generates it.
func setAddrToOriginal(family netip.Addr) stmt {
	name, _ := l3(family)
	return stmt{fmt.Sprintf("%s saddr set ct original %s daddr", name, name), []expr.Any{
		&expr.Ct{Key: expr.CtKeyDST, Direction: ctOriginal, Register: stmtReg}, writeAddr(DirFrom, family),
	}}
}

// writeAddr writes stmtReg over the address on side dir of family's header, fixing the checksums it is part of.
//
// IPv4: the header checksum is the L3 checksum (csum_type inet at offset 10), the transport checksum's
// pseudo-header the csum_flags. IPv6 has no header checksum, only the pseudo-header to fix: nft sends
// csum_type none with the flag, which google/nftables v0.3.0 cannot encode (it sends the flags only with an L3
// checksum type). So the IPv6 write names an L3 checksum inside the address it writes (csum_offset = offset):
// the kernel (nft_payload_set_eval) fixes those 2 bytes, then overwrites them with the address. The packet
// gets exactly nft's rewrite, the pseudo-header fix included, at the cost of a 2-byte store;
// TestIPv6RewriteEncoding reads the kernel's copy back and TestFallbackTrafficIPv6 checks real packets'
// checksums, with transmit checksum offload on and off.
func writeAddr(dir Dir, family netip.Addr) *expr.Payload {
	off, n := AddrOffset(dir, family.Is6())
	p := &expr.Payload{OperationType: expr.PayloadWrite, SourceRegister: stmtReg, Base: expr.PayloadBaseNetworkHeader,
		Offset: off, Len: n, CsumType: expr.CsumTypeInet, CsumOffset: ip4CsumOffset,
		CsumFlags: unix.NFT_PAYLOAD_L4CSUM_PSEUDOHDR}
	if family.Is6() {
		p.CsumOffset = off
	}
	return p
}

func counter() stmt { return stmt{"counter", []expr.Any{&expr.Counter{}}} }

// ctDirection is `ct direction original|reply`.
func ctDirection(d uint8) stmt {
	word := map[uint8]string{ctOriginal: "original", ctReply: "reply"}[d]
	return stmt{"ct direction " + word, []expr.Any{
		&expr.Ct{Key: expr.CtKeyDIRECTION, Register: stmtReg},
		&expr.Cmp{Op: expr.CmpOpEq, Register: stmtReg, Data: []byte{d}},
	}}
}

func masquerade() stmt { return stmt{"masquerade", []expr.Any{&expr.Masq{}}} }
