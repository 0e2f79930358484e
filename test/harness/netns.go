package harness

import (
	"runtime"

	"fmt"
	"github.com/vishvananda/netns"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
)

var nsSeq atomic.Int64

// Peer is a second network namespace joined to the test's own by a veth pair: a "pod" or a "kube-dns" host.
type Peer struct {
	Name     string // `ip netns` name
	HostIf   string // the veth end in the test's namespace
	HostAddr string // address on HostIf, e.g. 192.0.2.1
	Addr     string // address inside the peer, e.g. 192.0.2.2
}

// AddPeer creates namespace role-<pid>-<n> with a veth to the test's namespace: hostAddr/24 on our side,
// addr/24 on theirs, and a default route in the peer via hostAddr. It is deleted when the test ends.
func AddPeer(t testing.TB, role, hostAddr, addr string) *Peer {
	t.Helper()
	n := nsSeq.Add(1)
	p := &Peer{
		Name:     fmt.Sprintf("%s-%d-%d", role, os.Getpid(), n),
		HostIf:   fmt.Sprintf("v%s%d", role[:min(3, len(role))], n),
		HostAddr: hostAddr, Addr: addr,
	}
	Run(t, "ip", "netns", "add", p.Name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", p.Name).Run() })
	Run(t, "ip", "link", "add", p.HostIf, "type", "veth", "peer", "name", "eth0", "netns", p.Name)
	Run(t, "ip", "addr", "add", hostAddr+"/24", "dev", p.HostIf)
	Run(t, "ip", "link", "set", p.HostIf, "up")
	p.Exec(t, "ip", "link", "set", "lo", "up")
	p.Exec(t, "ip", "addr", "add", addr+"/24", "dev", "eth0")
	p.Exec(t, "ip", "link", "set", "eth0", "up")
	p.Exec(t, "ip", "route", "add", "default", "via", hostAddr)
	return p
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

func doInNetNS(name string, fn func()) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// The thread is not unlocked: if switching back failed, it must die with the goroutine rather than
		// serve other goroutines from the wrong namespace.
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		target, err := netns.GetFromName(name)
		if err != nil {
			errc <- fmt.Errorf("open netns %s: %w", name, err)
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			errc <- fmt.Errorf("enter netns %s: %w", name, err)
			return
		}
		fn()
		if err := netns.Set(orig); err != nil {
			errc <- err
			return
		}
		runtime.UnlockOSThread()
		errc <- nil
	}()
	return <-errc
}
