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
	// regPort is where a concatenation's second field goes after an IPv4 address in reg: the next 32-bit
	// register (NFT_REG32_01), as nft lays out `ip daddr . udp dport`.
	regPort = 9
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

// inPairs is `ip daddr . udp dport @covered4`: the packet's IPv4 address on side addr and its port on side
// port, looked up together in an `ipv4_addr . inet_service` set.
func inPairs(addr, port Dir, p Proto, set string) stmt {
	pw, off := portWord(port)
	return stmt{fmt.Sprintf("ip %s . %s %s @%s", dirWord(addr), p, pw, set), []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: reg},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: []byte{unix.NFPROTO_IPV4}},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: []byte{l4(p)}},
		&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: addrOffset(addr, netip.IPv4Unspecified()), Len: 4},
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

// setAddr is `ip daddr set 10.96.0.10`: a stateless rewrite, with the IPv4 header checksum and the
// transport checksum's pseudo-header updated (csum_flags NFT_PAYLOAD_L4CSUM_PSEUDOHDR).
func setAddr(dir Dir, ip netip.Addr) stmt {
	name, _ := l3(ip)
	return stmt{fmt.Sprintf("%s %s set %s", name, dirWord(dir), ip), []expr.Any{
		&expr.Immediate{Register: reg, Data: ip.AsSlice()}, writeAddr(dir),
	}}
}

// setAddrToOriginal is `ip saddr set ct original ip daddr`: the reply's source becomes the address its client
// sent the query to, whatever rewrote it since. In an inet table the kernel loads the whole 16-byte address
// field of the tuple (NFT_CT_DST), whose first 4 bytes are the IPv4 address, as nft itself generates it.
func setAddrToOriginal() stmt {
	return stmt{"ip saddr set ct original ip daddr", []expr.Any{
		&expr.Ct{Key: expr.CtKeyDST, Direction: ctOriginal, Register: reg}, writeAddr(DirFrom),
	}}
}

func writeAddr(dir Dir) *expr.Payload {
	return &expr.Payload{OperationType: expr.PayloadWrite, SourceRegister: reg, Base: expr.PayloadBaseNetworkHeader,
		Offset: addrOffset(dir, netip.IPv4Unspecified()), Len: 4, CsumType: expr.CsumTypeInet, CsumOffset: 10, // the IPv4 header checksum
		CsumFlags: unix.NFT_PAYLOAD_L4CSUM_PSEUDOHDR}
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
