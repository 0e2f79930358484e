package foreign

import (
	"maps"
	"net/netip"
	"slices"
)

// StepAside is the decision a look at the other tables makes about stepping aside, from what [Covering] found
// (covered) and the local IPs stepped aside for until now (was): the IPs to step aside for now, and those
// gained and lost since, each sorted. Pure: the caller reports the changes and programs the result.
func StepAside(was, covered map[netip.Addr]string) (now, gained, lost []netip.Addr) {
	for ip := range covered {
		if _, ok := was[ip]; !ok {
			gained = append(gained, ip)
		}
	}
	for ip := range was {
		if _, ok := covered[ip]; !ok {
			lost = append(lost, ip)
		}
	}
	now = slices.SortedFunc(maps.Keys(covered), netip.Addr.Compare)
	if now == nil {
		now = []netip.Addr{}
	}
	slices.SortFunc(gained, netip.Addr.Compare)
	slices.SortFunc(lost, netip.Addr.Compare)
	return now, gained, lost
}
