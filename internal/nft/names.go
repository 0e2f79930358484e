package nft

import (
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Names of everything we create, in one place. Changing one is a migration: an old table keeps its old names
// until it is deleted, which Apply does (it replaces the whole table).
const (
	// TableName is the first instance's table, in the inet family so that one table serves IPv4 and IPv6.
	// Each running instance owns a table of its own (NFT_TABLE_F_OWNER): TableName when it is free, else
	// TableName-<n> with the first free n (see [InstanceTableName]).
	TableName = "nodelocaldns"

	// Sets holding the listen IPs, one per address family; both always exist, possibly empty, so the rules
	// never change when IPs do.
	SetLocal4 = "local4"
	SetLocal6 = "local6"
	// Sets of the local IPs the instance steps aside for (ruleset.go, stepAside); only there while it does.
	SetAside4 = "aside4"
	SetAside6 = "aside6"
	// SetFallback4 is the instance's word on the link-local fallback (fallback.go): one element, the kube-dns
	// ClusterIP it would send queries to and the DNS port it answers on, while it wants the fallback; empty
	// while it does not (-linklocal-fallback=false, or no usable kube-dns ClusterIP). An instance that
	// intercepts nothing (-setupiptables=false) has no such set: no say.
	SetFallback4 = "fallback4"
	// SetFallback6 is the same word for an IPv6 kube-dns ClusterIP. An instance that has a say has both sets
	// (one element in all, in the set of its ClusterIP's family); earlier versions read fallback4 alone.
	SetFallback6 = "fallback6"
	// SetBound4 and SetBound6 hold the local IPs a DNS listener is bound to, and exist only while some local
	// IP has none (Spec.Unbound): host-network clients' rules then match them instead of local4 and local6; and
	// always on a kernel without nft_socket (Spec.Ungated), where pods' rules match them instead of the gate.
	SetBound4 = "bound4"
	SetBound6 = "bound6"

	// Chains, named by purpose and hook.
	ChainRawPrerouting = "raw-prerouting"
	ChainRawOutput     = "raw-output"
	ChainFilterInput   = "filter-input"
	ChainFilterOutput  = "filter-output"
	// legacyChainMarkOutput and legacyChainMarkPrerouting are the chains of earlier versions' instances that
	// marked the queries they took for their fallback: an instance table with either is an earlier version's,
	// which keeps its own fallback table while it runs (fallback.go).
	legacyChainMarkOutput     = "mark-output"
	legacyChainMarkPrerouting = "mark-prerouting"
	// ChainServing is the one (regular, hookless) chain of an instance that does not program interception
	// (-setupiptables=false): its presence says "serving", as the base chains do for everyone else.
	ChainServing = "serving"

	// FallbackTableName is the link-local fallback's table (fallback.go): not owned, shared by every instance,
	// outliving them all for at most its lease; `-teardown` deletes it.
	FallbackTableName = "nodelocaldns-fallback"
	// SetCovered4 holds the (address, port) pairs the fallback covers, each with the lease as its timeout: the
	// rules match nothing once the elements expire, whoever is left to delete the table.
	SetCovered4 = "covered4"
	// SetCovered6 is covered4's IPv6 counterpart, there when the fallback has an IPv6 kube-dns ClusterIP.
	SetCovered6 = "covered6"

	// The fallback's chains, named by whose packets they take (pods' or host-network clients') and what they do.
	ChainPodPrerouting  = "pod-prerouting"
	ChainPodReply       = "pod-reply"
	ChainHostOutput     = "host-output"
	ChainHostMasquerade = "host-masquerade"
	ChainHostReply      = "host-reply"

	// Comment prefixes: node-cache's own words, so greps and dashboards written for it still find our rules.
	// Each rule's comment adds what it matches, which makes chain+comment unique (the key of nftconn.RuleCounter).
	CommentSkipConntrack = "NodeLocal DNS Cache: skip conntrack"
	CommentAllowDNS      = "NodeLocal DNS Cache: allow DNS traffic"
	CommentStepAside     = "nodelocaldns: stepped aside for a foreign drop"

	// What each rule is for, appended to the prefix.
	purposeQueries     = "queries"
	purposeReplies     = "replies"
	purposeHostQueries = "host-network queries"
	purposeHealth      = "health checks"
	purposeHealthReply = "health replies"
)

// Chain priorities (nft's named priorities for the inet family).
const (
	priorityRaw = -300 // before conntrack (-200), so notrack takes effect
	// priorityMangle is after conntrack (-200), which has recorded the address the client sent to, and
	// before kube-proxy's DNAT (-100), which must see the fallback's rewritten one.
	priorityMangle = -150
	priorityFilter = 0
	prioritySrcNAT = 100
)

// MaxInstances bounds the names tried; more than two instances on a node only happen in a rollout gone wrong.
const MaxInstances = 64

// InstanceTableName is the name of the n-th instance table: TableName, TableName-1, TableName-2, ...
func InstanceTableName(n int) string {
	if n == 0 {
		return TableName
	}
	return TableName + "-" + strconv.Itoa(n)
}

// drainSuffix makes a leaving instance's drain table name (drain.go) from its instance table's.
const drainSuffix = "-drain"

// DrainTableName is the name of the drain table of the instance whose table was named instance.
func DrainTableName(instance string) string { return instance + drainSuffix }

// isDrainTableName reports whether name is one a leaving instance's drain table may have: it is no instance's.
func isDrainTableName(name string) bool {
	n, ok := strings.CutSuffix(name, drainSuffix)
	return ok && IsInstanceTableName(n)
}

// IsOurTableName reports whether inet table name is one of ours by its name: an instance's, a leaving
// instance's drain table, or the fallback's.
func IsOurTableName(name string) bool {
	return IsInstanceTableName(name) || isDrainTableName(name) || name == FallbackTableName
}

// IsInstanceTableName reports whether name is one an instance may own.
func IsInstanceTableName(name string) bool {
	if name == TableName {
		return true
	}
	n, ok := strings.CutPrefix(name, TableName+"-")
	if !ok || n == "" || strings.Trim(n, "0123456789") != "" {
		return false
	}
	return true
}

// FamilyName is nft's keyword for a table family (NFPROTO_*, [nftables.TableFamily]), as nft prints it.
func FamilyName(f uint8) string {
	switch f {
	case unix.NFPROTO_INET:
		return "inet"
	case unix.NFPROTO_IPV4:
		return "ip"
	case unix.NFPROTO_IPV6:
		return "ip6"
	case unix.NFPROTO_ARP:
		return "arp"
	case unix.NFPROTO_BRIDGE:
		return "bridge"
	case unix.NFPROTO_NETDEV:
		return "netdev"
	}
	return fmt.Sprintf("family%d", f)
}
