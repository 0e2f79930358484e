package foreign

import (
	"encoding/binary"

	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/google/nftables/xt"
)

// How iptables-nft writes what node-cache and host firewalls use, as read back from the kernel (iptables
// v1.8.9 (nf_tables), `nft --debug=netlink list table ip raw`; foreign_kernel_test.go writes each with the real
// iptables-nft and reads it back):
//
//	-p udp                   meta load l4proto => reg 1; cmp eq reg 1 0x11 (older releases: payload @nh+9)
//	-d 169.254.20.10         payload load 4b @ network header + 16 => reg 1; cmp eq reg 1 (no bitwise for /32)
//	--dport 53               payload load 2b @ transport header + 2 => reg 1; cmp eq reg 1 0x0035
//	-m comment --comment C   match name comment rev 0, info: C NUL-padded to 256 bytes (xt_comment_info)
//	                         (nft's own `comment "C"` is the rule's user data instead; both are read)
//	(always)                 counter
//	-j NOTRACK               target name CT rev 2, info xt_ct_target_info_v1 with flags XT_CT_NOTRACK |
//	                         XT_CT_NOTRACK_ALIAS (the NOTRACK target is an alias of CT --notrack); very old
//	                         releases: target name NOTRACK rev 0
//	-j ACCEPT / -j DROP      immediate reg 0 accept / drop: native verdicts
//	-j REJECT                target name REJECT rev 0
//	-m conntrack --ctstate   match name conntrack rev 3 (xt_conntrack_mtinfo3)

// xtCTNotrack is XT_CT_NOTRACK (include/uapi/linux/netfilter/xt_CT.h): the first field of every revision of
// xt_ct_target_info is a __u16 flags, in host byte order.
const xtCTNotrack = 1 << 0

// xtConntrackStateUntracked is XT_CONNTRACK_STATE_UNTRACKED (xt_conntrack.h: 1 << (IP_CT_NUMBER + 3)).
const xtConntrackStateUntracked = 1 << 8

// isNotrack says whether e takes the packet away from conntrack: nft's notrack statement, iptables-nft's
// -j NOTRACK (target CT with the notrack flag) or the old NOTRACK target.
func isNotrack(e expr.Any) bool {
	switch e := e.(type) {
	case *expr.Notrack:
		return true
	case *expr.Target:
		switch e.Name {
		case "NOTRACK":
			return true
		case "CT":
			b, ok := e.Info.(*xt.Unknown)
			return ok && len(*b) >= 2 && binary.NativeEndian.Uint16(*b)&xtCTNotrack != 0
		}
	}
	return false
}

// xtComment is the comment of an iptables-nft rule's `-m comment` match, "" when e is not one.
func xtComment(e expr.Any) (string, bool) {
	m, ok := e.(*expr.Match)
	if !ok || m.Name != "comment" {
		return "", false
	}
	c, ok := m.Info.(*xt.Comment)
	if !ok {
		return "", true // a comment match we cannot read: still no condition on the packet
	}
	return string(*c), true
}

// ruleComment is the comment nft itself stores in a rule's user data, "" if none.
func ruleComment(ud []byte) string {
	c, _ := userdata.GetString(ud, userdata.TypeComment)
	return c
}
