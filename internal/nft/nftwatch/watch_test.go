package nftwatch

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/nft/nftconn"
	"github.com/nodelocaldns/nodelocaldns/internal/nlwatch"
)

// startWatch runs Watch until the test ends and returns the channel of trigger reasons.
func startWatch(t *testing.T, trigger func(string), opts ...Option) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	subscribed := make(chan struct{}, 1)
	opts = append(opts, OnSubscribed(func() {
		// Only the first is waited for; a blocking send would stall Watch, out of reach of cancel, after a
		// few resubscriptions.
		select {
		case subscribed <- struct{}{}:
		default:
		}
	}))
	go func() { done <- Watch(ctx, zaptest.NewLogger(t), trigger, opts...) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Watch returned %v after cancel, want nil", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("Watch did not return after cancel")
		}
	})
	select { // every transaction committed from here on is seen
	case <-subscribed:
	case err := <-done:
		t.Fatalf("Watch: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not subscribe within 5s")
	}
}

func collect() (func(string), <-chan string) {
	ch := make(chan string, 1000)
	return func(r string) { ch <- r }, ch
}

func next(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("no trigger within 5s")
		return ""
	}
}

func TestWatchIgnoresOwnWritesAndSeesOthers(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts func(*nftconn.Conn) []Option
	}{
		{"by connection", func(c *nftconn.Conn) []Option { return []Option{IgnoreConn(c)} }},
		{"by pid", func(*nftconn.Conn) []Option { return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := freshConn(t)
			testenv.Run(t, "nft", "add", "table", "ip", "sentinel")
			trigger, ch := collect()
			startWatch(t, trigger, tc.opts(c)...)
			rs := nft.Build(dualStack)
			for range 3 {
				if err := c.Apply(rs); err != nil {
					t.Fatalf("Apply: %v", err)
				}
			}
			if err := c.Teardown(); err != nil {
				t.Fatal(err)
			}
			if err := c.Apply(rs); err != nil {
				t.Fatal(err)
			}
			// Notifications arrive in commit order: if our writes triggered, they would come first.
			testenv.Run(t, "nft", "delete", "table", "ip", "sentinel")
			if r := next(t, ch); !strings.Contains(r, "delete table ip sentinel") || !strings.Contains(r, "nft[") {
				t.Errorf("first trigger = %q, want the sentinel's deletion by nft (our own writes must not trigger)", r)
			}
			testenv.Run(t, "nft", "add", "table", "ip", "unrelated")
			testenv.Run(t, "nft", "add", "chain", "ip", "unrelated", "c")
			// Our table is owned: another process's rule is refused, so nothing changes and nothing triggers.
			if out, err := exec.Command("nft", "add", "rule", "inet", nft.TableName, nft.ChainFilterInput, "tcp", "dport", "22", "accept").CombinedOutput(); err == nil {
				t.Fatalf("a foreign rule in our owned table was accepted: %s", out)
			}
			// nft flush ruleset skips our owned table and deletes the unrelated one: that deletion triggers.
			testenv.Run(t, "nft", "flush", "ruleset")
			if r := next(t, ch); !strings.Contains(r, "delete table ip unrelated") {
				t.Errorf("trigger after nft flush ruleset = %q, want the unrelated table's deletion (unrelated additions are no trigger)", r)
			}
			if _, err := exec.Command("nft", "list", "table", "inet", nft.TableName).Output(); err != nil {
				t.Errorf("our owned table is gone after nft flush ruleset: %v", err)
			}
			testenv.Run(t, "nft", "add", "table", "inet", "filter")
			testenv.Run(t, "nft", "add", "chain", "inet", "filter", "input", "{ type filter hook input priority 0; policy drop; }")
			if r := next(t, ch); !strings.Contains(r, "add chain (base chain input, hook 1, policy drop) in inet filter") {
				t.Errorf("trigger = %q, want a foreign base chain", r)
			}
		})
	}
}

// TestGenerationCarriesWriterPort pins the kernel behaviour IgnoreConn relies on: the generation message that
// ends a transaction carries the netlink port of the socket that committed it.
func TestGenerationCarriesWriterPort(t *testing.T) {
	c := freshConn(t)
	nl := rawSubscriber(t, false)
	if err := c.Apply(nft.Build(dualStack)); err != nil {
		t.Fatal(err)
	}
	if c.PortID() == 0 {
		t.Fatal("PortID() = 0 after Apply")
	}
	for _, m := range readTransaction(t, nl) {
		if m.typ == unix.NFT_MSG_NEWGEN && m.portID != c.PortID() {
			t.Errorf("generation port = %d, our socket = %d", m.portID, c.PortID())
		}
	}
}

func TestWatchResubscribesAfterOverrun(t *testing.T) {
	freshConn(t) // root, and a clean ruleset
	testenv.Run(t, "nft", "add", "table", "ip", "sentinel")
	var once sync.Once
	release := make(chan struct{})
	reasons := make(chan string, 1000)
	trigger := func(r string) {
		reasons <- r
		once.Do(func() { <-release }) // stall the reader so the tiny socket buffer overflows
	}
	startWatch(t, trigger, WithReadBuffer(4096))
	// Registered after startWatch's cleanup, so it runs first: a test that fails while Watch is stuck in
	// trigger must not leave it there, out of reach of cancel.
	unblock := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock)
	testenv.Run(t, "nft", "delete", "table", "ip", "sentinel") // first trigger; Watch now blocks in it
	for i := range 50 {
		testenv.Run(t, "nft", "add", "table", "ip", fmt.Sprintf("t%d", i))
	}
	unblock()
	waitReason(t, reasons, nlwatch.ReasonOverrun, "no overrun trigger after overflowing a 4 KiB socket buffer")
	// And it keeps watching on the new socket.
	testenv.Run(t, "nft", "delete", "table", "ip", "t0")
	waitReason(t, reasons, "delete table ip t0", "no trigger for a table deleted after resubscribing")
}

// waitReason skips reasons until one contains want, and fails with msg if none does within 5s.
func waitReason(t *testing.T, reasons <-chan string, want, msg string) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case r := <-reasons:
			if strings.Contains(r, want) {
				return
			}
		case <-deadline:
			t.Fatal(msg)
		}
	}
}

// TestWatchBaseChainsOnlyWhenChanged: a foreign table rewritten the way kube-proxy and iptables-nft-restore
// do it (flush, re-declare the base chain unchanged, re-add every rule) is no trigger; a base chain whose
// policy changes, or that goes, is. With Tables, only the named tables are ours.
func TestWatchBaseChainsOnlyWhenChanged(t *testing.T) {
	freshConn(t)
	ours := "nodelocaldns-3"
	rewrite := "add table ip big\nflush table ip big\n" +
		"add chain ip big input { type filter hook input priority -5; policy accept; }\nadd chain ip big c\n" +
		rulesText("ip", "big", "c", 2000, "")
	testenv.NftApply(t, rewrite)
	testenv.NftApply(t, fmt.Sprintf("add table inet %[1]s\nadd chain inet %[1]s c\nadd table inet %[2]s\nadd chain inet %[2]s c\nadd table ip sentinel\n", ours, nft.TableName))
	trigger, ch := collect()
	startWatch(t, trigger, Tables(ours))
	testenv.NftApply(t, rewrite)
	testenv.Run(t, "nft", "add", "rule", "inet", nft.TableName, "c", "udp", "dport", "53", "drop") // not ours any more
	testenv.Run(t, "nft", "delete", "table", "ip", "sentinel")
	if r := next(t, ch); !strings.Contains(r, "delete table ip sentinel") {
		t.Fatalf("first trigger = %q, want the sentinel's deletion (an unchanged rewrite and another table's rule are no trigger)", r)
	}
	testenv.Run(t, "nft", "add", "chain", "ip", "big", "input", "{ type filter hook input priority -5; policy drop; }")
	if r := next(t, ch); !strings.Contains(r, "base chain input, hook 1, policy drop") || !strings.Contains(r, "ip big") {
		t.Errorf("trigger = %q, want the policy change of ip big input", r)
	}
	testenv.Run(t, "nft", "add", "rule", "inet", ours, "c", "udp", "dport", "53", "drop")
	if r := next(t, ch); !strings.Contains(r, "add rule in inet "+ours) {
		t.Errorf("trigger = %q, want the rule in our table %s", r, ours)
	}
	testenv.Run(t, "nft", "delete", "chain", "ip", "big", "input")
	if r := next(t, ch); !strings.Contains(r, "delete chain (base chain input) in ip big") {
		t.Errorf("trigger = %q, want the base chain's deletion", r)
	}
}
