package testenv

import (
	"os"
	"testing"
)

// The pod network of the tests that send real traffic through a node (internal/nft's traffic tests, the
// end-to-end lifecycle and foreign-drop tests). The test's own throwaway namespace is the node; two peers hang
// off it by veth, and the node forwards between them as a Kubernetes node does between pods:
//
//	pod       192.0.2.2/24    (node side 192.0.2.1)
//	kube-dns  198.51.100.2/24 (node side 198.51.100.1)
//
// and, after [PodNetwork.AddIPv6]:
//
//	pod       2001:db8:1::2/64 (node side 2001:db8:1::1)
//	kube-dns  2001:db8:2::2/64 (node side 2001:db8:2::1)
const (
	PodHost, PodAddr         = "192.0.2.1", "192.0.2.2"
	KubeDNSHost, KubeDNSAddr = "198.51.100.1", "198.51.100.2"

	PodHost6, PodAddr6         = "2001:db8:1::1", "2001:db8:1::2"
	KubeDNSHost6, KubeDNSAddr6 = "2001:db8:2::1", "2001:db8:2::2"
)

// PodNetwork is the node's two peers.
type PodNetwork struct {
	Pod, KubeDNS *Peer
}

// NewPodNetwork creates the pod and kube-dns peers and turns on forwarding (IPv4, and IPv6 where the kernel has
// it) in the node.
func NewPodNetwork(t testing.TB) *PodNetwork {
	t.Helper()
	knobs := []string{"/proc/sys/net/ipv4/ip_forward"}
	if ipv6Enabled() {
		knobs = append(knobs, "/proc/sys/net/ipv6/conf/all/forwarding")
	}
	for _, f := range knobs {
		if err := os.WriteFile(f, []byte("1"), 0o644); err != nil {
			t.Fatalf("enable forwarding in the node namespace: %v", err)
		}
	}
	return &PodNetwork{Pod: AddPeer(t, "pod", PodHost, PodAddr), KubeDNS: AddPeer(t, "kubedns", KubeDNSHost, KubeDNSAddr)}
}

// AddIPv6 gives the pod network its IPv6 side: the addresses above (no duplicate address detection, so they
// are usable at once), and the peers' default routes via the node.
func (pn *PodNetwork) AddIPv6(t testing.TB) {
	t.Helper()
	Run(t, "ip", "addr", "add", PodHost6+"/64", "dev", pn.Pod.HostIf, "nodad")
	Run(t, "ip", "addr", "add", KubeDNSHost6+"/64", "dev", pn.KubeDNS.HostIf, "nodad")
	for _, p := range []struct {
		peer       *Peer
		addr, host string
	}{{pn.Pod, PodAddr6, PodHost6}, {pn.KubeDNS, KubeDNSAddr6, KubeDNSHost6}} {
		p.peer.Exec(t, "ip", "addr", "add", p.addr+"/64", "dev", "eth0", "nodad")
		p.peer.Exec(t, "ip", "-6", "route", "add", "default", "via", p.host)
	}
}
