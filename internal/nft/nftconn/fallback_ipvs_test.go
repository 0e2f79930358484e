package nftconn

import (
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// TestFallbackThroughIPVS is the fallback in front of kube-proxy's IPVS mode, where the pods' only nameserver
// is the node-local address: kube-proxy holds every ClusterIP on its kube-ipvs0 interface and serves it at
// input through an IPVS virtual service (NAT forwarding, conntrack on). With no listener, a pod's query to the
// local address is rewritten to the kube-dns ClusterIP, taken by IPVS to kube-dns, and answered from the
// local address (IPVS un-NATs the reply to the ClusterIP; the reply rule writes the original address back);
// with an instance serving, it is answered locally. IPv4 and IPv6, with transmit checksum offload off on every
// link, so that each receiver checks what the two rewrites left. Needs ip_vs, which Debian's stock kernel has
// (the kernel VM, `make test-kernel`) and the development kernel has not.
func TestFallbackThroughIPVS(t *testing.T) {
	if _, err := os.Stat("/proc/net/ip_vs"); err != nil {
		t.Skip("skipping: needs the ip_vs module (the kernel VM has it: make test-kernel)")
	}
	for _, tool := range []string{"ipvsadm", "ethtool"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skip("skipping: needs " + tool)
		}
	}
	for _, fam := range []struct{ name, clusterIP, local, kubeDNS string }{
		{"ipv4", "10.96.0.10", linkLocalIP, kubeDNSPodIP},
		{"ipv6", clusterIP6, local6, kubeDNSPodIP6},
	} {
		t.Run(fam.name, func(t *testing.T) { fallbackThroughIPVS(t, fam.clusterIP, fam.local, fam.kubeDNS) })
	}
}

func fallbackThroughIPVS(t *testing.T, upstream, local, kubeDNS string) {
	c := freshConn(t)
	pn := testenv.NewPodNetwork(t)
	pod, podLink := pn.Pod, pn.Pod.HostIf
	if err := os.WriteFile("/proc/sys/net/ipv4/vs/conntrack", []byte("1"), 0o644); err != nil { // both families'
		t.Fatalf("IPVS conntrack: %v", err)
	}
	bits, service, backend, dad := "/32", upstream+":53", kubeDNS+":53", []string{}
	if strings.Contains(upstream, ":") {
		pn.AddIPv6(t)
		bits, service, backend, dad = "/128", "["+upstream+"]:53", "["+kubeDNS+"]:53", []string{"nodad"}
	}
	testenv.Run(t, "ip", append([]string{"addr", "add", local + bits, "dev", podLink}, dad...)...)
	// kube-ipvs0 is a dummy interface holding every ClusterIP, down, as kube-proxy makes it.
	testenv.Run(t, "ip", "link", "add", "kube-ipvs0", "type", "dummy")
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", "kube-ipvs0").Run() })
	testenv.Run(t, "ip", append([]string{"addr", "add", upstream + bits, "dev", "kube-ipvs0"}, dad...)...)
	for _, proto := range []string{"-u", "-t"} {
		testenv.Run(t, "ipvsadm", "-A", proto, service, "-s", "rr")
		testenv.Run(t, "ipvsadm", "-a", proto, service, "-r", backend, "-m")
	}
	t.Cleanup(func() { _ = exec.Command("ipvsadm", "-C").Run() })
	for _, p := range []*testenv.Peer{pn.Pod, pn.KubeDNS} {
		testenv.Run(t, "ip", "netns", "exec", p.Name, "ethtool", "-K", "eth0", "tx", "off")
		testenv.Run(t, "ethtool", "-K", p.HostIf, "tx", "off")
	}
	pn.KubeDNS.Do(t, func() { startDNS(t, kubeDNS, kubeDNSAnswer) })
	expect := func(server, when, want string) {
		t.Helper()
		for _, tcp := range []bool{false, true} {
			if got := digFrom(t, pod, server, tcp); got != want {
				t.Errorf("%s: pod's query to %s (tcp=%v) answered %q, want %q", when, server, tcp, got, want)
			}
		}
	}
	expect(upstream, "IPVS alone (the observer works)", kubeDNSAnswer)
	expect(local, "no fallback, no listener", "")
	ll := netip.MustParseAddr(local)
	if err := c.Fallback().Apply(nft.BuildFallback(nft.FallbackSpec{Targets: []netip.Addr{netip.MustParseAddr(upstream)}, Covered: []netip.AddrPort{netip.AddrPortFrom(ll, 53)}, Lease: time.Hour})); err != nil {
		t.Fatalf("ApplyFallback: %v", err)
	}
	before := csumErrors(t, pn.Pod, pn.KubeDNS)
	expect(local, "fallback, no instance", kubeDNSAnswer)
	if after := csumErrors(t, pn.Pod, pn.KubeDNS); after != before {
		t.Errorf("receivers counted checksum errors: %d before, %d after", before, after)
	}
	stop := startDNS(t, local, localAnswer)
	if err := c.Apply(nft.Build(nft.Spec{LocalIPs: []netip.Addr{ll}, DNSPort: 53, HealthPort: 8080})); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	expect(local, "fallback, instance serving", localAnswer)
	stop()
	if err := c.Teardown(); err != nil { // what the kernel does when the instance dies
		t.Fatalf("Teardown: %v", err)
	}
	expect(local, "fallback, instance gone", kubeDNSAnswer)
}
