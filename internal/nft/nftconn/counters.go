package nftconn

import (
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
)

// RuleCounter is the counter of one of our rules, keyed by chain and comment (unique within a chain).
type RuleCounter struct {
	Chain   string
	Comment string
	Packets uint64
	Bytes   uint64
}

// TableCounters reads the counters of the rules of the named chains of inet table, one rule dump per chain
// filtered by the kernel on table and chain: a scrape never lists other tables or chains. A table or chain
// that is absent has no counters.
func (c *Conn) TableCounters(table string, chains ...string) ([]RuleCounter, error) {
	c.lock()
	defer c.mu.Unlock()
	t := &nftables.Table{Name: table, Family: nftables.TableFamilyINet}
	var out []RuleCounter
	for _, name := range chains {
		rules, err := c.rd.GetRules(t, &nftables.Chain{Name: name, Table: t})
		if nft.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list rules of chain %s %s: %w", table, name, err)
		}
		for _, r := range rules {
			comment, _ := userdata.GetString(r.UserData, userdata.TypeComment)
			for _, e := range r.Exprs {
				if cnt, ok := e.(*expr.Counter); ok {
					out = append(out, RuleCounter{Chain: name, Comment: comment, Packets: cnt.Packets, Bytes: cnt.Bytes})
					break
				}
			}
		}
	}
	return out, nil
}
