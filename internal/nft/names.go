package nft

// Names of everything we create, in one place. Changing one is a migration: an old table keeps its old names
// until it is deleted, which Apply does (it replaces the whole table).
const (
	// TableName is our table, in the inet family so that one table serves IPv4 and IPv6.
	TableName = "nodelocaldns"

	// Sets holding the listen IPs, one per address family; both always exist, possibly empty, so the rules
	// never change when IPs do.
	SetLocal4 = "local4"
	SetLocal6 = "local6"

	// Chains, named by purpose and hook.
	ChainRawPrerouting = "raw-prerouting"
	ChainRawOutput     = "raw-output"
	ChainFilterInput   = "filter-input"
	ChainFilterOutput  = "filter-output"

	// Comment prefixes: node-cache's own words, so greps and dashboards written for it still find our rules.
	// Each rule's comment adds what it matches, which makes chain+comment unique (the key of [RuleCounter]).
	CommentSkipConntrack = "NodeLocal DNS Cache: skip conntrack"
	CommentAllowDNS      = "NodeLocal DNS Cache: allow DNS traffic"

	// What each rule is for, appended to the prefix.
	purposeQueries     = "queries"
	purposeReplies     = "replies"
	purposeHostQueries = "host-network queries"
	purposeHealth      = "health checks"
	purposeHealthReply = "health replies"
)

// Chain priorities (nft's named priorities for the inet family).
const (
	priorityRaw    = -300 // before conntrack (-200), so notrack takes effect
	priorityFilter = 0
)
