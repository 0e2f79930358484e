package nftwatch

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// The notification socket's filter. A full rewrite of a 50,000-rule foreign table is 100,000 rule
// notifications (flush, then add): thousands of datagrams that the kernel would copy into our socket and we
// would wake up for, read and walk, only to learn that none of them concerns us. A classic BPF socket filter
// (SO_ATTACH_FILTER) runs in the writer's context while the kernel delivers the notification
// (do_one_broadcast in net/netlink/af_netlink.c) and drops such a datagram before it is queued: it costs us
// nothing, and it never fills our receive buffer (no overrun).
//
// The kernel coalesces a transaction's notifications into datagrams of up to NLMSG_GOODSIZE, in commit order
// (nft_commit_notify in net/netfilter/nf_tables_api.c), so a datagram that starts with a rule may go on with a
// chain or a table deletion. The filter therefore walks every message of the datagram (classic BPF cannot
// loop, so the walk is unrolled) and drops the datagram only when all of them are rules or set elements of
// tables other than ours; anything else, or a datagram longer than the unrolled walk, is delivered whole. The
// generation message that ends every transaction is sent on its own, so each transaction still ends with one.
//
// What it costs us in what we see: a drop rule added to another table's existing base chain no longer wakes
// us; the foreign-drop check (ForeignDrops) finds it on its next run.

const bpfMaxInsns = 4096 // BPF_MAXINSNS

// bpfAsm assembles a program with forward jumps to labels.
type bpfAsm struct {
	prog   []unix.SockFilter
	labels map[string]int
	fixups []bpfFixup
}

type bpfFixup struct {
	at     int
	jt, jf string // "" = the next instruction; for BPF_JA, jt is the target
}

func (a *bpfAsm) label(name string) { a.labels[name] = len(a.prog) }

func (a *bpfAsm) op(code uint16, k uint32) {
	a.prog = append(a.prog, unix.SockFilter{Code: code, K: k})
}

func (a *bpfAsm) jump(code uint16, k uint32, jt, jf string) {
	a.fixups = append(a.fixups, bpfFixup{at: len(a.prog), jt: jt, jf: jf})
	a.op(code, k)
}

func (a *bpfAsm) assemble() ([]unix.SockFilter, error) {
	for _, f := range a.fixups {
		rel := func(l string) (int, error) {
			if l == "" {
				return 0, nil
			}
			to, ok := a.labels[l]
			if !ok || to <= f.at {
				return 0, fmt.Errorf("bpf: bad jump to %q from %d", l, f.at)
			}
			return to - f.at - 1, nil
		}
		jt, err := rel(f.jt)
		if err != nil {
			return nil, err
		}
		jf, err := rel(f.jf)
		if err != nil {
			return nil, err
		}
		ins := &a.prog[f.at]
		if ins.Code == unix.BPF_JMP|unix.BPF_JA {
			ins.K = uint32(jt)
			continue
		}
		if jt > 255 || jf > 255 {
			return nil, fmt.Errorf("bpf: jump too far at %d", f.at)
		}
		ins.Jt, ins.Jf = uint8(jt), uint8(jf)
	}
	if len(a.prog) > bpfMaxInsns {
		return nil, fmt.Errorf("bpf: %d instructions", len(a.prog))
	}
	return a.prog, nil
}

const (
	bpfAccept   = 0xffffffff // keep the whole datagram
	bpfDrop     = 0
	scratchLen  = 0 // M[0]: the message length being assembled
	scratchOff  = 1 // M[1]: offset of the current message
	offType     = 4 // low byte of nlmsg_type (host order, little endian): NFT_MSG_*
	offFamily   = nlmsgHdrLen
	offAttrType = nlmsgHdrLen + nfgenHdrLen + 2 // the first attribute's type
	offAttrVal  = nlmsgHdrLen + nfgenHdrLen + 4
)

// foreignRuleFilter builds the filter for our inet tables' names, unrolling the walk as far as maxInsns
// instructions allow.
func foreignRuleFilter(ours []string, maxInsns int) ([]unix.SockFilter, error) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		return nil, fmt.Errorf("bpf: the filter reads netlink headers as little endian")
	}
	words := make([][]uint32, len(ours))
	perMsg := 33
	for i, name := range ours {
		b := append([]byte(name), 0) // the attribute holds the NUL and zero padding (__nla_reserve)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		for j := 0; j < len(b); j += 4 {
			words[i] = append(words[i], binary.BigEndian.Uint32(b[j:])) // BPF loads are big endian
		}
		perMsg += 2 * len(words[i])
	}
	need := uint32(offAttrVal + 4*maxLen(words)) // what the loads of one message reach, from its start
	a := &bpfAsm{labels: map[string]int{}}
	a.op(unix.BPF_LD|unix.BPF_IMM, 0)
	a.op(unix.BPF_ST, scratchOff)
	a.op(unix.BPF_MISC|unix.BPF_TAX, 0)
	for i := 0; len(a.prog)+perMsg+1 < min(maxInsns, bpfMaxInsns); i++ {
		l := func(s string) string { return fmt.Sprintf("%s%d", s, i) }
		// Past the last message: every one was a foreign rule or element.
		a.op(unix.BPF_LD|unix.BPF_W|unix.BPF_LEN, 0)
		a.jump(unix.BPF_JMP|unix.BPF_JGT|unix.BPF_X, 0, l("msg"), "")
		a.op(unix.BPF_RET|unix.BPF_K, bpfDrop)
		a.label(l("msg"))
		// A load past the datagram's end ends the program with 0, a drop: a message too short at the end for
		// every load (an element without its table, a truncated datagram) is delivered instead.
		a.op(unix.BPF_ALU|unix.BPF_SUB|unix.BPF_X, 0)
		a.jump(unix.BPF_JMP|unix.BPF_JGE|unix.BPF_K, need, "", l("accept"))
		a.op(unix.BPF_LD|unix.BPF_B|unix.BPF_IND, offType)
		a.jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, unix.NFT_MSG_NEWRULE, l("table"), "")
		a.jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, unix.NFT_MSG_DELRULE, l("table"), "")
		a.jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, unix.NFT_MSG_NEWSETELEM, l("table"), "")
		a.jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, unix.NFT_MSG_DELSETELEM, l("table"), l("accept"))
		a.label(l("table"))
		a.op(unix.BPF_LD|unix.BPF_H|unix.BPF_IND, offAttrType) // attribute 1, read big endian: 0x0100
		a.jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, attrTable<<8, "", l("accept"))
		a.op(unix.BPF_LD|unix.BPF_B|unix.BPF_IND, offFamily)
		a.jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, unix.NFPROTO_INET, "", l("next"))
		for t, ws := range words {
			a.label(l(fmt.Sprintf("name%d.", t)))
			miss := l(fmt.Sprintf("name%d.", t+1))
			if t == len(words)-1 {
				miss = l("next")
			}
			for j, w := range ws {
				a.op(unix.BPF_LD|unix.BPF_W|unix.BPF_IND, uint32(offAttrVal+4*j))
				hit := ""
				if j == len(ws)-1 {
					hit = l("accept") // ours: deliver
				}
				a.jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, w, hit, miss)
			}
		}
		// Advance by NLMSG_ALIGN(nlmsg_len), read little endian from its two low bytes.
		a.label(l("next"))
		a.op(unix.BPF_LD|unix.BPF_B|unix.BPF_IND, 1)
		a.op(unix.BPF_ALU|unix.BPF_LSH|unix.BPF_K, 8)
		a.op(unix.BPF_ST, scratchLen)
		a.op(unix.BPF_LD|unix.BPF_B|unix.BPF_IND, 0)
		a.op(unix.BPF_LDX|unix.BPF_MEM, scratchLen)
		a.op(unix.BPF_ALU|unix.BPF_OR|unix.BPF_X, 0)
		a.jump(unix.BPF_JMP|unix.BPF_JGE|unix.BPF_K, nlmsgHdrLen, "", l("accept")) // malformed: deliver
		a.op(unix.BPF_ALU|unix.BPF_ADD|unix.BPF_K, 3)
		a.op(unix.BPF_ALU|unix.BPF_AND|unix.BPF_K, ^uint32(3))
		a.op(unix.BPF_LDX|unix.BPF_MEM, scratchOff)
		a.op(unix.BPF_ALU|unix.BPF_ADD|unix.BPF_X, 0)
		a.op(unix.BPF_ST, scratchOff)
		a.op(unix.BPF_MISC|unix.BPF_TAX, 0)
		a.jump(unix.BPF_JMP|unix.BPF_JA, 0, l("end"), "")
		a.label(l("accept"))
		a.op(unix.BPF_RET|unix.BPF_K, bpfAccept)
		a.label(l("end"))
	}
	a.op(unix.BPF_RET|unix.BPF_K, bpfAccept) // more messages than the walk unrolls: deliver
	return a.assemble()
}

func maxLen(words [][]uint32) int {
	n := 0
	for _, w := range words {
		n = max(n, len(w))
	}
	return n
}
