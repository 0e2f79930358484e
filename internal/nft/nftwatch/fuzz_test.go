package nftwatch

import (
	"encoding/binary"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
)

// The notification socket's filter against the Go walk of the same datagram, the differential the filter's
// contract asks for: the filter runs in golang.org/x/net/bpf's VM (classic BPF with the kernel's semantics,
// big-endian loads and an out-of-bounds load ending the program with 0), the Go side is nextMessage and
// watchState.notice as the watcher runs them. A datagram the filter drops must hold nothing the Go walk would
// report and no generation message (which ends every transaction); and a datagram made only of rules and set
// elements of other tables, short enough for the unrolled walk, must be dropped, or the filter does not do
// its job.
//
// Datagrams are built as the kernel builds them (nf_tables_fill_*: the table name first, NUL-terminated and
// zero-padded), from fuzzed choices of message type, family, table name and trailing attributes.
//
//	go test ./internal/nft -run '^$' -fuzz FuzzWatchFilter -fuzztime 1m
func FuzzWatchFilter(f *testing.F) {
	ours := []string{nft.InstanceTableName(0), nft.InstanceTableName(1)}
	prog, err := foreignRuleFilter(ours, bpfMaxInsns)
	if err != nil {
		f.Fatal(err)
	}
	raw := make([]bpf.RawInstruction, len(prog))
	for i, ins := range prog {
		raw[i] = bpf.RawInstruction{Op: ins.Code, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	insns, ok := bpf.Disassemble(raw)
	if !ok {
		f.Fatal("the filter does not disassemble")
	}
	vm, err := bpf.NewVM(insns)
	if err != nil {
		f.Fatalf("the filter does not load into the VM: %v", err)
	}
	// Seeds: one foreign rule; a rule of ours behind a foreign one; a chain deletion behind foreign rules; a
	// generation; an element of a table whose name extends ours; a rule of our name in another family.
	f.Add([]byte{0, 0, 2, 9, 'k', 'u', 'b', 'e', '-', 'p', 'r', 'o', 'x', 'y', 1, 3, 8, 'c', 'h', 'a', 'i', 'n', 'x', 'y', 'z'})
	f.Add([]byte{0, 0, 2, 3, 'f', 'o', 'o', 0, 1, 0, 0, 0})
	f.Add([]byte{1, 0, 2, 3, 'f', 'o', 'o', 0, 7, 0, 2, 3, 'b', 'a', 'r', 0})
	f.Add([]byte{9, 0, 0, 0})
	f.Add([]byte{2, 0, 2, 14, 'n', 'o', 'd', 'e', 'l', 'o', 'c', 'a', 'l', 'd', 'n', 's', '-', '2', 0})
	f.Add([]byte{0, 1, 0, 0})
	// An element without its table attribute, alone: its loads would run past the datagram's end (found by this
	// target: the filter dropped it, the watcher reports it).
	f.Add([]byte{2, 0, 3, 0})
	f.Fuzz(func(t *testing.T, spec []byte) {
		dg, onlyForeign, shortest, n := buildDatagram(spec, ours)
		if n == 0 {
			return
		}
		kept, err := vm.Run(dg)
		if err != nil {
			t.Fatalf("filter: %v", err)
		}
		s := watchState{ours: ours, chains: map[chainKey]chainHook{}}
		var reasons []string
		gen := false
		for b := dg; ; {
			m, rest, ok := nextMessage(b)
			if !ok {
				break
			}
			b = rest
			if m.typ == unix.NFT_MSG_NEWGEN {
				gen = true
			}
			if r := s.notice(m); r != "" {
				reasons = append(reasons, r)
			}
		}
		if kept == 0 && (len(reasons) > 0 || gen) {
			t.Fatalf("the filter drops a datagram of %d messages the watcher needs (generation %v, %q): % x", n, gen, reasons, dg)
		}
		// The filter delivers a message too short for all its loads (see foreignRuleFilter); a rule or element
		// the kernel sends is longer (it carries its chain or set, handle and expressions or keys).
		if onlyForeign && n <= 32 && shortest >= offAttrVal+16 && kept != 0 {
			t.Fatalf("the filter keeps a datagram of %d foreign rules and elements: % x", n, dg)
		}
	})
}

// fuzzTypes are the message types a fuzzed message picks from; 0xff stands for another nfnetlink subsystem.
var fuzzTypes = []uint8{unix.NFT_MSG_NEWRULE, unix.NFT_MSG_DELRULE, unix.NFT_MSG_NEWSETELEM, unix.NFT_MSG_DELSETELEM,
	unix.NFT_MSG_NEWTABLE, unix.NFT_MSG_DELTABLE, unix.NFT_MSG_NEWCHAIN, unix.NFT_MSG_DELCHAIN, unix.NFT_MSG_NEWSET,
	unix.NFT_MSG_NEWGEN, 0xff}

var fuzzFamilies = []uint8{unix.NFPROTO_INET, unix.NFPROTO_IPV4, unix.NFPROTO_IPV6, unix.NFPROTO_ARP,
	unix.NFPROTO_BRIDGE, unix.NFPROTO_NETDEV}

// buildDatagram turns spec into a datagram of nftables messages: per message a type, a family, a table (0 and 1
// our tables, 2 a name that follows: its length, then its bytes; 3 no table attribute), then attributes that
// follow (their count, then per attribute its type and its length and bytes). It reports whether every message
// is a rule or element of a table not ours, the length of the shortest message, and how many messages there are.
func buildDatagram(spec []byte, ours []string) (dg []byte, onlyForeign bool, shortest, n int) {
	next := func() (byte, bool) {
		if len(spec) == 0 {
			return 0, false
		}
		b := spec[0]
		spec = spec[1:]
		return b, true
	}
	take := func(k int) []byte {
		k = min(k, len(spec))
		b := spec[:k]
		spec = spec[k:]
		return b
	}
	onlyForeign = true
	for len(spec) > 0 && len(dg) < 8192 {
		tb, _ := next()
		fb, _ := next()
		nb, _ := next()
		typ, fam := fuzzTypes[int(tb)%len(fuzzTypes)], fuzzFamilies[int(fb)%len(fuzzFamilies)]
		var attrs []byte
		var table string
		hasTable := true
		switch nb % 4 {
		case 0, 1:
			table = ours[nb%4]
		case 2:
			l, _ := next()
			table = string(take(int(l%40) + 1))
		case 3:
			hasTable = false
		}
		for i := range len(table) {
			if table[i] == 0 { // a kernel name never holds a NUL
				table = table[:i]
				break
			}
		}
		if hasTable {
			attrs = appendAttr(attrs, attrTable, append([]byte(table), 0))
		}
		count, _ := next()
		for range count % 4 {
			at, _ := next()
			l, _ := next()
			attrs = appendAttr(attrs, uint16(at%16)+2, take(int(l%64)))
		}
		rule := typ == unix.NFT_MSG_NEWRULE || typ == unix.NFT_MSG_DELRULE || typ == unix.NFT_MSG_NEWSETELEM || typ == unix.NFT_MSG_DELSETELEM
		if !rule || !hasTable || (fam == unix.NFPROTO_INET && (table == ours[0] || table == ours[1])) {
			onlyForeign = false
		}
		before := len(dg)
		dg = appendMessage(dg, typ, fam, attrs)
		if n == 0 || len(dg)-before < shortest {
			shortest = len(dg) - before
		}
		n++
	}
	return dg, onlyForeign, shortest, n
}

// appendAttr appends one netlink attribute, padded with zeros to 4 bytes as __nla_reserve does.
func appendAttr(b []byte, typ uint16, val []byte) []byte {
	b = binary.NativeEndian.AppendUint16(b, uint16(4+len(val)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, val...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// appendMessage appends one nfnetlink message: header, nfgenmsg, attributes. typ 0xff is a message of another
// subsystem (conntrack's).
func appendMessage(b []byte, typ, family uint8, attrs []byte) []byte {
	ht := uint16(unix.NFNL_SUBSYS_NFTABLES)<<8 | uint16(typ)
	if typ == 0xff {
		ht = uint16(unix.NFNL_SUBSYS_CTNETLINK)<<8 | unix.NFT_MSG_NEWRULE
	}
	b = binary.NativeEndian.AppendUint32(b, uint32(nlmsgHdrLen+nfgenHdrLen+len(attrs)))
	b = binary.NativeEndian.AppendUint16(b, ht)
	b = binary.NativeEndian.AppendUint16(b, 0)
	b = binary.NativeEndian.AppendUint32(b, 0)    // seq
	b = binary.NativeEndian.AppendUint32(b, 4242) // the writer's port
	b = append(b, family, unix.NFNETLINK_V0, 0, 0)
	return append(b, attrs...)
}

// FuzzWatchParse feeds arbitrary datagrams to the watcher's parser (nextMessage, notice, generation), as a
// socket overrun, a kernel of another version or a bug could deliver them: it must neither panic nor loop, each
// message must lie inside the datagram, and the walk must advance.
//
//	go test ./internal/nft -run '^$' -fuzz FuzzWatchParse -fuzztime 1m
func FuzzWatchParse(f *testing.F) {
	ours := []string{nft.InstanceTableName(0)}
	for _, spec := range [][]byte{{0, 0, 0, 0}, {6, 0, 2, 3, 'f', 'o', 'o', 0, 1, 1, 4, 0, 0, 0, 1}, {9, 0, 0, 0}} {
		dg, _, _, _ := buildDatagram(spec, ours)
		f.Add(dg)
	}
	f.Add([]byte{0x10, 0, 0, 0, 0x06, 0x0a}) // a header cut short
	f.Fuzz(func(t *testing.T, dg []byte) {
		s := watchState{ours: ours, chains: map[chainKey]chainHook{}}
		for b, steps := dg, 0; ; steps++ {
			m, rest, ok := nextMessage(b)
			if !ok {
				break
			}
			if len(rest) >= len(b) || steps > len(dg) {
				t.Fatalf("the walk does not advance: %d bytes left of %d", len(rest), len(b))
			}
			if len(m.attrs) > len(b) {
				t.Fatalf("attributes of %d bytes in a message of at most %d", len(m.attrs), len(b))
			}
			s.notice(m)
			if m.typ == unix.NFT_MSG_NEWGEN {
				generation(m)
			}
			b = rest
		}
	})
}
