package nftwatch

import (
	"encoding/binary"
	"fmt"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
)

// Reading notifications without decoding them. A datagram of NFNLGRP_NFTABLES holds several messages (the
// kernel coalesces a transaction's notifications into skbs of up to NLMSG_GOODSIZE, see nft_commit_notify in
// net/netfilter/nf_tables_api.c); each is a netlink header, a nfgenmsg (family first) and attributes, the
// object's table name always the first. Walking them is slicing one reused buffer: no allocation per message,
// and a rule or set element of another table costs a few comparisons.

// Attribute numbers (linux/netfilter/nf_tables.h). The table name is attribute 1 in every object message.
const (
	attrTable       = 1
	attrChainName   = 3 // NFTA_CHAIN_NAME
	attrChainHook   = 4 // NFTA_CHAIN_HOOK (nested)
	attrChainPolicy = 5 // NFTA_CHAIN_POLICY
	attrHookNum     = 1 // NFTA_HOOK_HOOKNUM, inside NFTA_CHAIN_HOOK
	attrHookPrio    = 2 // NFTA_HOOK_PRIORITY
	attrGenPID      = 2 // NFTA_GEN_PROC_PID
	attrGenName     = 3 // NFTA_GEN_PROC_NAME
	nlaTypeMask     = 0x3fff
	nlmsgHdrLen     = 16
	nfgenHdrLen     = 4
)

// message is one netlink message inside a datagram: views into the read buffer, valid until the next read.
type message struct {
	typ    uint8 // NFT_MSG_*
	family uint8
	portID uint32 // netlink port of the writer's socket
	attrs  []byte
}

// nextMessage splits the first nftables message off b. ok is false at the end or on a malformed header;
// messages of other subsystems come back with typ 0xff.
func nextMessage(b []byte) (m message, rest []byte, ok bool) {
	if len(b) < nlmsgHdrLen {
		return m, nil, false
	}
	n := int(binary.NativeEndian.Uint32(b))
	if n < nlmsgHdrLen || n > len(b) {
		return m, nil, false
	}
	typ := binary.NativeEndian.Uint16(b[4:])
	rest = b[min(len(b), (n+3)&^3):]
	m = message{typ: 0xff, portID: binary.NativeEndian.Uint32(b[12:])}
	if typ>>8 != unix.NFNL_SUBSYS_NFTABLES || n < nlmsgHdrLen+nfgenHdrLen {
		return m, rest, true
	}
	m.typ, m.family, m.attrs = uint8(typ), b[nlmsgHdrLen], b[nlmsgHdrLen+nfgenHdrLen:n]
	return m, rest, true
}

// attr returns the value of the first attribute of type typ in b (nil, false if none).
func attr(b []byte, typ uint16) ([]byte, bool) {
	for len(b) >= 4 {
		n := int(binary.NativeEndian.Uint16(b))
		if n < 4 || n > len(b) {
			return nil, false
		}
		if binary.NativeEndian.Uint16(b[2:])&nlaTypeMask == typ {
			return b[4:n], true
		}
		b = b[min(len(b), (n+3)&^3):]
	}
	return nil, false
}

// cstring is an attribute's string value without its terminating NUL, still a view into the buffer.
func cstring(v []byte) []byte {
	if i := slices.Index(v, 0); i >= 0 {
		return v[:i]
	}
	return v
}

func be32(v []byte, ok bool) (uint32, bool) {
	if !ok || len(v) < 4 {
		return 0, false
	}
	return binary.BigEndian.Uint32(v), true
}

// chainKey names a base chain; chainHook is what matters of it to the foreign-drop check.
type chainKey struct {
	family       uint8
	table, chain string
}

type chainHook struct {
	hook, priority, policy uint32
	hasPolicy              bool
}

// baseChain reads a chain message's name and, when it is a base chain, its hook, priority and policy.
func baseChain(m message) (chainKey, chainHook, bool) {
	table, _ := attr(m.attrs, attrTable)
	name, _ := attr(m.attrs, attrChainName)
	k := chainKey{family: m.family, table: string(cstring(table)), chain: string(cstring(name))}
	nested, ok := attr(m.attrs, attrChainHook)
	if !ok {
		return k, chainHook{}, false
	}
	var h chainHook
	h.hook, _ = be32(attr(nested, attrHookNum))
	h.priority, _ = be32(attr(nested, attrHookPrio))
	h.policy, h.hasPolicy = be32(attr(m.attrs, attrChainPolicy))
	return k, h, true
}

// generation reads a NEWGEN message's writer: thread id and command name.
func generation(m message) (pid uint32, comm string) {
	pid, _ = be32(attr(m.attrs, attrGenPID))
	if v, ok := attr(m.attrs, attrGenName); ok {
		comm = string(cstring(v))
	}
	return pid, comm
}

var msgNames = map[uint8]string{
	unix.NFT_MSG_NEWTABLE: "add table", unix.NFT_MSG_DELTABLE: "delete table",
	unix.NFT_MSG_NEWCHAIN: "add chain", unix.NFT_MSG_DELCHAIN: "delete chain",
	unix.NFT_MSG_NEWRULE: "add rule", unix.NFT_MSG_DELRULE: "delete rule",
	unix.NFT_MSG_NEWSET: "add set", unix.NFT_MSG_DELSET: "delete set",
	unix.NFT_MSG_NEWSETELEM: "add element", unix.NFT_MSG_DELSETELEM: "delete element",
}

// watchState is what the watcher remembers between messages: our table names, and every foreign base chain's
// hook and policy, so that a re-declared chain (kube-proxy's and iptables-nft-restore's every sync) is news only
// when something about it really changed.
type watchState struct {
	ours   []string // our tables' names, in the inet family
	chains map[chainKey]chainHook
}

func (s *watchState) isOurs(family uint8, table []byte) bool {
	if family != unix.NFPROTO_INET {
		return false
	}
	for _, t := range s.ours {
		if string(table) == t {
			return true
		}
	}
	return false
}

// notice decides whether m may concern our table or what we report about others, and says why ("" when not).
// It updates the remembered base chains as it goes, whoever the writer.
func (s *watchState) notice(m message) string {
	name, known := msgNames[m.typ]
	if !known {
		return "" // objects, flowtables, generations
	}
	tv, hasTable := attr(m.attrs, attrTable)
	table := cstring(tv)
	where := func() string { return nft.FamilyName(m.family) + " " + string(table) }
	switch {
	case s.isOurs(m.family, table):
		return name + " in " + where()
	case m.typ == unix.NFT_MSG_DELTABLE:
		for k := range s.chains {
			if k.family == m.family && k.table == string(table) {
				delete(s.chains, k)
			}
		}
		return name + " " + where()
	case m.typ == unix.NFT_MSG_NEWCHAIN:
		k, h, base := baseChain(m)
		if !base {
			return ""
		}
		old, seen := s.chains[k]
		if !h.hasPolicy && seen { // an update that names no policy keeps the old one
			h.policy, h.hasPolicy = old.policy, old.hasPolicy
		}
		s.chains[k] = h
		if seen && old == h {
			return ""
		}
		return fmt.Sprintf("%s (base chain %s, hook %d, policy %s) in %s", name, k.chain, h.hook, policyName(h), where())
	case m.typ == unix.NFT_MSG_DELCHAIN:
		k, _, base := baseChain(m)
		if _, seen := s.chains[k]; !seen && !base {
			return ""
		}
		delete(s.chains, k)
		return name + " (base chain " + k.chain + ") in " + where()
	case !hasTable && (m.typ == unix.NFT_MSG_NEWSETELEM || m.typ == unix.NFT_MSG_DELSETELEM):
		return name + " in an unnamed table"
	}
	return ""
}

func policyName(h chainHook) string {
	switch {
	case !h.hasPolicy:
		return "none"
	case h.policy == 0:
		return "drop"
	case h.policy == 1:
		return "accept"
	}
	return fmt.Sprint(h.policy)
}
