package nftconn

import (
	"bufio"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// local6 stands for an IPv6 cluster's node-local address (its -localip).
const local6 = "fd00::10"

// TestIPv6RewriteEncoding reads the kernel's copy of the IPv6 rewrites back: each address write carries the
// transport checksum's pseudo-header flag (without it the kernel would forward every rewritten query with a
// wrong checksum), and names its L3 checksum inside the 16 bytes it then overwrites, so that nothing else of
// the packet changes. writeAddr says why it is encoded so.
func TestIPv6RewriteEncoding(t *testing.T) {
	c := freshConn(t)
	f := nft.BuildFallback(nft.FallbackSpec{Targets: addrs(clusterIP6), Covered: pairs("[" + local6 + "]:53"), Lease: time.Hour})
	if err := c.Fallback().Apply(f); err != nil {
		t.Fatalf("ApplyFallback: %v", err)
	}
	writes := 0
	ip6Daddr, _ := nft.AddrOffset(nft.DirTo, true)
	ip6Saddr, _ := nft.AddrOffset(nft.DirFrom, true)
	for _, fc := range f.Chains {
		ch, err := c.rd.ListChain(nft.InetTable(nft.FallbackTableName), fc.Name)
		if err != nil {
			t.Fatalf("chain %s: %v", fc.Name, err)
		}
		rules, err := c.rd.GetRules(nft.InetTable(nft.FallbackTableName), ch)
		if err != nil {
			t.Fatalf("rules of %s: %v", fc.Name, err)
		}
		for _, r := range rules {
			for _, e := range r.Exprs {
				p, ok := e.(*expr.Payload)
				if !ok || p.OperationType != expr.PayloadWrite {
					continue
				}
				writes++
				if p.Base != expr.PayloadBaseNetworkHeader || p.Len != 16 || (p.Offset != ip6Daddr && p.Offset != ip6Saddr) {
					t.Errorf("chain %s: write of %d bytes at network header + %d, want an IPv6 address", fc.Name, p.Len, p.Offset)
				}
				if p.CsumFlags != unix.NFT_PAYLOAD_L4CSUM_PSEUDOHDR {
					t.Errorf("chain %s: the kernel holds csum_flags %#x, want NFT_PAYLOAD_L4CSUM_PSEUDOHDR", fc.Name, p.CsumFlags)
				}
				if p.CsumType == expr.CsumTypeInet && (p.CsumOffset < p.Offset || p.CsumOffset+2 > p.Offset+p.Len) {
					t.Errorf("chain %s: L3 checksum at %d, outside the address written at %d: it would change another field", fc.Name, p.CsumOffset, p.Offset)
				}
			}
		}
	}
	if writes != 8 { // udp and tcp (one port) in each of pod-prerouting, host-output, pod-reply and host-reply
		t.Errorf("%d address writes read back, want 8", writes)
	}
}

// TestFallbackTrafficIPv6 is TestFallbackTraffic for an IPv6-only cluster: with nothing taking the IPv6 local
// address, a pod's and a host-network client's queries to it are answered by kube-dns through a
// kube-proxy-like DNAT of the IPv6 ClusterIP, from the address they asked; with an instance serving, locally.
// UDP and TCP, in three checksum set-ups, since a wrong checksum fix shows only where the stack computes or
// checks the checksum: transmit offload on everywhere (the checksum is left to a NIC that never sees the
// packet: nobody checks it); on in the pod but off on the node's side of kube-dns's link (the node finishes
// the partial checksum in software, so kube-dns checks what the rewrite left as the pseudo-header); off
// everywhere (full checksums, fixed incrementally and checked by each receiver). Receivers count no
// checksum error.
func TestFallbackTrafficIPv6(t *testing.T) {
	if _, err := exec.LookPath("ethtool"); err != nil {
		t.Skip("needs ethtool (scripts/deps.sh test installs it)")
	}
	c := freshConn(t)
	pn := testenv.NewPodNetwork(t)
	pod, kdns := pn.Pod, pn.KubeDNS
	pn.AddIPv6(t)
	testenv.Run(t, "ip", "addr", "add", local6+"/128", "dev", pod.HostIf, "nodad")
	testenv.Run(t, "ip", "-6", "route", "add", "fd00:96::/64", "via", kubeDNSPodIP6) // every node routes the service range
	kdns.Do(t, func() { startDNS(t, kubeDNSPodIP6, kubeDNSAnswer) })
	testenv.NftApply(t, `table inet kube-proxy {
	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		ip6 daddr `+clusterIP6+` meta l4proto { tcp, udp } th dport 53 dnat ip6 to [`+kubeDNSPodIP6+`]:53
	}
	chain nat-output {
		type nat hook output priority -100; policy accept;
		ip6 daddr `+clusterIP6+` meta l4proto { tcp, udp } th dport 53 dnat ip6 to [`+kubeDNSPodIP6+`]:53
	}
}
`)
	ll := netip.MustParseAddr(local6)
	f := nft.BuildFallback(nft.FallbackSpec{Targets: addrs(clusterIP6), Covered: []netip.AddrPort{netip.AddrPortFrom(ll, 53)}, Lease: time.Hour})
	if err := c.Fallback().Apply(f); err != nil {
		t.Fatalf("ApplyFallback: %v", err)
	}
	expect := func(when, want string) {
		t.Helper()
		for _, tcp := range []bool{false, true} {
			if got := digFrom(t, pod, local6, tcp); got != want {
				t.Errorf("%s: pod's query (tcp=%v) answered %q, want %q", when, tcp, got, want)
			}
			if got := digFromHost(local6, tcp); got != want {
				t.Errorf("%s: host-network query (tcp=%v) answered %q, want %q", when, tcp, got, want)
			}
		}
	}
	// The four ends of the two veth pairs, and the three set-ups by the ends whose transmit offload is off.
	type end struct {
		ns     *testenv.Peer // nil: the node's
		ifname string
	}
	ends := []end{{pod, "eth0"}, {kdns, "eth0"}, {nil, pod.HostIf}, {nil, kdns.HostIf}}
	tx := func(e end, on bool) {
		args := []string{"-K", e.ifname, "tx", map[bool]string{true: "on", false: "off"}[on]}
		if e.ns != nil {
			args = append([]string{"netns", "exec", e.ns.Name, "ethtool"}, args...)
			testenv.Run(t, "ip", args...)
			return
		}
		testenv.Run(t, "ethtool", args...)
	}
	for _, setup := range []struct {
		name string
		off  []end
	}{
		{"transmit checksum offload on", nil},
		{"offload on in the pod, off towards kube-dns", []end{{nil, kdns.HostIf}}},
		{"transmit checksum offload off", ends},
	} {
		for _, e := range ends {
			tx(e, !slices.Contains(setup.off, e))
		}
		before := csumErrors(t, kdns, pod)
		expect(setup.name+", nothing listening", kubeDNSAnswer)
		if after := csumErrors(t, kdns, pod); after != before {
			t.Errorf("%s: receivers counted checksum errors: %d before, %d after", setup.name, before, after)
		}
	}
	spec := nft.Spec{LocalIPs: []netip.Addr{ll}, DNSPort: 53, HealthPort: 8080}
	if err := c.Apply(nft.Registration(spec)); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	startDNS(t, local6, localAnswer)
	if err := c.Apply(nft.Build(spec)); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	expect("instance serving", localAnswer)
	if err := c.Teardown(); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	expect("instance gone, its listener still bound", kubeDNSAnswer)
}

// csumErrors is the sum of the UDP and TCP checksum errors that the peers' and the node's stacks counted.
func csumErrors(t *testing.T, peers ...*testenv.Peer) int {
	t.Helper()
	n := readCsumErrors(t, nil)
	for _, p := range peers {
		n += readCsumErrors(t, p)
	}
	return n
}

// readCsumErrors reads Udp6InCsumErrors (/proc/net/snmp6) and Tcp InCsumErrors (/proc/net/snmp, both
// families) in p's namespace (the test's own when p is nil).
func readCsumErrors(t *testing.T, p *testenv.Peer) int {
	t.Helper()
	read := func(file string) string {
		cmd := exec.Command("cat", file)
		if p != nil {
			cmd = exec.Command("ip", "netns", "exec", p.Name, "cat", file)
		}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("read %s: %v", file, err)
		}
		return string(out)
	}
	n := 0
	sc := bufio.NewScanner(strings.NewReader(read("/proc/net/snmp6")))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "Udp6InCsumErrors" {
			v, _ := strconv.Atoi(f[1])
			n += v
		}
	}
	// /proc/net/snmp: a header line of names, then a line of values, per protocol.
	lines := strings.Split(read("/proc/net/snmp"), "\n")
	for i := 0; i+1 < len(lines); i++ {
		names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(names) == 0 || names[0] != "Tcp:" || len(values) != len(names) || values[0] != "Tcp:" {
			continue
		}
		for j, name := range names {
			if name == "InCsumErrors" {
				v, _ := strconv.Atoi(values[j])
				n += v
			}
		}
	}
	return n
}
