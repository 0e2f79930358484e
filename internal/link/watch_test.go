package link

import (
	"context"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/vishvananda/netlink"
	"go.uber.org/zap/zaptest"

	"github.com/nodelocaldns/nodelocaldns/internal/nlwatch"
)

// triggerLatency bounds how long a tamper may take to reach trigger. It includes forking `ip`; the measured
// figures (logged) are in the low milliseconds on the host, the bound is loose for a loaded 2-core CI machine,
// and looser in the kernel-matrix VM, where QEMU emulates every instruction (TCG) and forking `ip` alone can
// take half a second.
func triggerLatency() time.Duration {
	if os.Getenv(vmEnv) == "1" {
		return 5 * time.Second
	}
	return time.Second
}

type event struct {
	reason string
	at     time.Time
}

// startWatch runs watch on our link with cfg and returns the channel its triggers go to; hook, when set, runs
// inside trigger (the watch goroutine).
func startWatch(t *testing.T, cfg watchConfig, hook func(string)) <-chan event {
	t.Helper()
	events := make(chan event, 1024)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- watch(ctx, zaptest.NewLogger(t), testSpec().Name, func(r string) {
			events <- event{r, time.Now()}
			if hook != nil {
				hook(r)
			}
		}, cfg)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("watch returned %v after cancel, want nil", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("watch did not return after cancel")
		}
	})
	return events
}

// waitFor returns the delay from start to the first event with reason; other reasons before it are skipped
// (deleting a link also removes its addresses).
func waitFor(t *testing.T, events <-chan event, reason string, start time.Time) time.Duration {
	t.Helper()
	deadline := time.After(triggerLatency())
	for {
		select {
		case e := <-events:
			if e.reason == reason {
				return e.at.Sub(start)
			}
		case <-deadline:
			t.Fatalf("no %q trigger within %v", reason, triggerLatency())
		}
	}
}

// quiet fails on any trigger within d, and drains nothing else.
func quiet(t *testing.T, events <-chan event, d time.Duration, what string) {
	t.Helper()
	select {
	case e := <-events:
		t.Errorf("%s: unexpected trigger %q", what, e.reason)
	case <-time.After(d):
	}
}

// drain discards triggers (those the tamper's tail and our own repair cause) until none came for d, or for
// triggerLatency at most: a starved watch (the VM on a busy machine) delivers them late, not never, and a fixed
// span would leave the late ones to the next step's "nothing changed".
func drain(events <-chan event, d time.Duration) {
	end := time.After(triggerLatency())
	for {
		select {
		case <-events:
		case <-time.After(d):
			return
		case <-end:
			return
		}
	}
}

// ready waits until the watch's subscriptions are live, using a stray address on our link as a probe.
func ready(t *testing.T, m *Manager, events <-chan event) {
	t.Helper()
	for range 50 {
		ip(t, "addr", "add", "192.0.2.99/32", "dev", testSpec().Name)
		if _, err := m.Ensure(testSpec()); err != nil {
			t.Fatalf("Ensure: %v", err)
		}
		select {
		case <-events:
			drain(events, 50*time.Millisecond)
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatal("watch never became ready")
}

func TestKernelWatchTriggers(t *testing.T) {
	testenv.RequireRoot(t)
	m := kernelManager(t)
	s := testSpec()
	if _, err := m.Ensure(s); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	events := startWatch(t, watchConfig{rcvbuf: defaultRcvbuf, backoff: nlwatch.DefaultBackoff()}, nil)
	ready(t, m, events)
	tampers := []struct {
		name   string
		cmds   [][]string
		reason string
	}{
		{"address deleted", [][]string{{"addr", "del", "169.254.20.10/32", "dev", s.Name}}, ReasonAddrRemoved},
		{"ipv6 address deleted", [][]string{{"addr", "del", "fd00::10/128", "dev", s.Name}}, ReasonAddrRemoved},
		{"link down", [][]string{{"link", "set", s.Name, "down"}}, ReasonLinkDown},
		{"link deleted", [][]string{{"link", "del", s.Name}}, ReasonLinkDeleted},
		// Kernels before 6.2 refuse to rename a link that is up (EBUSY), so set it down first.
		{"link renamed", [][]string{{"link", "set", s.Name, "down"}, {"link", "set", s.Name, "name", "nldns-moved"}},
			ReasonLinkRenamed},
	}
	for _, tc := range tampers {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			for _, args := range tc.cmds {
				ip(t, args...)
			}
			d := waitFor(t, events, tc.reason, start)
			t.Logf("%s -> trigger %q after %v", tc.name, tc.reason, d.Round(time.Microsecond))
			if tc.reason == ReasonLinkRenamed {
				ip(t, "link", "del", "nldns-moved")
			}
			if _, err := m.Ensure(s); err != nil {
				t.Fatalf("repair: %v", err)
			}
			drain(events, 100*time.Millisecond)
			if changes, err := m.Ensure(s); err != nil || len(changes) != 0 {
				t.Fatalf("after repair Ensure = %q, %v", changes, err)
			}
		})
	}
	t.Run("idle after repair", func(t *testing.T) {
		quiet(t, events, 300*time.Millisecond, "nothing changed")
	})
	t.Run("unrelated link", func(t *testing.T) {
		other := "nldns-other"
		ip(t, "link", "add", other, "type", "ifb")
		t.Cleanup(func() { _ = netlink.LinkDel(&netlink.Ifb{LinkAttrs: netlink.LinkAttrs{Name: other}}) })
		for _, args := range [][]string{
			{"link", "set", other, "up"},
			{"addr", "add", "198.51.100.1/32", "dev", other},
			{"addr", "del", "198.51.100.1/32", "dev", other},
			{"link", "set", other, "down"},
			{"link", "del", other},
		} {
			ip(t, args...)
		}
		quiet(t, events, 300*time.Millisecond, "changes to another link")
	})
}

// TestKernelWatchOverrun makes the kernel drop notifications (ENOBUFS on a tiny receive buffer while the watch
// is stuck in trigger) and checks that the watch resubscribes and asks for a full pass, then still works.
func TestKernelWatchOverrun(t *testing.T) {
	testenv.RequireRoot(t)
	m := kernelManager(t)
	s := testSpec()
	if _, err := m.Ensure(s); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	stuck, release := make(chan struct{}), make(chan struct{})
	blocked := false // read and written on the watch goroutine only
	events := startWatch(t, watchConfig{rcvbuf: 1, backoff: nlwatch.Backoff{Min: 10 * time.Millisecond, Max: 10 * time.Millisecond}}, func(string) {
		// Block in the first trigger, whatever its reason. The buffer is so small that the probe's own
		// notifications, or the kernel's for the new link (its IPv6 link-local address), can overrun it
		// before ready's address removal is read: the first trigger is then an overrun, and the removal is
		// lost with the old subscription.
		if !blocked {
			blocked = true
			close(stuck)
			<-release
		}
	})
	// Registered after startWatch's cleanup, so it runs first: a test that fails while the watch is stuck in
	// trigger must not leave it there, out of reach of cancel.
	unblock := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock)
	ready(t, m, events)
	select {
	case <-stuck:
	case <-time.After(triggerLatency()):
		t.Fatal("the watch is not blocked in trigger after ready's probe triggered")
	}
	flood(t, 300)
	unblock()
	start := time.Now()
	waitFor(t, events, nlwatch.ReasonOverrun, start)
	drain(events, 100*time.Millisecond)
	// The new subscription works. Removing an address sends one notification, which even this buffer holds;
	// setting the link down would send several, to both sockets, and could overrun it again.
	start = time.Now()
	ip(t, "addr", "del", "169.254.20.10/32", "dev", s.Name)
	t.Logf("after resubscribing: address removed -> trigger after %v", waitFor(t, events, ReasonAddrRemoved, start))
}

// flood generates 2n address notifications on a throwaway link through netlink (no fork per event).
func flood(t *testing.T, n int) {
	t.Helper()
	l := &netlink.Ifb{LinkAttrs: netlink.LinkAttrs{Name: "nldns-flood"}}
	if err := netlink.LinkAdd(l); err != nil {
		t.Fatalf("add flood link: %v", err)
	}
	defer netlink.LinkDel(l)
	for i := range n {
		a := &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(198, 51, 100, byte(i%250+1)), Mask: net.CIDRMask(32, 32)}}
		if err := netlink.AddrAdd(l, a); err != nil {
			t.Fatalf("flood add %v: %v", a, err)
		}
		if err := netlink.AddrDel(l, a); err != nil {
			t.Fatalf("flood del %v: %v", a, err)
		}
	}
	t.Logf("flooded %d address notifications", 2*n)
}
