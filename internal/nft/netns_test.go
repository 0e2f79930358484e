package nft

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// Test network (all inside namespaces the test creates; the test process itself already runs in a
// throwaway namespace, here called "node"):
//
//	pod ns   192.0.2.2/24  --veth--  192.0.2.1/24 node (+ 169.254.20.10/32, 10.96.0.10/32 on the same end)
//	kdns ns  198.51.100.2/24 --veth-- 198.51.100.1/24 node
//
// The node forwards between the two, as a Kubernetes node does between pods.
const (
	nodePodSide  = "192.0.2.1"
	podIP        = "192.0.2.2"
	nodeKdnsSide = "198.51.100.1"
	kubeDNSPodIP = "198.51.100.2"
	linkLocalIP  = "169.254.20.10"
	clusterIP    = "10.96.0.10"

	localAnswer   = "192.0.2.53"    // what the node-local responder answers
	kubeDNSAnswer = "198.51.100.53" // what the "kube-dns pod" answers
)

// netNS creates a named namespace connected to the test's namespace by a veth pair with the given /24
// addresses, and deletes it when the test ends. It returns the namespace name and the node-side link name.
func netNS(t *testing.T, role, nodeAddr, peerAddr string) (string, string) {
	t.Helper()
	name := fmt.Sprintf("nld-%s-%d", role, os.Getpid())
	hostLink := "nld-" + role
	sh(t, "ip", "netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	sh(t, "ip", "link", "add", hostLink, "type", "veth", "peer", "name", "eth0", "netns", name)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", hostLink).Run() })
	sh(t, "ip", "addr", "add", nodeAddr+"/24", "dev", hostLink)
	sh(t, "ip", "link", "set", hostLink, "up")
	in := func(args ...string) { sh(t, "ip", append([]string{"netns", "exec", name}, args...)...) }
	in("ip", "addr", "add", peerAddr+"/24", "dev", "eth0")
	in("ip", "link", "set", "eth0", "up")
	in("ip", "link", "set", "lo", "up")
	in("ip", "route", "add", "default", "via", nodeAddr)
	return name, hostLink
}

// inNetNS runs fn on a thread switched into the named namespace; sockets fn opens stay there.
func inNetNS(t *testing.T, name string, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	target, err := netns.GetFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic("cannot return to the test namespace: " + err.Error()) // the thread is unusable
		}
	}()
	fn()
}

// digFrom queries server for an A record from inside the namespace, over UDP or TCP, and returns the answer
// ("" on timeout or error).
func digFrom(t *testing.T, ns, server string, tcp bool) string {
	t.Helper()
	args := []string{"netns", "exec", ns, "dig", "+short", "+tries=1", "+time=2", "@" + server, "test.example.", "A"}
	if tcp {
		args = append(args, "+tcp")
	}
	out, _ := exec.Command("ip", args...).CombinedOutput()
	s := strings.TrimSpace(string(out))
	if strings.Contains(s, ";;") { // dig's "connection timed out" and friends
		return ""
	}
	return s
}

// conntrackEntries lists the test namespace's conntrack entries that mention ip.
func conntrackEntries(t *testing.T, ip string) []string {
	t.Helper()
	out, err := exec.Command("conntrack", "-L").Output()
	if err != nil {
		t.Fatalf("conntrack -L: %v", err)
	}
	var hits []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "="+ip+" ") {
			hits = append(hits, line)
		}
	}
	return hits
}

// activateConntrack loads a ct rule in a table of its own, as any host firewall or kube-proxy would, so the
// namespace tracks connections at all.
func activateConntrack(t *testing.T) {
	t.Helper()
	nftStdin(t, `table inet host-firewall {
	chain input { type filter hook input priority filter; policy accept; ct state established,related accept; }
	chain forward { type filter hook forward priority filter; policy accept; ct state established,related accept; }
}
`)
	sh(t, "conntrack", "-F")
	time.Sleep(10 * time.Millisecond)
}
