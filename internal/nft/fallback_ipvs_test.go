package nft

import (
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// TestFallbackThroughIPVS is the fallback in front of kube-proxy's IPVS mode, where the pods' only nameserver
// is the link-local address: kube-proxy holds every ClusterIP on its kube-ipvs0 interface and serves it at
// input through an IPVS virtual service (NAT forwarding, conntrack on). With no listener, a pod's query to the
// link-local address is rewritten to the kube-dns ClusterIP, taken by IPVS to kube-dns, and answered from the
// link-local address (IPVS un-NATs the reply to the ClusterIP; the reply rule writes the original address back); with an instance serving, it is answered locally. Needs ip_vs, which Debian's stock kernel has
// (the kernel VM, `make test-kernel`) and the development kernel has not.
func TestFallbackThroughIPVS(t *testing.T) {
	if _, err := os.Stat("/proc/net/ip_vs"); err != nil {
		t.Skip("skipping: needs the ip_vs module (the kernel VM has it: make test-kernel)")
	}
	if _, err := exec.LookPath("ipvsadm"); err != nil {
		t.Skip("skipping: needs ipvsadm")
	}
	c := freshConn(t)
	pn := testenv.NewPodNetwork(t)
	pod, podLink := pn.Pod, pn.Pod.HostIf
	if err := os.WriteFile("/proc/sys/net/ipv4/vs/conntrack", []byte("1"), 0o644); err != nil {
		t.Fatalf("IPVS conntrack: %v", err)
	}
	const upstream = "10.96.0.10" // kube-dns's ClusterIP
	testenv.Run(t, "ip", "addr", "add", linkLocalIP+"/32", "dev", podLink)
	// kube-ipvs0 is a dummy interface holding every ClusterIP, down, as kube-proxy makes it.
	testenv.Run(t, "ip", "link", "add", "kube-ipvs0", "type", "dummy")
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", "kube-ipvs0").Run() })
	testenv.Run(t, "ip", "addr", "add", upstream+"/32", "dev", "kube-ipvs0")
	for _, proto := range []string{"-u", "-t"} {
		testenv.Run(t, "ipvsadm", "-A", proto, upstream+":53", "-s", "rr")
		testenv.Run(t, "ipvsadm", "-a", proto, upstream+":53", "-r", kubeDNSPodIP+":53", "-m")
	}
	t.Cleanup(func() { _ = exec.Command("ipvsadm", "-C").Run() })
	pn.KubeDNS.Do(t, func() { startDNS(t, kubeDNSPodIP, kubeDNSAnswer) })
	expect := func(server, when, want string) {
		t.Helper()
		for _, tcp := range []bool{false, true} {
			if got := digFrom(t, pod, server, tcp); got != want {
				t.Errorf("%s: pod's query to %s (tcp=%v) answered %q, want %q", when, server, tcp, got, want)
			}
		}
	}
	expect(upstream, "IPVS alone (the observer works)", kubeDNSAnswer)
	expect(linkLocalIP, "no fallback, no listener", "")
	ll := netip.MustParseAddr(linkLocalIP)
	if err := c.ApplyFallback(BuildFallback(FallbackSpec{Targets: []netip.Addr{netip.MustParseAddr(upstream)}, Covered: []netip.AddrPort{netip.AddrPortFrom(ll, 53)}, Lease: time.Hour})); err != nil {
		t.Fatalf("ApplyFallback: %v", err)
	}
	expect(linkLocalIP, "fallback, no instance", kubeDNSAnswer)
	stop := startDNS(t, linkLocalIP, localAnswer)
	if err := c.Apply(Build(Spec{LocalIPs: []netip.Addr{ll}, DNSPort: 53, HealthPort: 8080})); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	expect(linkLocalIP, "fallback, instance serving", localAnswer)
	stop()
	if err := c.Teardown(); err != nil { // what the kernel does when the instance dies
		t.Fatalf("Teardown: %v", err)
	}
	expect(linkLocalIP, "fallback, instance gone", kubeDNSAnswer)
}
