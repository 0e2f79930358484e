package nft

import "net/netip"

// Instance is one running nodelocaldns instance as the kernel shows it: an owned table of an instance name.
type Instance struct {
	Table   string
	IPs     []netip.Addr // the addresses it needs on the interface (its sets), sorted
	Serving bool         // it has its chains: it intercepts (or, without interception, says it serves)
	Self    bool         // the table the reader owns
	// Voted says the table has set fallback4: the instance has a word on the link-local fallback, which is
	// Fallbacks (sets fallback4 and fallback6; empty: it wants none). Legacy says an earlier version's instance
	// owns it (it marks the queries it takes, for a fallback table of its own making).
	Voted, Legacy bool
	Fallbacks     []netip.AddrPort
}
