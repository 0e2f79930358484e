package link

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// linkOps is the part of *netlink.Handle we use. Unit tests replace it with a fake that returns the same
// errors the kernel and the library do (LinkNotFoundError, EEXIST, EOPNOTSUPP, EADDRNOTAVAIL).
type linkOps interface {
	LinkByName(name string) (netlink.Link, error)
	LinkAdd(link netlink.Link) error
	LinkDel(link netlink.Link) error
	LinkSetUp(link netlink.Link) error
	LinkSetAlias(link netlink.Link, alias string) error
	AddrList(link netlink.Link, family int) ([]netlink.Addr, error)
	AddrReplace(link netlink.Link, addr *netlink.Addr) error
	AddrDel(link netlink.Link, addr *netlink.Addr) error
	Close()
}

var _ linkOps = (*netlink.Handle)(nil)

// isNotFound reports a missing link: the library turns the kernel's ENODEV into LinkNotFoundError on lookups,
// but deletes return the bare errno.
func isNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, unix.ENODEV)
}

// isExist reports EEXIST: a link of that name already exists (someone raced us, or a stale probe link).
func isExist(err error) bool { return errors.Is(err, unix.EEXIST) }

// isNotSupported reports the kernel has no such link kind: rtnl_link_ops lookup failed even after trying to
// load the module (rtnl_newlink returns EOPNOTSUPP).
func isNotSupported(err error) bool { return errors.Is(err, unix.EOPNOTSUPP) }

// isAddrGone reports the address to delete is already absent (inet_rtm_deladdr and inet6_addr_del).
func isAddrGone(err error) bool {
	return errors.Is(err, unix.EADDRNOTAVAIL) || errors.Is(err, unix.ENOENT)
}

// OwnerAlias is the alias (IFLA_IFALIAS, `ip link show` prints it) every link we create carries from its
// creation on, in the same message: the mark that it is ours. A link of our name without it (node-cache's own
// dummy, after a rollback) is never removed by us.
const OwnerAlias = "created by nodelocaldns"

// ErrNotOurs says a link of our name was not created by us: another kind, or no OwnerAlias.
var ErrNotOurs = errors.New("not created by nodelocaldns")

// newLink returns an unsent link value of kind, named name.
func newLink(kind, name string) netlink.Link {
	attrs := netlink.LinkAttrs{Name: name}
	if kind == KindIfb {
		return &netlink.Ifb{LinkAttrs: attrs}
	}
	return &netlink.Dummy{LinkAttrs: attrs}
}

// toAddr builds the netlink address for a host prefix. IPv6 addresses skip duplicate address detection
// (IFA_F_NODAD) so they are usable at once: a tentative address cannot be bound, and CoreDNS would fail to
// listen on it for a second or more after every repair.
func toAddr(p netip.Prefix) *netlink.Addr {
	a := &netlink.Addr{IPNet: &net.IPNet{
		IP:   net.IP(p.Addr().AsSlice()),
		Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen()),
	}}
	if p.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	return a
}

// fromAddr converts a netlink address back into a prefix; IPv4 comes back as IPv4 even when the library used
// the 16-byte form.
func fromAddr(a netlink.Addr) (netip.Prefix, error) {
	if a.IPNet == nil {
		return netip.Prefix{}, errors.New("address without IP")
	}
	ip, ok := netip.AddrFromSlice(a.IP)
	if !ok {
		return netip.Prefix{}, fmt.Errorf("address %v: bad IP length", a.IP)
	}
	ones, _ := a.Mask.Size()
	return netip.PrefixFrom(ip.Unmap(), ones), nil
}
