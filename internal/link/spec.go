package link

import (
	"fmt"
	"net/netip"

	"github.com/nodelocaldns/nodelocaldns/internal/addr"
)

// Link kinds, and the name of the short-lived link that [New] creates to ask the kernel which kinds exist.
const (
	// KindDummy is the production kind, as in node-cache.
	KindDummy = "dummy"
	// KindIfb is the fallback for kernels built without dummy support. It is a plain ARPHRD_ETHER device that
	// sends nothing anywhere unless a tc redirect points at it, so it can hold local addresses just as well.
	KindIfb = "ifb"
	// trialName is short, unlikely to collide, and not of the ifbN form that the ifb module claims.
	trialName = "nldns-probe"
)

// Spec is the desired state of our interface: it exists, is UP, and carries exactly IPs as host routes (/32, /128).
type Spec struct {
	Name string
	IPs  []netip.Addr
}

// Validate reports the first reason the kernel would refuse s, or why we refuse it, in terms of the flags
// (`-interfacename`, `-localip`) a user set.
func (s Spec) Validate() error {
	if err := addr.CheckInterfaceName(s.Name); err != nil {
		return err
	}
	if err := addr.CheckListenIPs(s.IPs); err != nil {
		return fmt.Errorf("interface %q: %w", s.Name, err)
	}
	return nil
}

// prefixes returns the spec's IPs as host prefixes (/32 or /128), IPv4-mapped IPv6 addresses taken as IPv4.
func (s Spec) prefixes() []netip.Prefix {
	out := make([]netip.Prefix, 0, len(s.IPs))
	for _, ip := range s.IPs {
		ip = ip.Unmap()
		out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
	}
	return out
}
