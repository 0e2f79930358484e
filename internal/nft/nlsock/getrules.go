package nlsock

import (
	"encoding/binary"
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// GetRules lists the rules of chain c of table t as google/nftables' GetRules does, with one difference:
// v0.3.0 decodes NFTA_CT_DIRECTION as a 32-bit attribute, while the kernel dumps it as 8 bits
// (net/netfilter/nft_ct.c, nft_ct_get_dump), so the library's GetRules fails on any rule holding
// `ct original ...`: the fallback's reply rules, and any other table's (which the foreign-drop scan reads).
// Here ct is decoded by hand, and every other expression by the library's own unmarshalling, one at a time,
// with the library's choice of which expression kinds it knows (the others are left out, as it leaves them).
// The request is one dump filtered by the kernel on table and chain, on s.
func (s *Socket) GetRules(t *nftables.Table, c *nftables.Chain) ([]*nftables.Rule, error) {
	attrs, err := netlink.MarshalAttributes([]netlink.Attribute{
		{Type: unix.NFTA_RULE_TABLE, Data: []byte(t.Name + "\x00")},
		{Type: unix.NFTA_RULE_CHAIN, Data: []byte(c.Name + "\x00")},
	})
	if err != nil {
		return nil, err
	}
	msgs, err := s.nl.Execute(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETRULE), Flags: netlink.Request | netlink.Dump},
		Data:   append(Nfgenmsg(uint8(t.Family), 0), attrs...),
	})
	if err != nil {
		return nil, err
	}
	var rules []*nftables.Rule
	for _, m := range msgs {
		if len(m.Data) < 4 {
			return nil, fmt.Errorf("rule message of %d bytes", len(m.Data))
		}
		r, err := decodeRule(byte(t.Family), m.Data[4:])
		if err != nil {
			return nil, err
		}
		r.Table, r.Chain = t, c
		rules = append(rules, r)
	}
	return rules, nil
}

func decodeRule(fam byte, b []byte) (*nftables.Rule, error) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return nil, err
	}
	ad.ByteOrder = binary.BigEndian
	r := &nftables.Rule{}
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_RULE_HANDLE:
			r.Handle = ad.Uint64()
		case unix.NFTA_RULE_POSITION:
			r.Position = ad.Uint64()
		case unix.NFTA_RULE_USERDATA:
			r.UserData = ad.Bytes()
		case unix.NFTA_RULE_EXPRESSIONS:
			ad.Nested(func(list *netlink.AttributeDecoder) error {
				for list.Next() {
					e, err := decodeExpr(fam, list.Bytes())
					if err != nil {
						return err
					}
					if e != nil {
						r.Exprs = append(r.Exprs, e)
					}
				}
				return nil
			})
		}
	}
	return r, ad.Err()
}

// decodeExpr decodes one NFTA_LIST_ELEM: its name, then its data; nil for a kind the library does not know.
func decodeExpr(fam byte, b []byte) (expr.Any, error) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return nil, err
	}
	ad.ByteOrder = binary.BigEndian
	var name string
	var data []byte
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_EXPR_NAME:
			name = ad.String()
		case unix.NFTA_EXPR_DATA:
			data = ad.Bytes()
		}
	}
	if err := ad.Err(); err != nil {
		return nil, err
	}
	if name == "ct" {
		return decodeCt(data)
	}
	if name == "notrack" {
		return &expr.Notrack{}, nil
	}
	e := newExpr(name)
	if e == nil {
		return nil, nil
	}
	if err := expr.Unmarshal(fam, data, e); err != nil {
		return nil, fmt.Errorf("decode %s: %w", name, err)
	}
	// A verdict is an immediate into the verdict register, with no data.
	if imm, ok := e.(*expr.Immediate); ok && imm.Register == unix.NFT_REG_VERDICT && len(imm.Data) == 0 {
		v := &expr.Verdict{}
		if err := expr.Unmarshal(fam, data, v); err != nil {
			return nil, fmt.Errorf("decode verdict: %w", err)
		}
		return v, nil
	}
	return e, nil
}

// newExpr is the expression of a kind google/nftables v0.3.0 decodes (its expr.exprFromName), but ct.
func newExpr(name string) expr.Any {
	switch name {
	case "range":
		return &expr.Range{}
	case "meta":
		return &expr.Meta{}
	case "cmp":
		return &expr.Cmp{}
	case "counter":
		return &expr.Counter{}
	case "objref":
		return &expr.Objref{}
	case "payload":
		return &expr.Payload{}
	case "lookup":
		return &expr.Lookup{}
	case "immediate":
		return &expr.Immediate{}
	case "bitwise":
		return &expr.Bitwise{}
	case "redir":
		return &expr.Redir{}
	case "nat":
		return &expr.NAT{}
	case "limit":
		return &expr.Limit{}
	case "quota":
		return &expr.Quota{}
	case "dynset":
		return &expr.Dynset{}
	case "log":
		return &expr.Log{}
	case "exthdr":
		return &expr.Exthdr{}
	case "match":
		return &expr.Match{}
	case "target":
		return &expr.Target{}
	case "connlimit":
		return &expr.Connlimit{}
	case "queue":
		return &expr.Queue{}
	case "flow_offload":
		return &expr.FlowOffload{}
	case "reject":
		return &expr.Reject{}
	case "masq":
		return &expr.Masq{}
	case "hash":
		return &expr.Hash{}
	case "cthelper":
		return &expr.CtHelper{}
	case "synproxy":
		return &expr.SynProxy{}
	case "ctexpect":
		return &expr.CtExpect{}
	case "secmark":
		return &expr.SecMark{}
	case "cttimeout":
		return &expr.CtTimeout{}
	case "fib":
		return &expr.Fib{}
	case "numgen":
		return &expr.Numgen{}
	}
	return nil
}

// decodeCt reads a ct expression with its direction as the kernel dumps it: one byte.
func decodeCt(data []byte) (expr.Any, error) {
	ad, err := netlink.NewAttributeDecoder(data)
	if err != nil {
		return nil, err
	}
	ad.ByteOrder = binary.BigEndian
	e := &expr.Ct{}
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_CT_KEY:
			e.Key = expr.CtKey(ad.Uint32())
		case unix.NFTA_CT_DREG:
			e.Register = ad.Uint32()
		case unix.NFTA_CT_SREG:
			e.Register, e.SourceRegister = ad.Uint32(), true
		case unix.NFTA_CT_DIRECTION:
			e.Direction = uint32(ad.Uint8())
		}
	}
	return e, ad.Err()
}
