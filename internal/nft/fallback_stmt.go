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

// The mark field (see fallback.go): bits 4-6 of the packet and connection mark. Values 1..6 name a covered
// address; markTaken (all three bits) says an instance takes the packet (see [VerdictMarkTaken]).
const (
	fallbackMarkMask  = 0x70
	fallbackMarkShift = 4
	markTaken         = fallbackMarkMask
)

// nft's rendering of ct states and directions, and the kernel's values.
const (
	ctOriginal = 0 // IP_CT_DIR_ORIGINAL
	ctReply    = 1 // IP_CT_DIR_REPLY
)

const reg = 1 // NFT_REG_1, the register every statement uses in turn

func u32(v uint32) []byte { return binaryutil.NativeEndian.PutUint32(v) }

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

// matchAddr is `ip daddr 169.254.20.10` (DirTo) or `ip saddr ...` (DirFrom).
func matchAddr(dir Dir, ip netip.Addr) stmt {
	name, nfproto := l3(ip)
	return stmt{fmt.Sprintf("%s %s %s", name, dirWord(dir), ip), []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: reg},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: []byte{nfproto}},
		&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: addrOffset(dir, ip), Len: uint32(ip.BitLen() / 8)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: ip.AsSlice()},
	}}
}

// setAddr is `ip daddr set 10.96.0.11`: a stateless rewrite, with the IPv4 header checksum and the
// transport checksum's pseudo-header updated (csum_flags NFT_PAYLOAD_L4CSUM_PSEUDOHDR).
func setAddr(dir Dir, ip netip.Addr) stmt {
	name, _ := l3(ip)
	p := &expr.Payload{OperationType: expr.PayloadWrite, SourceRegister: reg, Base: expr.PayloadBaseNetworkHeader,
		Offset: addrOffset(dir, ip), Len: uint32(ip.BitLen() / 8), CsumFlags: unix.NFT_PAYLOAD_L4CSUM_PSEUDOHDR}
	if ip.Is4() {
		p.CsumType, p.CsumOffset = expr.CsumTypeInet, 10 // the IPv4 header checksum
	}
	return stmt{fmt.Sprintf("%s %s set %s", name, dirWord(dir), ip), []expr.Any{
		&expr.Immediate{Register: reg, Data: ip.AsSlice()}, p,
	}}
}

// matchPort is `udp dport 53`.
func matchPort(p Proto, dir Dir, port uint16) stmt {
	l4proto, off, word := byte(unix.IPPROTO_UDP), uint32(dportOffset), "dport"
	if p == ProtoTCP {
		l4proto = unix.IPPROTO_TCP
	}
	if dir == DirFrom {
		off, word = sportOffset, "sport"
	}
	return stmt{fmt.Sprintf("%s %s %d", p, word, port), []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: []byte{l4proto}},
		&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseTransportHeader, Offset: off, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: binaryutil.BigEndian.PutUint16(port)},
	}}
}

func counter() stmt { return stmt{"counter", []expr.Any{&expr.Counter{}}} }

// notAlive is `meta mark & 0x00000070 != 0x00000070`: no live instance's table marked the packet.
func notTaken() stmt {
	return stmt{fmt.Sprintf("meta mark & 0x%08x != 0x%08x", fallbackMarkMask, markTaken), []expr.Any{
		metaMarkLoad(),
		&expr.Bitwise{SourceRegister: reg, DestRegister: reg, Len: 4, Mask: u32(fallbackMarkMask), Xor: u32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg, Data: u32(markTaken)},
	}}
}

// ctDirection is `ct direction original|reply`.
func ctDirection(d uint8) stmt {
	word := map[uint8]string{ctOriginal: "original", ctReply: "reply"}[d]
	return stmt{"ct direction " + word, []expr.Any{
		&expr.Ct{Key: expr.CtKeyDIRECTION, Register: reg},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: []byte{d}},
	}}
}

// maskedEq is `<key> & 0x00000070 == <v>` on a 32-bit mark loaded by load.
func maskedEq(name string, load expr.Any, v uint32) stmt {
	return stmt{fmt.Sprintf("%s & 0x%08x == 0x%08x", name, fallbackMarkMask, v), []expr.Any{
		load,
		&expr.Bitwise{SourceRegister: reg, DestRegister: reg, Len: 4, Mask: u32(fallbackMarkMask), Xor: u32(0)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: u32(v)},
	}}
}

// maskedSet is `<key> set <key> & ^mask | v`, which nft prints with the mask or'ed with v (and without it
// when that is all ones).
func maskedSet(name string, load, store expr.Any, v uint32) stmt {
	text := fmt.Sprintf("%[1]s set %[1]s & 0x%08[2]x | 0x%08[3]x", name, uint32(^uint32(fallbackMarkMask)|v), v)
	switch {
	case ^uint32(fallbackMarkMask)|v == 0xffffffff:
		text = fmt.Sprintf("%[1]s set %[1]s | 0x%08[2]x", name, v)
	case v == 0:
		text = fmt.Sprintf("%[1]s set %[1]s & 0x%08[2]x", name, uint32(^uint32(fallbackMarkMask)))
	}
	return stmt{text, []expr.Any{
		load,
		&expr.Bitwise{SourceRegister: reg, DestRegister: reg, Len: 4, Mask: u32(^uint32(fallbackMarkMask)), Xor: u32(v)},
		store,
	}}
}

func metaMarkLoad() expr.Any { return &expr.Meta{Key: expr.MetaKeyMARK, Register: reg} }
func metaMarkStore() expr.Any {
	return &expr.Meta{Key: expr.MetaKeyMARK, Register: reg, SourceRegister: true}
}
func ctMarkLoad() expr.Any { return &expr.Ct{Key: expr.CtKeyMARK, Register: reg} }
func ctMarkStore() expr.Any {
	return &expr.Ct{Key: expr.CtKeyMARK, Register: reg, SourceRegister: true}
}

func matchMarkField(v uint32) stmt   { return maskedEq("meta mark", metaMarkLoad(), v) }
func matchCtMarkField(v uint32) stmt { return maskedEq("ct mark", ctMarkLoad(), v) }
func setMarkField(v uint32) stmt     { return maskedSet("meta mark", metaMarkLoad(), metaMarkStore(), v) }
func setCtMarkField(v uint32) stmt   { return maskedSet("ct mark", ctMarkLoad(), ctMarkStore(), v) }
func clearMarkField() stmt           { return maskedSet("meta mark", metaMarkLoad(), metaMarkStore(), 0) }

func masquerade() stmt { return stmt{"masquerade", []expr.Any{&expr.Masq{}}} }

// exprs is the rule's bytecode.
func (r FallbackRule) exprs() []expr.Any {
	var out []expr.Any
	for _, s := range r {
		out = append(out, s.exprs...)
	}
	return out
}
