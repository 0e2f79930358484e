package nftconn

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// Test network: testenv's pod network (the test process itself runs in a throwaway namespace, the "node"), with
// the listen IPs on the node's end of the pod's veth:
//
//	pod ns   192.0.2.2/24  --veth--  192.0.2.1/24 node (+ 169.254.20.10/32, 10.96.0.10/32 on the same end)
//	kdns ns  198.51.100.2/24 --veth-- 198.51.100.1/24 node
const (
	nodePodSide  = testenv.PodHost
	podIP        = testenv.PodAddr
	kubeDNSPodIP = testenv.KubeDNSAddr
	linkLocalIP  = "169.254.20.10"
	clusterIP    = "10.96.0.10"

	localAnswer   = "192.0.2.53"    // what the node-local responder answers
	kubeDNSAnswer = "198.51.100.53" // what the "kube-dns pod" answers
)

// digFrom queries server for an A record from inside the peer, over UDP or TCP, and returns the answer ("" on
// timeout or error).
func digFrom(t *testing.T, p *testenv.Peer, server string, tcp bool) string {
	t.Helper()
	args := []string{"netns", "exec", p.Name, "dig", "+short", "+tries=1", "+time=2", "@" + server, "test.example.", "A"}
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

// digFromHost asks server for test.example from the test's own namespace, as a host-network client: the A
// record, or "" when nothing usable answered.
func digFromHost(server string, tcp bool) string {
	args := []string{"+short", "+tries=1", "+time=2", "@" + server, "test.example.", "A"}
	if tcp {
		args = append(args, "+tcp")
	}
	out, _ := exec.Command("dig", args...).CombinedOutput()
	if s := strings.TrimSpace(string(out)); !strings.Contains(s, ";;") {
		return s
	}
	return ""
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
// namespace tracks connections at all, and flushes the table of entries. Both are done when the commands return:
// the ct expression registers conntrack's hooks in the namespace when nft's transaction commits, and the flush
// has unlinked every entry when conntrack's netlink request is acknowledged.
func activateConntrack(t *testing.T) {
	t.Helper()
	testenv.NftApply(t, `table inet host-firewall {
	chain input { type filter hook input priority filter; policy accept; ct state established,related accept; }
	chain forward { type filter hook forward priority filter; policy accept; ct state established,related accept; }
}
`)
	testenv.Run(t, "conntrack", "-F")
}
