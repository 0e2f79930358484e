package nftconn

import (
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/miekg/dns"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
)

// The IPv6 side of the test network of netns_test.go (testenv.PodNetwork.AddIPv6).
const (
	kubeDNSPodIP6 = testenv.KubeDNSAddr6
	clusterIP6    = "fd00:96::a"
)

// startDNS answers every A query with answer over UDP and TCP on ip:53 until the returned stop is called (or
// the test ends).
func startDNS(t *testing.T, ip, answer string) (stop func()) {
	t.Helper()
	_, stop = testenv.ServeDNS(t, net.JoinHostPort(ip, "53"), dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		rr, _ := dns.NewRR(q.Question[0].Name + " 5 IN A " + answer)
		m.Answer = append(m.Answer, rr)
		_ = w.WriteMsg(m)
	}))
	return stop
}

// TestGateFailsOpen is the gate with real packets: a query to the ClusterIP from a pod is notracked and
// answered locally only while a DNS server listens on the ClusterIP itself; with no listener it stays tracked
// and kube-proxy's DNAT takes it to kube-dns; a listener back takes the next query again. UDP and TCP, IPv4 and
// IPv6, with our table in place all along.
func TestGateFailsOpen(t *testing.T) {
	c := freshConn(t)
	pn := testenv.NewPodNetwork(t)
	pod, kdns := pn.Pod, pn.KubeDNS
	pn.AddIPv6(t)
	testenv.Run(t, "ip", "addr", "add", clusterIP+"/32", "dev", pod.HostIf)
	testenv.Run(t, "ip", "addr", "add", clusterIP6+"/128", "dev", pod.HostIf, "nodad")
	kdns.Do(t, func() {
		startDNS(t, kubeDNSPodIP, kubeDNSAnswer)
		startDNS(t, kubeDNSPodIP6, kubeDNSAnswer)
	})
	activateConntrack(t)
	testenv.NftApply(t, `table inet kube-proxy {
	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr `+clusterIP+` meta l4proto { tcp, udp } th dport 53 dnat ip to `+kubeDNSPodIP+`:53
		ip6 daddr `+clusterIP6+` meta l4proto { tcp, udp } th dport 53 dnat ip6 to [`+kubeDNSPodIP6+`]:53
	}
}
`)
	spec := nft.Spec{LocalIPs: []netip.Addr{netip.MustParseAddr(clusterIP), netip.MustParseAddr(clusterIP6)}, DNSPort: 53, HealthPort: 8080}
	if err := c.Apply(nft.Build(spec)); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	for _, ip := range []string{clusterIP, clusterIP6} {
		expect := func(when, want string) {
			t.Helper()
			for _, tcp := range []bool{false, true} {
				if got := digFrom(t, pod, ip, tcp); got != want {
					t.Errorf("%s: query to %s (tcp=%v) answered %q, want %q", when, ip, tcp, got, want)
				}
			}
		}
		expect("no listener", kubeDNSAnswer)
		stop := startDNS(t, ip, localAnswer)
		testenv.Run(t, "conntrack", "-F") // the DNATed queries above left entries; only new ones count
		expect("listener bound to the address", localAnswer)
		if e := conntrackEntries(t, ip); len(e) != 0 {
			t.Errorf("queries to a listening %s were tracked:\n%v", ip, e)
		}
		stop()
		expect("listener gone", kubeDNSAnswer)
		startDNS(t, ip, localAnswer)
		expect("listener back", localAnswer)
	}
}

// TestUngatedFollowsTheBoundAddresses is the table for a kernel without nft_socket, with real packets: pods'
// queries are notracked only for the addresses the agent knows a listener is bound to (the bound sets), so a
// Corefile whose bind leaves the ClusterIP out sends its queries to kube-dns through the DNAT, while the
// link-local address is answered locally. What the agent cannot know, a listener gone inside a running process,
// is the cost: the query is notracked and refused.
func TestUngatedFollowsTheBoundAddresses(t *testing.T) {
	c := freshConn(t)
	pn := testenv.NewPodNetwork(t)
	pod := pn.Pod
	for _, ip := range []string{clusterIP, linkLocalIP} {
		testenv.Run(t, "ip", "addr", "add", ip+"/32", "dev", pod.HostIf)
	}
	pn.KubeDNS.Do(t, func() { startDNS(t, kubeDNSPodIP, kubeDNSAnswer) })
	activateConntrack(t)
	testenv.NftApply(t, `table inet kube-proxy {
	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr `+clusterIP+` meta l4proto { tcp, udp } th dport 53 dnat ip to `+kubeDNSPodIP+`:53
	}
}
`)
	stop := startDNS(t, linkLocalIP, localAnswer)
	spec := nft.Spec{LocalIPs: ips(linkLocalIP, clusterIP), DNSPort: 53, HealthPort: 8080, Ungated: true, Unbound: ips(clusterIP)}
	if err := c.Apply(nft.Build(spec)); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	expect := func(when, ip, want string) {
		t.Helper()
		for _, tcp := range []bool{false, true} {
			if got := digFrom(t, pod, ip, tcp); got != want {
				t.Errorf("%s: query to %s (tcp=%v) answered %q, want %q", when, ip, tcp, got, want)
			}
		}
	}
	expect("ClusterIP not bound", clusterIP, kubeDNSAnswer)
	expect("link-local address bound", linkLocalIP, localAnswer)
	stop()
	expect("listener gone, the agent not told", linkLocalIP, "")
}

// TestKernelWithoutNftSocket runs in the kernel VM booted with nft_socket held back (make test-kernel's second
// boot), as a distribution kernel built without it: the gated table is refused with the error the supervisor
// takes for "no socket expression" (node.serve), and the ungated one, matching the bound sets, is programmed.
func TestKernelWithoutNftSocket(t *testing.T) {
	if !strings.Contains(" "+os.Getenv("NODELOCALDNS_VM_HELD_BACK")+" ", " nft_socket ") {
		t.Skip("skipping: runs only in the kernel VM booted without nft_socket (make test-kernel)")
	}
	c := freshConn(t)
	spec := nft.Spec{LocalIPs: ips(linkLocalIP), DNSPort: 53, HealthPort: 8080}
	err := c.Apply(nft.Build(spec))
	if err == nil || !(nft.IsNotSupported(err) || nft.IsNotExist(err)) {
		t.Fatalf("Apply of the gated table = %v, want the kernel's refusal of the socket expression", err)
	}
	spec.Ungated = true
	if err := c.Apply(nft.Build(spec)); err != nil {
		t.Fatalf("Apply of the ungated table: %v", err)
	}
	if l := testenv.Run(t, "nft", "list", "chain", "inet", c.Table(), nft.ChainRawPrerouting); !strings.Contains(l, "@bound4") || strings.Contains(l, "socket") {
		t.Errorf("the ungated table's prerouting rules do not match the bound sets:\n%s", l)
	}
}
