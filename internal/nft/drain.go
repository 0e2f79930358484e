package nft

// A leaving instance keeps answering the queries it already holds (a miss waits for its upstream) after it
// stops intercepting. Its answers leave from the local addresses, and without our raw-output notrack each
// would make a conntrack entry (local address:53 -> client), which captures the client's next query from the
// same port (as that connection's reply: no DNAT, no fallback) until it expires. So leaving swaps the instance
// table for a drain table in one batch: the instance is gone (the drain table is no instance's, Instances
// does not list it), new queries are no longer taken from kube-proxy and the fallback, and replies from the
// local addresses still skip conntrack. The drain table is owned like the instance table: it goes with our
// socket, or with nftconn's EndDrain once the answers are written.

// Draining is the drain table for s: the local address sets, and the DNS reply rules of raw-output and
// filter-output only (no query is taken, no instance vote is cast). A query sent from now on is tracked, and
// so is its connection's every packet: only the replies to queries taken before, untracked, skip conntrack.
// nil without interception.
func Draining(s Spec) *Ruleset {
	if s.NoInterception {
		return nil
	}
	return &Ruleset{
		Sets: setPair(SetLocal4, SetLocal6, s.LocalIPs),
		Chains: []Chain[Rule]{
			{Name: ChainRawOutput, Hook: HookOutput, Priority: priorityRaw, Rules: perFamily(
				rule(DirFrom, s.DNSPort, VerdictNotrack, CommentSkipConntrack, purposeReplies, ProtoTCP, ProtoUDP),
			)},
			{Name: ChainFilterOutput, Hook: HookOutput, Priority: priorityFilter, Rules: perFamily(
				rule(DirFrom, s.DNSPort, VerdictAccept, CommentAllowDNS, purposeReplies, ProtoTCP, ProtoUDP),
			)},
		},
	}
}
