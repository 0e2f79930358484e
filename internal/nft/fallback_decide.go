package nft

import (
	"net/netip"
	"slices"
	"strings"
	"time"
)

// The fallback's one decision, which every instance takes alike from what the kernel lists: each instance says
// in its own table what it wants ([Spec.Fallbacks], sets fallback4 and fallback6, read back as
// [Instance.Fallbacks]), and [DecideFallback] adds the words of all live instances up to one [FallbackSpec], so
// two instances never fight over the table: each one's write is the other's no-op, whatever their flags.

// FallbackDecision is what the live instances' words add up to.
type FallbackDecision struct {
	// Leave: no instance of this version has a say (only earlier versions', which keep a table of their own
	// making, or instances that intercept nothing): the table is left as it is.
	Leave bool
	// Spec is the table to keep; nil with Leave false: delete it.
	Spec *FallbackSpec
	Why  string // the decision, for the log
}

// DecideFallback derives the fallback table from every live instance's word, the same on every instance:
// none while any instance wants none (a rollout of -linklocal-fallback=false sticks from its first pod on);
// else, for each family every instance names a kube-dns ClusterIP of, towards the lowest one said, covering
// every address of every instance (the union) on its own DNS port, except the ClusterIPs said, which fail
// open through kube-proxy. A family some instance names none of gets no fallback: so an earlier version's
// instance (IPv4 only) and this one decide the same table during a rollout, rather than rewriting each
// other's.
func DecideFallback(ins []Instance, lease time.Duration) FallbackDecision {
	var voters []Instance
	for _, in := range ins {
		if in.Legacy {
			return FallbackDecision{Leave: true, Why: "an earlier version's instance keeps its own fallback table (" + in.Table + ")"}
		}
		if in.Voted {
			voters = append(voters, in)
		}
	}
	if len(voters) == 0 {
		return FallbackDecision{Leave: true, Why: "no instance intercepts"}
	}
	var said []netip.Addr
	for _, in := range voters {
		if len(in.Fallbacks) == 0 {
			return FallbackDecision{Why: "instance table " + in.Table + " wants no fallback"}
		}
		for _, v := range in.Fallbacks {
			said = append(said, v.Addr())
		}
	}
	slices.SortFunc(said, netip.Addr.Compare)
	spec := &FallbackSpec{Lease: lease}
	var why []string
	for _, v6 := range []bool{false, true} {
		ofFamily := func(v netip.AddrPort) bool { return v.Addr().Is6() == v6 }
		everyone := !slices.ContainsFunc(voters, func(in Instance) bool { return !slices.ContainsFunc(in.Fallbacks, ofFamily) })
		if i := slices.IndexFunc(said, func(ip netip.Addr) bool { return ip.Is6() == v6 }); i >= 0 && everyone {
			spec.Targets = append(spec.Targets, said[i])
			why = append(why, said[i].String())
		}
	}
	if len(spec.Targets) == 0 {
		return FallbackDecision{Why: "the instances name no ClusterIP of one family all alike"}
	}
	for _, in := range voters {
		for _, ip := range in.IPs {
			if !slices.Contains(said, ip) {
				spec.Covered = append(spec.Covered, netip.AddrPortFrom(ip, votedPort(in.Fallbacks, ip)))
			}
		}
	}
	slices.SortFunc(spec.Covered, netip.AddrPort.Compare)
	spec.Covered = slices.Compact(spec.Covered)
	return FallbackDecision{Spec: spec, Why: "towards " + strings.Join(why, " and ")}
}

// votedPort is the DNS port an instance's vote names for ip's family (its one port, whatever the family,
// when it names no ClusterIP of that family: nothing covers that address then).
func votedPort(vote []netip.AddrPort, ip netip.Addr) uint16 {
	for _, v := range vote {
		if v.Addr().Is4() == ip.Is4() {
			return v.Port()
		}
	}
	return vote[0].Port()
}
