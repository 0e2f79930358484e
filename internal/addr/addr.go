// Package addr holds the one definition of what the agent accepts as a listen IP and as its interface's name,
// and of how a query's source is read from the address a DNS server's writer gives (Client).
//
// The flags (internal/options), the interface (internal/link), the nftables table (internal/nft) and the Corefile
// (internal/corefile) all check these values; each calls this package so that a value one part accepts is never
// refused by another at run time. It is a leaf: it imports only the standard library, so every other package may
// import it.
//
// May touch: nothing.
package addr

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// maxInterfaceNameLen is IFNAMSIZ (16) minus the terminating NUL.
const maxInterfaceNameLen = 15

// CheckListenIP reports why ip cannot be a listen address, naming it; nil when it can.
func CheckListenIP(ip netip.Addr) error {
	switch {
	case !ip.IsValid():
		return errors.New("invalid local IP (zero value)")
	case ip.Zone() != "":
		// A zone scopes a link-local address to one interface; the listen IP lives on our own link, and neither
		// nft sets nor CoreDNS's bind take a zone.
		return fmt.Errorf("local IP %s: IPv6 zones are not supported", ip)
	case ip.Is4In6():
		// An IPv4 packet never carries a mapped address: a rule or bind on it would silently match nothing.
		return fmt.Errorf("local IP %s: IPv4-mapped IPv6 address, use %s", ip, ip.Unmap())
	case ip.IsUnspecified():
		return fmt.Errorf("local IP %s: unspecified address, not a unicast address", ip)
	case ip.IsMulticast():
		return fmt.Errorf("local IP %s: multicast address, not a unicast address", ip)
	}
	return nil
}

// CheckListenIPs reports why ips cannot be the agent's listen addresses: none, one refused by [CheckListenIP], or
// one listed twice.
func CheckListenIPs(ips []netip.Addr) error {
	if len(ips) == 0 {
		return errors.New("no local IPs")
	}
	seen := make(map[netip.Addr]bool, len(ips))
	for _, ip := range ips {
		if err := CheckListenIP(ip); err != nil {
			return err
		}
		if seen[ip] {
			return fmt.Errorf("local IP %s listed twice", ip)
		}
		seen[ip] = true
	}
	return nil
}

// CheckInterfaceName reports why the kernel would refuse name for a link (its dev_valid_name: IFNAMSIZ, not "."
// or "..", no '/', ':' or white space), or why we refuse it: ifbN is the name the ifb module gives the devices it
// creates by itself on load (numifbs=2 makes ifb0 and ifb1), and our fallback link kind is ifb, so such a name
// would collide with, or be mistaken for, one of those.
func CheckInterfaceName(name string) error {
	switch {
	case name == "":
		return errors.New("interface name is empty")
	case len(name) > maxInterfaceNameLen:
		return fmt.Errorf("interface name %q is longer than %d bytes", name, maxInterfaceNameLen)
	case name == "." || name == "..":
		return fmt.Errorf("interface name %q is not a valid interface name", name)
	case strings.ContainsAny(name, "/: \t\n\v\f\r\x00"):
		return fmt.Errorf("interface name %q contains '/', ':', a space or a control character", name)
	case isIfbAutoName(name):
		return fmt.Errorf("interface name %q is reserved: the ifb module creates ifbN interfaces by itself", name)
	}
	return nil
}

// isIfbAutoName reports names of the form ifb<digits>.
func isIfbAutoName(name string) bool {
	digits := strings.TrimPrefix(name, "ifb")
	return digits != name && digits != "" && strings.Trim(digits, "0123456789") == ""
}

// Client is a query's source as a DNS server's writer names it (its RemoteAddr: a *net.UDPAddr or a
// *net.TCPAddr, and anything else with their AddrPort method), read without the string request.Request.IP makes;
// ok is false for any other address, and for none. An IPv4 source on a dual-stack socket stays IPv4-mapped:
// callers that key or print by address unmap it.
func Client(a net.Addr) (ap netip.AddrPort, ok bool) {
	if a, ok := a.(interface{ AddrPort() netip.AddrPort }); ok {
		return a.AddrPort(), true
	}
	return netip.AddrPort{}, false
}
