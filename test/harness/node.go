package harness

import (
	"fmt"
	"os/exec"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// The node of the end-to-end tests that send a pod's traffic through it (lifecycle, foreign): testenv's pod
// network, the agent in the node namespace, kube-dns behind kube-proxy's DNAT:
//
//	pod       192.0.2.2 (node side 192.0.2.1)        queries ClusterIP:53 and LocalIP:53
//	kube-dns  198.51.100.2 (node side 198.51.100.1)  the ClusterIP's backend: kube-proxy DNATs ClusterIP:53 here
//	          198.51.100.3                           kube-dns-upstream: the agent forwards cluster.local here
//
// Both kube-dns addresses answer every A query with their own fixed address, so an answer says whether the agent
// (through kube-dns-upstream) or kube-dns itself (through the DNAT) served it.
//
// kube-dns-upstream also has a ClusterIP, UpstreamClusterIP, for agents given it as their upstream: kube-proxy's
// DNAT takes it to the upstream server, as in a cluster. The link-local fallback sends queries to the kube-dns
// ClusterIP (KUBE_DNS_SERVICE_HOST=ClusterIP), so its answers say kube-dns served them.
const (
	LocalIP           = "169.254.20.10"
	ClusterIP         = "10.96.0.10"
	UpstreamAddr      = "198.51.100.3"
	UpstreamClusterIP = "10.96.0.11"

	// The same for an IPv6-only cluster (NewNode6): its node-local address is a ULA, as node-cache's docs
	// recommend for IPv6, and kube-dns-upstream listens on UpstreamAddr6 beside testenv.KubeDNSAddr6.
	LocalIP6           = "fd00::10"
	ClusterIP6         = "fd00:96::a"
	UpstreamAddr6      = "2001:db8:2::3"
	UpstreamClusterIP6 = "fd00:96::b"

	AnswerKubeDNS = "203.0.113.1" // kube-dns reached through the DNAT: the agent is not in the path
	AnswerAgent   = "203.0.113.2" // kube-dns-upstream: the agent served (or forwarded) it
)

// kubeProxyRuleset is what kube-proxy's nftables mode boils down to for one UDP+TCP Service with one endpoint:
// DNAT at prerouting dstnat (pods) and output dstnat (host clients). Our notrack at raw priority runs before it.
var kubeProxyRuleset = fmt.Sprintf(`table ip kube-proxy {
	chain prerouting {
		type nat hook prerouting priority -100; policy accept;
		ip daddr %[1]s udp dport 53 dnat to %[2]s:53
		ip daddr %[1]s tcp dport 53 dnat to %[2]s:53
		ip daddr %[3]s udp dport 53 dnat to %[4]s:53
		ip daddr %[3]s tcp dport 53 dnat to %[4]s:53
	}
	chain output {
		type nat hook output priority -100; policy accept;
		ip daddr %[1]s udp dport 53 dnat to %[2]s:53
		ip daddr %[1]s tcp dport 53 dnat to %[2]s:53
		ip daddr %[3]s meta l4proto { tcp, udp } th dport 53 dnat to %[4]s:53
	}
}
`, ClusterIP, testenv.KubeDNSAddr, UpstreamClusterIP, UpstreamAddr)

// kubeProxyRuleset6 is kubeProxyRuleset for NewNode6's IPv6 Services.
var kubeProxyRuleset6 = fmt.Sprintf(`table ip6 kube-proxy {
	chain prerouting {
		type nat hook prerouting priority -100; policy accept;
		ip6 daddr %[1]s meta l4proto { tcp, udp } th dport 53 dnat to [%[2]s]:53
		ip6 daddr %[3]s meta l4proto { tcp, udp } th dport 53 dnat to [%[4]s]:53
	}
	chain output {
		type nat hook output priority -100; policy accept;
		ip6 daddr %[1]s meta l4proto { tcp, udp } th dport 53 dnat to [%[2]s]:53
		ip6 daddr %[3]s meta l4proto { tcp, udp } th dport 53 dnat to [%[4]s]:53
	}
}
`, ClusterIP6, testenv.KubeDNSAddr6, UpstreamClusterIP6, UpstreamAddr6)

// Node is the fixture around the agents: the pod network, kube-proxy's DNAT, the two kube-dns servers.
type Node struct {
	*testenv.PodNetwork
	Upstream *Upstream // kube-dns-upstream, the agent's forward target
	Direct   *Upstream // kube-dns behind the ClusterIP's DNAT
}

// ApplyKubeProxy puts kube-proxy's DNAT (back) in place, as kube-proxy does on its next sync after something
// flushed it.
func ApplyKubeProxy(t testing.TB) { testenv.NftApply(t, kubeProxyRuleset) }

// NewNode builds the node; everything goes when the test ends.
func NewNode(t testing.TB) *Node {
	t.Helper()
	n := &Node{PodNetwork: testenv.NewPodNetwork(t)}
	n.KubeDNS.Exec(t, "ip", "addr", "add", UpstreamAddr+"/24", "dev", "eth0")
	n.KubeDNS.Do(t, func() {
		n.Direct = StartUpstream(t, testenv.KubeDNSAddr+":53", AnswerKubeDNS)
		n.Upstream = StartUpstream(t, UpstreamAddr+":53", AnswerAgent)
	})
	// Every node routes the Service range; here towards kube-dns (the DNAT decides where a query really goes).
	testenv.Run(t, "ip", "route", "replace", "10.96.0.0/16", "via", testenv.KubeDNSAddr)
	ApplyKubeProxy(t)
	t.Cleanup(func() { _ = exec.Command("nft", "delete", "table", "ip", "kube-proxy").Run() })
	return n
}

// NewNode6 builds the node of an IPv6-only cluster: NewNode's with every address, Service and kube-proxy rule
// IPv6 (the peers keep their IPv4 addresses, which nothing uses).
func NewNode6(t testing.TB) *Node {
	t.Helper()
	n := &Node{PodNetwork: testenv.NewPodNetwork(t)}
	n.AddIPv6(t)
	n.KubeDNS.Exec(t, "ip", "addr", "add", UpstreamAddr6+"/64", "dev", "eth0", "nodad")
	n.KubeDNS.Do(t, func() {
		n.Direct = StartUpstream(t, "["+testenv.KubeDNSAddr6+"]:53", AnswerKubeDNS)
		n.Upstream = StartUpstream(t, "["+UpstreamAddr6+"]:53", AnswerAgent)
	})
	testenv.Run(t, "ip", "-6", "route", "replace", "fd00:96::/112", "via", testenv.KubeDNSAddr6)
	testenv.NftApply(t, kubeProxyRuleset6)
	t.Cleanup(func() { _ = exec.Command("nft", "delete", "table", "ip6", "kube-proxy").Run() })
	return n
}
