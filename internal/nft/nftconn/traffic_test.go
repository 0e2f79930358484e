package nftconn

import (
	"net/netip"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

func TestNotrackBypassesConntrack(t *testing.T) {
	c := freshConn(t)
	pod := testenv.AddPeer(t, "pod", nodePodSide, podIP)
	testenv.Run(t, "ip", "addr", "add", linkLocalIP+"/32", "dev", pod.HostIf)
	startDNS(t, linkLocalIP, localAnswer)
	activateConntrack(t)

	if err := c.Apply(nft.Build(nft.Spec{LocalIPs: []netip.Addr{netip.MustParseAddr(linkLocalIP)}, DNSPort: 53, HealthPort: 8080})); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	for _, tcp := range []bool{false, true} {
		if got := digFrom(t, pod, linkLocalIP, tcp); got != localAnswer {
			t.Fatalf("query from pod (tcp=%v) answered %q, want %q", tcp, got, localAnswer)
		}
	}
	if e := conntrackEntries(t, linkLocalIP); len(e) != 0 {
		t.Errorf("with our table, conntrack has entries for %s:\n%v", linkLocalIP, e)
	}

	if err := c.Teardown(); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	for _, tcp := range []bool{false, true} {
		if got := digFrom(t, pod, linkLocalIP, tcp); got != localAnswer {
			t.Fatalf("query from pod after teardown (tcp=%v) answered %q, want %q", tcp, got, localAnswer)
		}
	}
	e := conntrackEntries(t, linkLocalIP)
	var udp, tcp bool
	for _, line := range e {
		udp = udp || len(line) > 3 && line[:3] == "udp"
		tcp = tcp || len(line) > 3 && line[:3] == "tcp"
	}
	if !udp || !tcp {
		t.Errorf("after teardown, want udp and tcp conntrack entries for %s (the observer works), got:\n%v", linkLocalIP, e)
	}
}

// TestCoexistsWithKubeProxyDNAT checks the reason notrack exists: a query to the kube-dns ClusterIP is
// answered by the node-local cache while our table is there, and by kube-dns through kube-proxy's DNAT once
// it is gone, for kube-proxy's nftables mode and for iptables-nft.
func TestCoexistsWithKubeProxyDNAT(t *testing.T) {
	for _, tc := range []struct {
		name string
		dnat func(t *testing.T)
	}{
		{"nftables kube-proxy", func(t *testing.T) {
			testenv.NftApply(t, `table ip kube-proxy {
	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr `+clusterIP+` udp dport 53 dnat to `+kubeDNSPodIP+`:53
		ip daddr `+clusterIP+` tcp dport 53 dnat to `+kubeDNSPodIP+`:53
	}
}
`)
		}},
		{"iptables-nft", func(t *testing.T) {
			for _, p := range []string{"udp", "tcp"} {
				testenv.Run(t, "iptables", "-w", "5", "-t", "nat", "-A", "PREROUTING", "-d", clusterIP+"/32", "-p", p, "--dport", "53",
					"-j", "DNAT", "--to-destination", kubeDNSPodIP+":53")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := freshConn(t)
			pn := testenv.NewPodNetwork(t)
			pod, kdns := pn.Pod, pn.KubeDNS
			for _, ip := range []string{linkLocalIP, clusterIP} {
				testenv.Run(t, "ip", "addr", "add", ip+"/32", "dev", pod.HostIf)
				startDNS(t, ip, localAnswer)
			}
			kdns.Do(t, func() { startDNS(t, kubeDNSPodIP, kubeDNSAnswer) })
			activateConntrack(t)
			tc.dnat(t)

			spec := nft.Spec{LocalIPs: []netip.Addr{netip.MustParseAddr(linkLocalIP), netip.MustParseAddr(clusterIP)}, DNSPort: 53, HealthPort: 8080}
			if err := c.Apply(nft.Build(spec)); err != nil {
				t.Fatalf("Apply: %v", err)
			}
			for _, tcp := range []bool{false, true} {
				if got := digFrom(t, pod, clusterIP, tcp); got != localAnswer {
					t.Errorf("with our table, ClusterIP query (tcp=%v) answered %q, want the local cache's %q", tcp, got, localAnswer)
				}
			}
			if err := c.Teardown(); err != nil {
				t.Fatalf("Teardown: %v", err)
			}
			for _, tcp := range []bool{false, true} {
				if got := digFrom(t, pod, clusterIP, tcp); got != kubeDNSAnswer {
					t.Errorf("after teardown, ClusterIP query (tcp=%v) answered %q, want kube-dns's %q via DNAT", tcp, got, kubeDNSAnswer)
				}
			}
		})
	}
}
