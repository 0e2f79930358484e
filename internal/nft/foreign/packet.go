package foreign

import (
	"bytes"
	"encoding/binary"
	"net/netip"

	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
	"golang.org/x/sys/unix"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
)

// A packet is one of ours, as a foreign base chain sees it, and match says what one rule does with it.
// Only what the packet certainly holds counts: a condition on something it does not know (the client's address,
// a set, an xt match we do not read, a mark) makes the rule "maybe", and a maybe never proves a drop. So the
// step-aside decision (cover.go) errs towards "not covered", which keeps today's behaviour, never
// towards turning the cache off.

// packet is a pod's query to one of our addresses (addr is the destination, port the destination port), or,
// with reply set, our reply to it (addr the source, port the source port). Its packets are untracked (our
// notrack), and they come from or go to a pod's interface, never loopback.
//
// With anyAddr, it is any DNS packet of addr's family to or from port: the address and the interface are not
// known (the foreign-drop report, [Chain.Drop], which is about every client, host-network ones on
// loopback included).
type packet struct {
	addr    netip.Addr
	proto   byte // unix.IPPROTO_UDP or unix.IPPROTO_TCP
	port    uint16
	reply   bool
	anyAddr bool
}

// tri is a three-valued match.
type tri int8

const (
	no tri = iota
	maybe
	yes
)

func and(a, b tri) tri { return min(a, b) }

// verdictKind is how a rule ends for the packets it matches; match also says which statement ends it
// ("drop", "reject", "xt REJECT"), for the report.
type verdictKind int8

const (
	verdictNone    verdictKind = iota // no terminal statement: the next rule runs
	verdictAccept                     // accept: ends this base chain (not the hook)
	verdictDrop                       // drop or reject
	verdictReturn                     // return: the base chain's policy applies
	verdictUnknown                    // jump, goto, queue, an xt target we do not know: not followed
)

// value is what a register holds for the packet: known bytes, or unknown; notLo marks an interface name or
// index known to be other than loopback's; peer marks the client's port of an anyAddr packet, an ephemeral
// port known only to differ from every port but (maybe) data, the DNS port.
type value struct {
	known bool
	data  []byte
	notLo bool
	peer  bool
}

// nonTerminalTargets are xt targets that let the packet go on to the next rule.
var nonTerminalTargets = map[string]bool{
	"LOG": true, "NFLOG": true, "MARK": true, "CONNMARK": true, "CT": true, "NOTRACK": true, "TRACE": true,
	"CLASSIFY": true, "AUDIT": true, "TCPMSS": true, "TOS": true, "DSCP": true, "CHECKSUM": true,
}

// match evaluates a rule's expressions for p, in order, the way the kernel does: a failed comparison ends
// the rule without effect.
func (p packet) match(exprs []expr.Any) (m tri, v verdictKind, word string) {
	regs := map[uint32]value{}
	m, v = yes, verdictNone
	for _, e := range exprs {
		switch e := e.(type) {
		case *expr.Meta:
			if e.SourceRegister {
				continue // meta set: no condition
			}
			regs[e.Register] = p.meta(e.Key)
		case *expr.Payload:
			if e.OperationType != expr.PayloadLoad {
				continue
			}
			regs[e.DestRegister] = p.payload(e.Base, e.Offset, e.Len)
		case *expr.Ct:
			if e.SourceRegister {
				continue
			}
			if e.Key != expr.CtKeySTATE {
				return no, verdictNone, "" // an untracked packet has no connection: the expression breaks
			}
			regs[e.Register] = value{known: true, data: binary.NativeEndian.AppendUint32(nil, ctStateUntracked)}
		case *expr.Bitwise:
			in := regs[e.SourceRegister]
			regs[e.DestRegister] = bitwise(in, e.Mask, e.Xor)
		case *expr.Cmp:
			m = and(m, compare(regs[e.Register], e.Op, e.Data))
		case *expr.Range:
			m = and(m, inRange(regs[e.Register], e.Op, e.FromData, e.ToData))
		case *expr.Match:
			m = and(m, p.xtMatch(e))
		case *expr.Counter, *expr.Log, *expr.Objref, *expr.Notrack:
		case *expr.Verdict:
			v, word = verdictOf(e.Kind), "drop" // read only when v is verdictDrop
		case *expr.Reject:
			v, word = verdictDrop, "reject"
		case *expr.Target:
			switch {
			case e.Name == "REJECT" || e.Name == "DROP":
				v, word = verdictDrop, "xt "+e.Name
			case e.Name == "ACCEPT":
				v = verdictAccept
			case !nonTerminalTargets[e.Name]:
				v = verdictUnknown
			}
		case *expr.Immediate:
			if e.Register == 0 {
				return maybe, verdictUnknown, "" // a verdict we do not decode
			}
			regs[e.Register] = value{known: true, data: e.Data}
		default:
			m = and(m, maybe) // lookups, limits, quotas, anything else: cannot say
		}
		if m == no {
			return no, verdictNone, ""
		}
	}
	return m, v, word
}

// ctStateUntracked is NF_CT_STATE_UNTRACKED_BIT, what `ct state` loads for an untracked packet.
const ctStateUntracked = 1 << 6

func otherDir(d nft.Dir) nft.Dir {
	if d == nft.DirTo {
		return nft.DirFrom
	}
	return nft.DirTo
}

func verdictOf(k expr.VerdictKind) verdictKind {
	switch k {
	case expr.VerdictAccept:
		return verdictAccept
	case expr.VerdictDrop:
		return verdictDrop
	case expr.VerdictReturn:
		return verdictReturn
	case expr.VerdictContinue:
		return verdictNone
	}
	return verdictUnknown
}

func (p packet) meta(key expr.MetaKey) value {
	nfproto := byte(unix.NFPROTO_IPV4)
	if p.addr.Is6() {
		nfproto = unix.NFPROTO_IPV6
	}
	switch key {
	case expr.MetaKeyNFPROTO:
		return value{known: true, data: []byte{nfproto}}
	case expr.MetaKeyL4PROTO, expr.MetaKeyPROTOCOL:
		if key == expr.MetaKeyPROTOCOL {
			return value{} // the ethertype
		}
		return value{known: true, data: []byte{p.proto}}
	case expr.MetaKeyIIFNAME, expr.MetaKeyOIFNAME, expr.MetaKeyIIF, expr.MetaKeyOIF:
		return value{notLo: !p.anyAddr}
	}
	return value{}
}

func (p packet) payload(base expr.PayloadBase, off, n uint32) value {
	dir, v4 := nft.DirTo, p.addr.Is4()
	if p.reply {
		dir = nft.DirFrom
	}
	addrOff, addrLen := nft.AddrOffset(dir, !v4)
	portOff := nft.PortOffset(dir)
	switch {
	case base == expr.PayloadBaseNetworkHeader && p.anyAddr && off < addrOff+addrLen && addrOff < off+n:
		return value{}
	case base == expr.PayloadBaseNetworkHeader && off >= addrOff && off+n <= addrOff+addrLen:
		// nft loads only the bytes a byte-aligned prefix needs (`ip daddr 169.254.0.0/16`: 2 bytes at 16).
		return value{known: true, data: p.addr.AsSlice()[off-addrOff : off-addrOff+n]}
	case base == expr.PayloadBaseNetworkHeader && n == 1 && ((v4 && off == 9) || (!v4 && off == 6)):
		return value{known: true, data: []byte{p.proto}} // ip protocol, ip6 nexthdr
	case base == expr.PayloadBaseTransportHeader && off == portOff && n == 2:
		return value{known: true, data: binary.BigEndian.AppendUint16(nil, p.port)}
	case base == expr.PayloadBaseTransportHeader && p.anyAddr && off == nft.PortOffset(otherDir(dir)) && n == 2:
		return value{peer: true, data: binary.BigEndian.AppendUint16(nil, p.port)}
	}
	return value{}
}

// xtMatch evaluates the xt matches iptables-nft writes that we can read for p: a comment (no condition) and
// conntrack's state (the packet is untracked: xt_conntrack's conntrack_mt).
func (p packet) xtMatch(m *expr.Match) tri {
	switch info := m.Info.(type) {
	case *xt.Comment:
		return yes
	case *xt.ConntrackMtinfo3:
		return conntrackState(info.MatchFlags, info.InvertFlags, info.StateMask)
	case *xt.ConntrackMtinfo2:
		return conntrackState(info.MatchFlags, info.InvertFlags, info.StateMask)
	case *xt.ConntrackMtinfo1:
		return conntrackState(info.MatchFlags, info.InvertFlags, uint16(info.StateMask))
	}
	return maybe
}

// conntrackState is conntrack_mt for an untracked packet: the state test alone decides, and without one the
// match fails (there is no connection for the other tests to look at).
func conntrackState(flags, invert, mask uint16) tri {
	if flags&uint16(xt.ConntrackState) == 0 {
		return no
	}
	has := mask&xtConntrackStateUntracked != 0
	if invert&uint16(xt.ConntrackState) != 0 {
		has = !has
	}
	if has {
		return yes
	}
	return no
}

func bitwise(in value, mask, xor []byte) value {
	if !in.known || len(mask) != len(in.data) || len(xor) != len(in.data) {
		return value{}
	}
	out := make([]byte, len(in.data))
	for i := range out {
		out[i] = in.data[i]&mask[i] ^ xor[i]
	}
	return value{known: true, data: out}
}

// isLo says whether data names loopback: "lo" as an interface name (NUL-padded) or index 1.
func isLo(data []byte) bool {
	return bytes.Equal(bytes.TrimRight(data, "\x00"), []byte("lo")) || bytes.Equal(data, binary.NativeEndian.AppendUint32(nil, 1))
}

func compare(v value, op expr.CmpOp, data []byte) tri {
	if v.peer && !bytes.Equal(v.data, data) {
		switch op {
		case expr.CmpOpEq:
			return no
		case expr.CmpOpNeq:
			return yes
		}
	}
	if !v.known {
		if v.notLo && isLo(data) {
			switch op {
			case expr.CmpOpEq:
				return no
			case expr.CmpOpNeq:
				return yes
			}
		}
		return maybe
	}
	c := bytes.Compare(v.data, data)
	var ok bool
	switch op {
	case expr.CmpOpEq:
		ok = c == 0
	case expr.CmpOpNeq:
		ok = c != 0
	case expr.CmpOpLt:
		ok = c < 0
	case expr.CmpOpLte:
		ok = c <= 0
	case expr.CmpOpGt:
		ok = c > 0
	case expr.CmpOpGte:
		ok = c >= 0
	default:
		return maybe
	}
	if ok {
		return yes
	}
	return no
}

func inRange(v value, op expr.CmpOp, from, to []byte) tri {
	if !v.known {
		return maybe
	}
	in := bytes.Compare(v.data, from) >= 0 && bytes.Compare(v.data, to) <= 0
	if op == expr.CmpOpNeq {
		in = !in
	}
	if in {
		return yes
	}
	return no
}
