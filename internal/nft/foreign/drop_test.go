package foreign

import (
	"net/netip"
	"testing"

	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
)

// The foreign-drop report reads a rule with the packet model (an address and interface it does not know): it rules
// out other ports and protocols and the conntrack states untracked packets never have, and keeps what it
// cannot rule out.
func TestMayDropDNS(t *testing.T) {
	ctState := func(op expr.CmpOp, bits uint32) []expr.Any {
		return []expr.Any{
			&expr.Ct{Key: expr.CtKeySTATE, Register: 1},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(bits), Xor: make([]byte, 4)},
			&expr.Cmp{Op: op, Register: 1, Data: make([]byte, 4)},
		}
	}
	drop := &expr.Verdict{Kind: expr.VerdictDrop}
	// `udp dport 53` and `ip saddr 10.0.0.1` as nft generates them.
	port := func(dir nft.Dir, p uint16) []expr.Any {
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_UDP}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: nft.PortOffset(dir), Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(p)},
		}
	}
	saddr := func(ip string) []expr.Any {
		off, n := nft.AddrOffset(nft.DirFrom, false)
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: netip.MustParseAddr(ip).AsSlice()},
		}
	}
	cases := []struct {
		name  string
		exprs []expr.Any
		want  string // "" for no drop
	}{
		{"udp dport 53 drop", append(port(nft.DirTo, 53), drop), "drop"},
		{"udp sport 53 reject", append(port(nft.DirFrom, 53), &expr.Reject{}), "reject"},
		{"udp dport 22 drop", append(port(nft.DirTo, 22), drop), ""},
		{"udp sport 8080 drop", append(port(nft.DirFrom, 8080), drop), ""},
		{"udp dport 53 accept", append(port(nft.DirTo, 53), &expr.Verdict{Kind: expr.VerdictAccept}), ""},
		{"ip saddr 10.0.0.0/8 drop (an address it does not know)", append(saddr("10.0.0.1"), drop), "drop"},
		{"iifname lo drop (host-network clients come over lo)", []expr.Any{&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte("lo\x00")}, drop}, "drop"},
		{"ct state invalid drop", append(ctState(expr.CmpOpNeq, 1<<0), drop), ""},
		// Our packets are untracked: this one drops them all.
		{"ct state untracked drop", append(ctState(expr.CmpOpNeq, ctStateUntracked), drop), "drop"},
		{"xt REJECT", append(port(nft.DirTo, 53), &expr.Target{Name: "REJECT"}), "xt REJECT"},
	}
	for _, tc := range cases {
		word, ok := mayDropDNS(tc.exprs, 53)
		if ok != (tc.want != "") || word != tc.want {
			t.Errorf("%s: mayDropDNS = %q, %v; want %q", tc.name, word, ok, tc.want)
		}
	}
}
