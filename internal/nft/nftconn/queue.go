package nftconn

import (
	"github.com/google/nftables"
)

// chainEncoder is a chain of ours as google/nftables objects: [nft.Chain.Encode] and [nft.Chain.EncodeRules],
// for our table's chains and the fallback's alike.
type chainEncoder interface {
	Encode(*nftables.Table) *nftables.Chain
	EncodeRules(*nftables.Table, *nftables.Chain) []*nftables.Rule
}

// addChain queues c and its rules into table t, and says how many rules.
func addChain(q txOps, t *nftables.Table, c chainEncoder) int {
	chain := q.AddChain(c.Encode(t))
	rules := c.EncodeRules(t, chain)
	for _, r := range rules {
		q.AddRule(r)
	}
	return len(rules)
}
