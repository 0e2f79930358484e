package nft

import (
	"errors"
	"fmt"
	"net/netip"
)

// Spec is everything the table depends on. The zero ports are invalid; callers pass the values of
// `-dns.port` and `-health-port`.
type Spec struct {
	// LocalIPs are the listen IPs (the link-local IP and usually the kube-dns ClusterIP), IPv4 and IPv6 mixed.
	LocalIPs []netip.Addr
	// DNSPort is the port the cache answers on (`-dns.port`, 53).
	DNSPort uint16
	// HealthPort is the port of the Corefile's health plugin (`-health-port`, 8080).
	HealthPort uint16
	// Ungated drops the socket gate from the prerouting rules (see [Gate]): the fallback for a kernel
	// without nft_socket, where a crash blackholes pods' ClusterIP queries again.
	Ungated bool
	// NoInterception (-setupiptables=false) programs no base chain at all, only the sets and a marker chain.
	NoInterception bool
}

// Validate reports the first reason the spec cannot be programmed, naming the bad value.
func (s Spec) Validate() error {
	if len(s.LocalIPs) == 0 {
		return errors.New("no local IPs")
	}
	for _, ip := range s.LocalIPs {
		switch {
		case !ip.IsValid():
			return errors.New("invalid local IP (zero value)")
		case ip.Zone() != "":
			return fmt.Errorf("local IP %s: zones are not supported", ip)
		case ip.Is4In6():
			// An IPv4 packet never carries a mapped address; the rule would silently match nothing.
			return fmt.Errorf("local IP %s: IPv4-mapped IPv6 address, use %s", ip, ip.Unmap())
		case ip.IsUnspecified():
			return fmt.Errorf("local IP %s: unspecified address", ip)
		case ip.IsMulticast():
			return fmt.Errorf("local IP %s: multicast address", ip)
		}
	}
	if s.DNSPort == 0 {
		return errors.New("dns port 0")
	}
	if s.HealthPort == 0 {
		return errors.New("health port 0")
	}
	return nil
}
