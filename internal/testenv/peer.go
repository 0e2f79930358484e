package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

var peerSeq atomic.Int64

// Peer is a second network namespace joined to the test's own by a veth pair: a "pod" or a "kube-dns" host.
type Peer struct {
	Name     string // `ip netns` name
	HostIf   string // the veth end in the test's namespace
	HostAddr string // address on HostIf, e.g. 192.0.2.1
	Addr     string // address inside the peer (on eth0), e.g. 192.0.2.2
}

// AddPeer creates namespace role-<pid>-<n> with a veth to the test's namespace: hostAddr/24 on our side,
// addr/24 on theirs, and a default route in the peer via hostAddr. It is deleted when the test ends.
//
// Both ends are ready for IPv6 too when AddPeer returns, so a test may send its first packet at once. A kernel
// link-local address stays tentative while duplicate address detection runs (1-2 s after the link comes up), and
// while it is, the kernel sends no neighbour solicitation for a packet it forwards (ndisc_send_ns needs a usable
// link-local source) and only tries again a second later: the first forwarded IPv6 packet of a fresh topology
// waited about 2 s, past a 2 s DNS client timeout. No other host shares these links, so AddPeer turns duplicate
// address detection off in both namespaces before the veth exists, then waits for each end's link-local address
// to be usable (the kernel adds it when the carrier comes up, asynchronously). Addresses a test adds itself on
// these links still want `nodad`, which makes them usable synchronously.
func AddPeer(t testing.TB, role, hostAddr, addr string) *Peer {
	t.Helper()
	if !InThrowawayNetNS() {
		t.Fatal("testenv.AddPeer outside a throwaway network namespace (call testenv.RequireRoot first)")
	}
	n := peerSeq.Add(1)
	p := &Peer{
		Name:     fmt.Sprintf("%s-%d-%d", role, os.Getpid(), n),
		HostIf:   fmt.Sprintf("v%s%d", role[:min(3, len(role))], n),
		HostAddr: hostAddr, Addr: addr,
	}
	Run(t, "ip", "netns", "add", p.Name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", p.Name).Run() })
	ipv6 := ipv6Enabled()
	if ipv6 {
		if err := disableDAD(); err != nil {
			t.Fatalf("test namespace: %v", err)
		}
		var err error
		p.Do(t, func() { err = disableDAD() })
		if err != nil {
			t.Fatalf("namespace %s: %v", p.Name, err)
		}
	}
	Run(t, "ip", "link", "add", p.HostIf, "type", "veth", "peer", "name", "eth0", "netns", p.Name)
	// Deleting our end takes the pair at once. Deleting the namespace alone would leave it to the kernel's
	// asynchronous namespace cleanup, which on a busy machine ran into the next test: its new peer of the same
	// role got the same /24 on a second link, and replies went out the old one (found after the lifecycle
	// matrix, whose next test's first query timed out).
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", p.HostIf).Run() })
	Run(t, "ip", "addr", "add", hostAddr+"/24", "dev", p.HostIf)
	Run(t, "ip", "link", "set", p.HostIf, "up")
	p.Exec(t, "ip", "link", "set", "lo", "up")
	p.Exec(t, "ip", "addr", "add", addr+"/24", "dev", "eth0")
	p.Exec(t, "ip", "link", "set", "eth0", "up")
	p.Exec(t, "ip", "route", "add", "default", "via", hostAddr)
	if !ipv6 {
		return p
	}
	EventuallyNil(t, 5*time.Second, "IPv6 link-local addresses on "+p.HostIf+" and "+p.Name+"/eth0", func() error {
		if err := linkLocalReady(p.HostIf); err != nil {
			return err
		}
		var err error
		p.Do(t, func() { err = linkLocalReady("eth0") })
		return err
	})
	return p
}

// ipv6Enabled reports whether the kernel has IPv6 (it has no /proc/sys/net/ipv6 when booted with ipv6.disable=1).
func ipv6Enabled() bool {
	_, err := os.Stat("/proc/sys/net/ipv6")
	return err == nil
}

// disableDAD sets accept_dad to 0 for all and for future links of the calling thread's network namespace (the
// kernel skips the detection only when both the "all" value and the link's own are below 1).
func disableDAD() error {
	for _, f := range []string{"/proc/sys/net/ipv6/conf/all/accept_dad", "/proc/sys/net/ipv6/conf/default/accept_dad"} {
		if err := os.WriteFile(f, []byte("0"), 0o644); err != nil {
			return fmt.Errorf("turn off IPv6 duplicate address detection: %w", err)
		}
	}
	return nil
}

// linkLocalReady reports why the named link of the calling thread's namespace has no usable IPv6 link-local
// address yet (nil once it has one that is not tentative).
func linkLocalReady(name string) error {
	link, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("link %s: %w", name, err)
	}
	addrs, err := netlink.AddrList(link, netlink.FAMILY_V6)
	if err != nil {
		return fmt.Errorf("addresses of %s: %w", name, err)
	}
	for _, a := range addrs {
		if a.IP.IsLinkLocalUnicast() {
			if a.Flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) != 0 {
				return fmt.Errorf("%s: %s is tentative", name, a.IPNet)
			}
			return nil
		}
	}
	return errors.New(name + ": no link-local address yet")
}

// Exec runs a command inside the peer and fails the test on error.
func (p *Peer) Exec(t testing.TB, name string, args ...string) string {
	t.Helper()
	return Run(t, "ip", append([]string{"netns", "exec", p.Name, name}, args...)...)
}

// Command returns an unstarted command that runs inside the peer.
func (p *Peer) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", p.Name, name}, args...)...)
}

// Run runs a command (an observer or a test fixture tool: ip, nft, iptables, conntrack) and fails the test on error.
func Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Do runs fn on a thread switched into the peer's namespace. Sockets fn opens stay in the peer after Do returns,
// so a test can open a client there (e.g. a dns.Client's connection) and use it from any goroutine.
func (p *Peer) Do(t testing.TB, fn func()) {
	t.Helper()
	if err := doInNetNS(p.Name, fn); err != nil {
		t.Fatal(err)
	}
}

// doInNetNS runs fn on a goroutine of its own, locked to a thread switched into the named namespace.
func doInNetNS(name string, fn func()) error {
	errc := make(chan error, 1)
	go func() {
		// Stays so if fn ends the goroutine (t.Fatal inside it, which has already failed the test).
		err := fmt.Errorf("in netns %s: the function did not return", name)
		defer func() { errc <- err }()
		err = runIn(name, fn)
	}()
	return <-errc
}

// runIn locks the calling goroutine to its thread, switches the thread into the named namespace, calls fn and
// switches back. The thread is unlocked only once back: otherwise it dies with the goroutine rather than serve
// other goroutines from the wrong namespace.
func runIn(name string, fn func()) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return err
	}
	defer orig.Close()
	target, err := netns.GetFromName(name)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", name, err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		return fmt.Errorf("enter netns %s: %w", name, err)
	}
	fn()
	if err := netns.Set(orig); err != nil {
		return fmt.Errorf("return from netns %s: %w", name, err)
	}
	runtime.UnlockOSThread()
	return nil
}
