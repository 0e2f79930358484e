package nft

import (
	"encoding/binary"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/nodelocaldns/nodelocaldns/internal/nft/nlsock"
)

// The raw nfnetlink messages google/nftables v0.3.0 cannot send for us: a NEWTABLE with flags (the owned table,
// owned.go) and a batch without its end (the capability probes, capability.go).

// batchBegin and batchEnd frame the messages of one nf_tables transaction.
func batchBegin() netlink.Message { return nlsock.BatchMark(unix.NFNL_MSG_BATCH_BEGIN) }
func batchEnd() netlink.Message   { return nlsock.BatchMark(unix.NFNL_MSG_BATCH_END) }

// nftMsg is one acknowledged nf_tables message of an inet object, made of attrs.
func nftMsg(typ int, flags netlink.HeaderFlags, attrs []netlink.Attribute) (netlink.Message, error) {
	b, err := netlink.MarshalAttributes(attrs)
	if err != nil {
		return netlink.Message{}, err
	}
	return netlink.Message{Header: netlink.Header{
		Type:  netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | typ),
		Flags: netlink.Request | netlink.Acknowledge | flags,
	}, Data: append(nlsock.Nfgenmsg(unix.NFPROTO_INET, 0), b...)}, nil
}

// newTableMsg creates table inet name with flags (NFTA_TABLE_FLAGS, big endian), failing when the name is taken.
func newTableMsg(name string, flags uint32) (netlink.Message, error) {
	return nftMsg(unix.NFT_MSG_NEWTABLE, netlink.Create|netlink.Excl, []netlink.Attribute{
		{Type: unix.NFTA_TABLE_NAME, Data: nulTerminated(name)},
		{Type: unix.NFTA_TABLE_FLAGS, Data: binary.BigEndian.AppendUint32(nil, flags)},
	})
}

func nulTerminated(s string) []byte { return []byte(s + "\x00") }
