package nlsock

import (
	"encoding/binary"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The raw nfnetlink messages google/nftables v0.3.0 cannot send for us: a NEWTABLE with flags (nft/nftconn's
// owned table) and a batch without its end (preflight's capability probes). Building one touches nothing.

// TableFlagOwner is NFT_TABLE_F_OWNER (include/uapi/linux/netfilter/nf_tables.h, Linux 5.12), which
// golang.org/x/sys/unix does not define.
const TableFlagOwner = 0x2

// Msg is one acknowledged nf_tables message of an inet object, made of attrs.
func Msg(typ int, flags netlink.HeaderFlags, attrs []netlink.Attribute) (netlink.Message, error) {
	b, err := netlink.MarshalAttributes(attrs)
	if err != nil {
		return netlink.Message{}, err
	}
	return netlink.Message{Header: netlink.Header{
		Type:  netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | typ),
		Flags: netlink.Request | netlink.Acknowledge | flags,
	}, Data: append(Nfgenmsg(unix.NFPROTO_INET, 0), b...)}, nil
}

// NewTableMsg creates table inet name with flags (NFTA_TABLE_FLAGS, big endian), failing when the name is taken.
func NewTableMsg(name string, flags uint32) (netlink.Message, error) {
	return Msg(unix.NFT_MSG_NEWTABLE, netlink.Create|netlink.Excl, []netlink.Attribute{
		{Type: unix.NFTA_TABLE_NAME, Data: NulTerminated(name)},
		{Type: unix.NFTA_TABLE_FLAGS, Data: binary.BigEndian.AppendUint32(nil, flags)},
	})
}

// NulTerminated is s as netlink string attributes carry it.
func NulTerminated(s string) []byte { return []byte(s + "\x00") }
