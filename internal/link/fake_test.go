package link

import (
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// fakeLink is one link in fakeKernel.
type fakeLink struct {
	kind  string
	index int
	up    bool
	addrs []netip.Prefix
	alias string
}

// fakeKernel is a map-backed linkOps that answers like the kernel and the netlink library do: lookups of a
// missing link return LinkNotFoundError, deletes of a missing link ENODEV, creating an existing name EEXIST,
// an unknown kind EOPNOTSUPP, deleting a missing address EADDRNOTAVAIL. fail injects an error per method.
type fakeKernel struct {
	kinds  map[string]bool // link kinds the "kernel" supports
	links  map[string]*fakeLink
	next   int
	fail   map[string]error
	writes []string // every successful write, in order
	closed bool
}

func newFakeKernel(kinds ...string) *fakeKernel {
	k := &fakeKernel{kinds: map[string]bool{}, links: map[string]*fakeLink{}, next: 2, fail: map[string]error{}}
	for _, kind := range kinds {
		k.kinds[kind] = true
	}
	return k
}

func (k *fakeKernel) add(name, kind string, up bool, addrs ...string) {
	l := &fakeLink{kind: kind, index: k.next, up: up}
	k.next++
	for _, a := range addrs {
		l.addrs = append(l.addrs, netip.MustParsePrefix(a))
	}
	k.links[name] = l
}

func (k *fakeKernel) view(name string, l *fakeLink) netlink.Link {
	attrs := netlink.LinkAttrs{Name: name, Index: l.index, Alias: l.alias}
	if l.up {
		attrs.Flags = net.FlagUp
	}
	switch l.kind {
	case KindDummy:
		return &netlink.Dummy{LinkAttrs: attrs}
	case KindIfb:
		return &netlink.Ifb{LinkAttrs: attrs}
	}
	return &netlink.GenericLink{LinkAttrs: attrs, LinkType: l.kind}
}

// lookup finds the link a request names, as the library does (by index when set, else by name).
func (k *fakeKernel) lookup(link netlink.Link) (string, *fakeLink, error) {
	a := link.Attrs()
	for name, l := range k.links {
		if (a.Index != 0 && l.index == a.Index) || (a.Index == 0 && name == a.Name) {
			return name, l, nil
		}
	}
	return "", nil, unix.ENODEV
}

func (k *fakeKernel) LinkByName(name string) (netlink.Link, error) {
	if err := k.fail["LinkByName"]; err != nil {
		return nil, err
	}
	l, ok := k.links[name]
	if !ok {
		return nil, netlink.LinkNotFoundError{}
	}
	return k.view(name, l), nil
}

func (k *fakeKernel) LinkSetAlias(link netlink.Link, alias string) error {
	if err := k.fail["LinkSetAlias"]; err != nil {
		return err
	}
	_, l, err := k.lookup(link)
	if err != nil {
		return err
	}
	l.alias = alias
	k.writes = append(k.writes, "LinkSetAlias "+alias)
	return nil
}

func (k *fakeKernel) LinkAdd(link netlink.Link) error {
	if err := k.fail["LinkAdd"]; err != nil {
		return err
	}
	name := link.Attrs().Name
	if _, ok := k.links[name]; ok {
		return unix.EEXIST
	}
	if !k.kinds[link.Type()] {
		return unix.EOPNOTSUPP
	}
	k.add(name, link.Type(), false)
	k.writes = append(k.writes, "LinkAdd "+link.Type()+" "+name)
	return nil
}

func (k *fakeKernel) LinkDel(link netlink.Link) error {
	if err := k.fail["LinkDel"]; err != nil {
		return err
	}
	name, _, err := k.lookup(link)
	if err != nil {
		return err
	}
	delete(k.links, name)
	k.writes = append(k.writes, "LinkDel "+name)
	return nil
}

func (k *fakeKernel) LinkSetUp(link netlink.Link) error {
	if err := k.fail["LinkSetUp"]; err != nil {
		return err
	}
	name, l, err := k.lookup(link)
	if err != nil {
		return err
	}
	l.up = true
	k.writes = append(k.writes, "LinkSetUp "+name)
	return nil
}

func (k *fakeKernel) AddrList(link netlink.Link, family int) ([]netlink.Addr, error) {
	if err := k.fail["AddrList"]; err != nil {
		return nil, err
	}
	_, l, err := k.lookup(link)
	if err != nil {
		return nil, err
	}
	var out []netlink.Addr
	for _, p := range l.addrs {
		out = append(out, netlink.Addr{IPNet: &net.IPNet{
			IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}, LinkIndex: l.index})
	}
	return out, nil
}

// addrOp is what AddrReplace and AddrDel check first: the injected failure, the link, the address.
func (k *fakeKernel) addrOp(op string, link netlink.Link, addr *netlink.Addr) (string, *fakeLink, netip.Prefix, error) {
	if err := k.fail[op]; err != nil {
		return "", nil, netip.Prefix{}, err
	}
	name, l, err := k.lookup(link)
	if err != nil {
		return "", nil, netip.Prefix{}, err
	}
	p, err := fromAddr(*addr)
	if err != nil {
		return "", nil, netip.Prefix{}, unix.EINVAL
	}
	return name, l, p, nil
}

func (k *fakeKernel) AddrReplace(link netlink.Link, addr *netlink.Addr) error {
	name, l, p, err := k.addrOp("AddrReplace", link, addr)
	if err != nil {
		return err
	}
	if p.Addr().Is6() && addr.Flags&unix.IFA_F_NODAD == 0 {
		return fmt.Errorf("fake: IPv6 address %s without IFA_F_NODAD would be tentative", p)
	}
	if !slices.Contains(l.addrs, p) {
		l.addrs = append(l.addrs, p)
	}
	k.writes = append(k.writes, "AddrReplace "+name+" "+p.String())
	return nil
}

func (k *fakeKernel) AddrDel(link netlink.Link, addr *netlink.Addr) error {
	name, l, p, err := k.addrOp("AddrDel", link, addr)
	if err != nil {
		return err
	}
	i := slices.Index(l.addrs, p)
	if i < 0 {
		return unix.EADDRNOTAVAIL
	}
	l.addrs = slices.Delete(l.addrs, i, i+1)
	k.writes = append(k.writes, "AddrDel "+name+" "+p.String())
	return nil
}

func (k *fakeKernel) Close() { k.closed = true }
