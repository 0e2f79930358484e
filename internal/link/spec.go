package link

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Link kinds, and the name of the short-lived link that [New] creates to ask the kernel which kinds exist.
const (
	// KindDummy is the production kind, as in node-cache.
	KindDummy = "dummy"
	// KindIfb is the fallback for kernels built without dummy support. It is a plain ARPHRD_ETHER device that
	// sends nothing anywhere unless a tc redirect points at it, so it can hold local addresses just as well.
	KindIfb = "ifb"
	// probeName is short, unlikely to collide, and not of the ifbN form that the ifb module claims.
	probeName = "nldns-probe"
	// maxNameLen is IFNAMSIZ (16) minus the terminating NUL.
	maxNameLen = 15
)

// Spec is the desired state of our interface: it exists, is UP, and carries exactly IPs as host routes (/32, /128).
type Spec struct {
	Name string
	IPs  []netip.Addr
}

// Validate reports the first reason the kernel would refuse s, or why we refuse it, in terms of the flags
// (`-interfacename`, `-localip`) a user set.
func (s Spec) Validate() error {
	if err := validName(s.Name); err != nil {
		return fmt.Errorf("interface name %q: %w", s.Name, err)
	}
	if len(s.IPs) == 0 {
		return fmt.Errorf("interface %q: no local IPs", s.Name)
	}
	seen := make(map[netip.Addr]bool, len(s.IPs))
	for _, ip := range s.IPs {
		switch {
		case !ip.IsValid():
			return fmt.Errorf("interface %q: invalid local IP", s.Name)
		case ip.Zone() != "":
			return fmt.Errorf("interface %q: local IP %s: zones are not allowed", s.Name, ip)
		case ip.IsUnspecified(), ip.IsMulticast():
			return fmt.Errorf("interface %q: local IP %s is not a unicast address", s.Name, ip)
		case seen[ip.Unmap()]:
			return fmt.Errorf("interface %q: local IP %s listed twice", s.Name, ip)
		}
		seen[ip.Unmap()] = true
	}
	return nil
}

// validName mirrors the kernel's dev_valid_name, plus the ifbN names we must never take.
func validName(name string) error {
	switch {
	case name == "":
		return errors.New("empty")
	case len(name) > maxNameLen:
		return fmt.Errorf("longer than %d bytes", maxNameLen)
	case name == "." || name == "..":
		return errors.New("not a valid interface name")
	case strings.ContainsAny(name, "/: \t\n\x00"):
		return errors.New("contains '/', ':', a space or a control character")
	case isIfbAutoName(name):
		return errors.New("reserved: the ifb module creates ifbN interfaces by itself")
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

// isIfbAutoName reports names of the form the ifb module creates by itself on load (ifb0, ifb1 with the default
// numifbs=2): our interface must never be mistaken for, or collide with, one of those.
func isIfbAutoName(name string) bool {
	digits := strings.TrimPrefix(name, "ifb")
	return digits != name && digits != "" && strings.Trim(digits, "0123456789") == ""
}
