package nft

import (
	"fmt"
	"net/netip"

	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// stmt is one statement of a fallback rule: how nft lists it and the bytecode nft generates for it (compare
// `nft --debug=netlink`), each with the dependencies nft adds in an inet table (`meta nfproto` before an
// address, `meta l4proto` before a port), so that `nft list` prints the rule back in its short form.
type stmt struct {
	text  string
	exprs []expr.Any
}

// nft's rendering of ct directions, and the kernel's values.
const (
	ctOriginal = 0 // IP_CT_DIR_ORIGINAL
	ctReply    = 1 // IP_CT_DIR_REPLY
)

const (
	reg = 1 // NFT_REG_1, the register every statement uses in turn
	// regPort4 is where a concatenation's second field goes after an IPv4 address in reg: the next 32-bit
	// register (NFT_REG32_01), as nft lays out `ip daddr . udp dport`.
	regPort4 = 9
	// regPort6 is the same after an IPv6 address, which fills reg: NFT_REG_2, as nft lays out
	// `ip6 daddr . udp dport`.
	regPort6 = 2
)

func l3(ip netip.Addr) (name string, nfproto byte) {
	if ip.Is4() {
		return "ip", unix.NFPROTO_IPV4
	}
	return "ip6", unix.NFPROTO_IPV6
}

// addrOffset is where the source or destination address sits in ip's header.
func addrOffset(dir Dir, ip netip.Addr) uint32 {
	switch {
	case ip.Is4() && dir == DirTo:
		return ip4DaddrOffset
	case ip.Is4():
		return ip4SaddrOffset
	case dir == DirTo:
		return ip6DaddrOffset
	}
	return ip6SaddrOffset
}

func dirWord(dir Dir) string {
	if dir == DirTo {
		return "daddr"
	}
	return "saddr"
}

func portWord(dir Dir) (string, uint32) {
	if dir == DirTo {
		return "dport", dportOffset
	}
	return "sport", sportOffset
}

func l4(p Proto) byte {
	if p == ProtoTCP {
		return unix.IPPROTO_TCP
	}
	return unix.IPPROTO_UDP
}

// matchAddr is `ip saddr 10.96.0.10` (DirFrom) or `ip daddr ...` (DirTo).
func matchAddr(dir Dir, ip netip.Addr) stmt {
	name, nfproto := l3(ip)
	return stmt{fmt.Sprintf("%s %s %s", name, dirWord(dir), ip), []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: reg},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: []byte{nfproto}},
		&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: addrOffset(dir, ip), Len: uint32(ip.BitLen() / 8)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: ip.AsSlice()},
	}}
}

// matchPort is `udp sport 53` (DirFrom) or `udp dport 53` (DirTo).
func matchPort(p Proto, dir Dir, port uint16) stmt {
	word, off := portWord(dir)
	return stmt{fmt.Sprintf("%s %s %d", p, word, port), []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: []byte{l4(p)}},
		&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseTransportHeader, Offset: off, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: binaryutil.BigEndian.PutUint16(port)},
	}}
}

// inPairs is `ip daddr . udp dport @covered4` (`ip6 daddr . udp dport @covered6` for an IPv6 family): the
// packet's address on side addr and its port on side port, looked up together in an `ipv4_addr .
// inet_service` (`ipv6_addr . inet_service`) set.
func inPairs(family netip.Addr, addr, port Dir, p Proto, set string) stmt {
	name, nfproto := l3(family)
	pw, off := portWord(port)
	regPort := uint32(regPort4)
	if family.Is6() {
		regPort = regPort6
	}
	return stmt{fmt.Sprintf("%s %s . %s %s @%s", name, dirWord(addr), p, pw, set), []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: reg},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: []byte{nfproto}},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: []byte{l4(p)}},
		&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: addrOffset(addr, family), Len: uint32(family.BitLen() / 8)},
		&expr.Payload{DestRegister: regPort, Base: expr.PayloadBaseTransportHeader, Offset: off, Len: 2},
		&expr.Lookup{SourceRegister: reg, SetName: set},
	}}
}

// tracked is `ct state != untracked`: no notrack before conntrack took the packet, so nothing listening here
// claimed it (an instance's gated notrack, node-cache's NOTRACK).
func tracked() stmt {
	return stmt{"ct state != untracked", []expr.Any{
		&expr.Ct{Key: expr.CtKeySTATE, Register: reg},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg, Data: binaryutil.NativeEndian.PutUint32(expr.CtStateBitUNTRACKED)},
	}}
}

// setAddr is `ip daddr set 10.96.0.10` (or `ip6 daddr set fd00::a`): a stateless rewrite, with the transport
// checksum's pseudo-header updated (csum_flags NFT_PAYLOAD_L4CSUM_PSEUDOHDR) and, for IPv4, the header checksum.
func setAddr(dir Dir, ip netip.Addr) stmt {
	name, _ := l3(ip)
	return stmt{fmt.Sprintf("%s %s set %s", name, dirWord(dir), ip), []expr.Any{
		&expr.Immediate{Register: reg, Data: ip.AsSlice()}, writeAddr(dir, ip),
	}}
}

// setAddrToOriginal is `ip saddr set ct original ip daddr` (`ip6 ...` for an IPv6 family): the reply's source
// becomes the address its client sent the query to, whatever rewrote it since. In an inet table the kernel
// loads the whole 16-byte address field of the tuple (NFT_CT_DST), whose first 4 bytes are an IPv4 address, as
// nft itself generates it.
func setAddrToOriginal(family netip.Addr) stmt {
	name, _ := l3(family)
	return stmt{fmt.Sprintf("%s saddr set ct original %s daddr", name, name), []expr.Any{
		&expr.Ct{Key: expr.CtKeyDST, Direction: ctOriginal, Register: reg}, writeAddr(DirFrom, family),
	}}
}

// writeAddr writes reg over the address on side dir of family's header, fixing the checksums it is part of.
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
	off := addrOffset(dir, family)
	p := &expr.Payload{OperationType: expr.PayloadWrite, SourceRegister: reg, Base: expr.PayloadBaseNetworkHeader,
		Offset: off, Len: uint32(family.BitLen() / 8), CsumType: expr.CsumTypeInet, CsumOffset: ip4CsumOffset,
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
		&expr.Ct{Key: expr.CtKeyDIRECTION, Register: reg},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: []byte{d}},
	}}
}

func masquerade() stmt { return stmt{"masquerade", []expr.Any{&expr.Masq{}}} }

// exprs is the rule's bytecode.
func (r FallbackRule) exprs() []expr.Any {
	var out []expr.Any
	for _, s := range r {
		out = append(out, s.exprs...)
	}
	return out
}
