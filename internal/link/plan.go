package link

import (
	"fmt"
	"net/netip"
	"slices"
)

// observed is what the kernel reports about the link named in a Spec: the input of [diff].
type observed struct {
	exists bool
	kind   string // the link's kind as the kernel reports it ("dummy", "ifb", "veth", ...)
	up     bool   // administratively up (IFF_UP)
	addrs  []netip.Prefix
}

// plan is what must change for the kernel to match a Spec. The zero plan means in sync.
type plan struct {
	create bool
	setUp  bool
	add    []netip.Prefix // added with AddrReplace, so a race with another writer is harmless
	del    []netip.Prefix
}

// describe renders p as the human list that Ensure returns, in the order Ensure applies it.
func (p plan) describe(name, kind string) []string {
	var out []string
	if p.create {
		out = append(out, fmt.Sprintf("create %s link %s", kind, name))
	}
	if p.setUp {
		out = append(out, fmt.Sprintf("set link %s up", name))
	}
	for _, a := range p.add {
		out = append(out, fmt.Sprintf("add address %s to %s", a, name))
	}
	for _, a := range p.del {
		out = append(out, fmt.Sprintf("remove address %s from %s", a, name))
	}
	return out
}

// diff computes the plan that takes o to s. It refuses a link of a foreign kind: an interface that happens to
// carry our name but is a veth, a bridge or a NIC is someone else's, and deleting its addresses would cut them off.
func diff(s Spec, o observed) (plan, error) {
	want := s.prefixes()
	slices.SortFunc(want, comparePrefix)
	if !o.exists {
		return plan{create: true, setUp: true, add: want}, nil
	}
	if o.kind != KindDummy && o.kind != KindIfb {
		return plan{}, fmt.Errorf("link %q is of kind %q, not %s or %s: refusing to take it over",
			s.Name, o.kind, KindDummy, KindIfb)
	}
	p := plan{setUp: !o.up}
	for _, w := range want {
		if !slices.Contains(o.addrs, w) {
			p.add = append(p.add, w)
		}
	}
	for _, a := range o.addrs {
		if !slices.Contains(want, a) && !kernelOwned(a) {
			p.del = append(p.del, a)
		}
	}
	slices.SortFunc(p.del, comparePrefix)
	return p, nil
}

// kernelOwned reports the address the kernel itself puts on every IPv6-capable link when it goes up (addrconf's
// fe80::/64 link-local). Deleting it would only make the kernel and us take turns; it is not one of ours.
func kernelOwned(a netip.Prefix) bool {
	return a.Addr().Is6() && a.Addr().IsLinkLocalUnicast()
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}
