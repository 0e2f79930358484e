package nft

import "slices"

// Every list of chain names derives from the builders that create the chains, so a chain added to one is
// listed, counted and cleared without a second edit. The names do not depend on the addresses or ports: a
// spec that only chooses between the builders' branches (interception or not) gives all of them.

var (
	// intercepting is a spec whose tables have every chain that intercepts; bySocket the one without.
	intercepting = Spec{DNSPort: 53, HealthPort: 8080}
	bySocket     = Spec{DNSPort: 53, HealthPort: 8080, NoInterception: true}
)

// chainNames are the names of rs's chains, in its order.
func chainNames(rs *Ruleset) []string {
	var out []string
	for _, c := range rs.Chains {
		out = append(out, c.Name)
	}
	return out
}

// OurChains are the chains [Build] creates, with or without interception, for nftconn's TableCounters: every
// rule of our table has its counter exported.
func OurChains() []string {
	return appendNew(chainNames(Build(intercepting)), chainNames(Build(bySocket))...)
}

// ServingChains are the chains whose presence says an instance serves: those [Build] creates that
// [Listening] does not (raw-output is there once the listeners are bound).
func ServingChains() []string {
	listening := chainNames(Listening(intercepting))
	return slices.DeleteFunc(OurChains(), func(name string) bool { return slices.Contains(listening, name) })
}

// InstanceChains is every chain an instance table may hold ([Build], [Listening]; [Registration] has none),
// the ones that say "serving" first.
func InstanceChains() []string {
	return appendNew(ServingChains(), chainNames(Listening(intercepting))...)
}

// TakingChains are the fallback's chains that take new queries ([Chain.Takes]), for nftconn's FallbackTable.Stop.
func TakingChains() []string {
	var out []string
	for _, c := range BuildFallback(FallbackSpec{}).Chains {
		if c.Takes {
			out = append(out, c.Name)
		}
	}
	return out
}

// appendNew appends to list those of names it does not hold yet.
func appendNew(list []string, names ...string) []string {
	for _, n := range names {
		if !slices.Contains(list, n) {
			list = append(list, n)
		}
	}
	return list
}

// LegacyChains say an instance table is an earlier version's (names.go).
func LegacyChains() []string { return []string{legacyChainMarkPrerouting, legacyChainMarkOutput} }
