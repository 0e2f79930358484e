package nftwatch

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"golang.org/x/sys/unix"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
)

// rawSubscriber joins NFNLGRP_NFTABLES on a socket of its own, with our socket filter when filtered.
func rawSubscriber(t *testing.T, filtered bool, ours ...string) *netlink.Conn {
	t.Helper()
	nl, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nl.Close() })
	if err := nl.SetReadBuffer(16 << 20); err != nil {
		t.Fatal(err)
	}
	if filtered {
		if _, err := attachFilter(nl, ours); err != nil {
			t.Fatal(err)
		}
	}
	if err := nl.JoinGroup(unix.NFNLGRP_NFTABLES); err != nil {
		t.Fatal(err)
	}
	return nl
}

// readTransaction reads datagrams until a generation message and returns every message, copied.
func readTransaction(t *testing.T, nl *netlink.Conn) []message {
	t.Helper()
	msgs, _ := readTransactionRaw(t, nl)
	return msgs
}

// readTransactionRaw also returns the raw datagrams.
func readTransactionRaw(t *testing.T, nl *netlink.Conn) ([]message, [][]byte) {
	t.Helper()
	rc, err := nl.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	_ = nl.SetReadDeadline(time.Now().Add(5 * time.Second))
	var out []message
	var datagrams [][]byte
	buf := make([]byte, 64<<10)
	for {
		var n int
		var rerr error
		if err := rc.Read(func(fd uintptr) bool {
			n, _, _, _, rerr = unix.Recvmsg(int(fd), buf, nil, unix.MSG_DONTWAIT)
			return rerr != unix.EAGAIN
		}); err != nil || rerr != nil {
			t.Fatalf("read notifications: %v %v", err, rerr)
		}
		b := append([]byte(nil), buf[:n]...)
		datagrams = append(datagrams, b)
		for {
			m, rest, ok := nextMessage(b)
			if !ok {
				break
			}
			b = rest
			out = append(out, m)
			if m.typ == unix.NFT_MSG_NEWGEN {
				return out, datagrams
			}
		}
	}
}

func count(msgs []message, typ uint8) int {
	n := 0
	for _, m := range msgs {
		if m.typ == typ {
			n++
		}
	}
	return n
}

// rulesText is n rules added to chain c of table (family, name), one transaction for nft -f.
func rulesText(family, table, chain string, n int, extra string) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "add rule %s %s %s ip daddr 10.200.%d.%d tcp dport 80 counter accept\n", family, table, chain, i/250, i%250)
	}
	return b.String() + extra
}

// TestSocketFilterDropsForeignRulesOnly pins what the socket filter lets through, against the kernel's own
// notifications: a transaction of foreign rules arrives as its generation message alone; rules of our table,
// and a chain coalesced into a datagram behind foreign rules, arrive.
func TestSocketFilterDropsForeignRulesOnly(t *testing.T) {
	freshConn(t)
	ours := "nodelocaldns-7"
	testenv.NftApply(t, fmt.Sprintf("add table ip big\nadd chain ip big c\nadd table inet %[1]s\nadd chain inet %[1]s c\n", ours))
	filtered, plain := rawSubscriber(t, true, ours), rawSubscriber(t, false)

	testenv.NftApply(t, rulesText("ip", "big", "c", 1000, ""))
	all, datagrams := readTransactionRaw(t, plain)
	if got := count(all, unix.NFT_MSG_NEWRULE); got != 1000 {
		t.Fatalf("unfiltered socket saw %d rule notifications, want 1000", got)
	}
	if len(datagrams) >= 1000 {
		t.Logf("the kernel did not coalesce notifications (%d datagrams): the filter sees one message each", len(datagrams))
	}
	if got := readTransaction(t, filtered); len(got) != 1 || got[0].typ != unix.NFT_MSG_NEWGEN {
		t.Errorf("filtered socket saw %d messages (%d rules) for a foreign-rules transaction, want the generation alone", len(got), count(got, unix.NFT_MSG_NEWRULE))
	}

	testenv.NftApply(t, "flush chain ip big c\n")
	_ = readTransaction(t, plain)
	if got := readTransaction(t, filtered); len(got) != 1 {
		t.Errorf("filtered socket saw %d messages (%d rule deletions) for a foreign flush, want the generation alone", len(got), count(got, unix.NFT_MSG_DELRULE))
	}

	testenv.NftApply(t, rulesText("inet", ours, "c", 300, ""))
	_ = readTransaction(t, plain)
	if got := count(readTransaction(t, filtered), unix.NFT_MSG_NEWRULE); got != 300 {
		t.Errorf("filtered socket saw %d of 300 rules added to our table %s", got, ours)
	}

	// A name that only starts like ours is not ours.
	testenv.NftApply(t, "add table inet nodelocaldns-77\nadd chain inet nodelocaldns-77 c\n")
	_, _ = readTransaction(t, plain), readTransaction(t, filtered)
	testenv.NftApply(t, rulesText("inet", "nodelocaldns-77", "c", 300, ""))
	_ = readTransaction(t, plain)
	if got := count(readTransaction(t, filtered), unix.NFT_MSG_NEWRULE); got != 0 {
		t.Errorf("filtered socket saw %d rules of inet nodelocaldns-77, want 0", got)
	}

	// Rules first, then a base chain: it shares a datagram with the last rules, and must arrive.
	testenv.NftApply(t, rulesText("ip", "big", "c", 500, "add chain ip big input { type filter hook input priority 0; policy drop; }\n"))
	_ = readTransaction(t, plain)
	got := readTransaction(t, filtered)
	if count(got, unix.NFT_MSG_NEWCHAIN) != 1 {
		t.Errorf("filtered socket missed the base chain added behind 500 foreign rules (saw %d messages)", len(got))
	}
	if n := count(got, unix.NFT_MSG_NEWRULE); n >= 500 {
		t.Errorf("filtered socket saw all %d foreign rules", n)
	}
}

// TestDatagramWalkDoesNotAllocate feeds the watcher a real datagram of foreign rule notifications, as an
// unfiltered socket receives them: walking it must not allocate.
func TestDatagramWalkDoesNotAllocate(t *testing.T) {
	freshConn(t)
	testenv.NftApply(t, "add table ip big\nadd chain ip big c\n")
	plain := rawSubscriber(t, false)
	testenv.NftApply(t, rulesText("ip", "big", "c", 200, ""))
	_, datagrams := readTransactionRaw(t, plain)
	d := datagrams[0]
	if m, _, _ := nextMessage(d); m.typ != unix.NFT_MSG_NEWRULE {
		t.Fatalf("first datagram starts with message type %d, want a rule", m.typ)
	}
	w := &watcher{state: watchState{ours: []string{nft.TableName}, chains: map[chainKey]chainHook{}}}
	if a := testing.AllocsPerRun(100, func() { w.datagram(d) }); a != 0 {
		t.Errorf("walking a datagram of foreign rules allocates %v times", a)
	}
	if len(w.reasons) != 0 {
		t.Errorf("foreign rules gave reasons %q", w.reasons)
	}
}
