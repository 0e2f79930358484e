package podwatch

import (
	"net/netip"
	"slices"
	"strings"
)

// pod is what the watcher keeps of a pod on its node.
type pod struct {
	Metadata struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		HostNetwork bool `json:"hostNetwork"`
	} `json:"spec"`
	Status struct {
		PodIPs []struct {
			IP string `json:"ip"`
		} `json:"podIPs"`
	} `json:"status"`
}

func (p pod) key() string { return p.Metadata.Namespace + "/" + p.Metadata.Name }

// names is who each address is, from the node's pods: "namespace/pod" for a pod with its own address. The
// host-network pods share the node's addresses, and so does every process on the node: their address is named
// "host network", with the host-network pods on it listed, never one of them picked.
func names(pods map[string]pod) map[netip.Addr]string {
	own := map[netip.Addr]string{}
	host := map[netip.Addr][]string{}
	for k, p := range pods {
		for _, ip := range p.Status.PodIPs {
			a, err := netip.ParseAddr(ip.IP)
			if err != nil {
				continue
			}
			if p.Spec.HostNetwork {
				host[a] = append(host[a], k)
			} else {
				own[a] = k
			}
		}
	}
	for a, ks := range host {
		slices.Sort(ks)
		own[a] = "host network (" + strings.Join(ks, ", ") + ")"
	}
	return own
}
