package nft

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// DumpRules lists the rules of chain c of table t, decoding their expressions here: google/nftables v0.3.0
// decodes NFTA_CT_DIRECTION as a 32-bit attribute, while the kernel dumps it as 8 bits
// (net/netfilter/nft_ct.c, nft_ct_get_dump), so its GetRules fails on any rule holding `ct original ...`, as
// the fallback's reply rules do. Every other expression is decoded by the library's own unmarshalling, one
// at a time; one of a kind the fallback never writes is an error (errUnknownExpr), which is all a read-back
// needs to know. The request is one dump filtered by the kernel on table and chain, on our lasting socket.
func (k *kernelOps) DumpRules(t *nftables.Table, c *nftables.Chain) ([]*nftables.Rule, error) {
	attrs, err := netlink.MarshalAttributes([]netlink.Attribute{
		{Type: unix.NFTA_RULE_TABLE, Data: []byte(t.Name + "\x00")},
		{Type: unix.NFTA_RULE_CHAIN, Data: []byte(c.Name + "\x00")},
	})
	if err != nil {
		return nil, err
	}
	msgs, err := k.nl.Execute(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETRULE), Flags: netlink.Request | netlink.Dump},
		Data:   append(nfgenmsg(uint8(t.Family), 0), attrs...),
	})
	if err != nil {
		return nil, err
	}
	var rules []*nftables.Rule
	for _, m := range msgs {
		if len(m.Data) < 4 {
			return nil, fmt.Errorf("rule message of %d bytes", len(m.Data))
		}
		r, err := decodeRule(m.Data[4:])
		if err != nil {
			return nil, err
		}
		r.Table, r.Chain = t, c
		rules = append(rules, r)
	}
	return rules, nil
}

// errUnknownExpr is a rule expression DumpRules does not decode.
var errUnknownExpr = errors.New("expression the fallback never writes")

func decodeRule(b []byte) (*nftables.Rule, error) {
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
		case unix.NFTA_RULE_USERDATA:
			r.UserData = ad.Bytes()
		case unix.NFTA_RULE_EXPRESSIONS:
			ad.Nested(func(list *netlink.AttributeDecoder) error {
				for list.Next() {
					e, err := decodeExpr(list.Bytes())
					if err != nil {
						return err
					}
					r.Exprs = append(r.Exprs, e)
				}
				return nil
			})
		}
	}
	return r, ad.Err()
}

// decodeExpr decodes one NFTA_LIST_ELEM: its name, then its data.
func decodeExpr(b []byte) (expr.Any, error) {
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
	var e expr.Any
	switch name {
	case "ct":
		return decodeCt(data)
	case "meta":
		e = &expr.Meta{}
	case "cmp":
		e = &expr.Cmp{}
	case "payload":
		e = &expr.Payload{}
	case "lookup":
		e = &expr.Lookup{}
	case "immediate":
		e = &expr.Immediate{}
	case "counter":
		e = &expr.Counter{}
	case "masq":
		e = &expr.Masq{}
	default:
		return nil, fmt.Errorf("%w: %q", errUnknownExpr, name)
	}
	if err := expr.Unmarshal(unix.NFPROTO_INET, data, e); err != nil {
		return nil, fmt.Errorf("decode %s: %w", name, err)
	}
	return e, nil
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
