package nftconn

import (
	"fmt"

	"github.com/google/nftables"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
)

// Listing our own tables only. The kernel cannot filter a chain dump by table (nf_tables_dump_chains walks
// every chain of every table of the family), and a node with kube-proxy in nftables mode holds tens of
// thousands of chains: one dump of 25k chains takes about 100 ms, under the one lock of our socket. So
// nothing on the path of /ready, a reconcile pass or Apply dumps chains: we ask for our chains by name, one
// GETCHAIN request each (the kernel looks the name up in the table's hash), whatever the node holds. The
// names are few and ours (names.go); the table dump ([Conn.Instances]) stays, since tables are few on any
// node and the instance tables' names are handed out in the order the kernel lists them.

// chainsOf returns those of names that exist in inet table t, asking for each by name. A table that is
// gone has none. Called with the Conn's lock held.
func chainsOf(rd readOps, t *nftables.Table, names []string, firstOnly bool) ([]string, error) {
	var out []string
	for _, name := range names {
		_, err := rd.ListChain(t, name)
		if nft.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("get chain %s of table inet %s: %w", name, t.Name, err)
		}
		out = append(out, name)
		if firstOnly {
			break
		}
	}
	return out, nil
}
