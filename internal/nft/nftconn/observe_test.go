package nftconn

import (
	"slices"
	"strings"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

func TestTableCountersReadsOnlyTheNamedTable(t *testing.T) {
	c := freshConn(t)
	if err := c.Apply(nft.Build(goldenCases[0].spec)); err != nil {
		t.Fatal(err)
	}
	testenv.NftApply(t, "add table inet nodelocaldns-5\nadd chain inet nodelocaldns-5 filter-input\n"+
		"add rule inet nodelocaldns-5 filter-input counter accept comment \"other instance\"\n")
	got, err := c.TableCounters("nodelocaldns-5", nft.OurChains()...)
	if err != nil || len(got) != 1 || got[0].Comment != "other instance" || got[0].Chain != nft.ChainFilterInput {
		t.Errorf("TableCounters(nodelocaldns-5) = %+v, %v; want its one counter", got, err)
	}
	if got, err := c.TableCounters("absent", nft.OurChains()...); err != nil || len(got) != 0 {
		t.Errorf("TableCounters(absent) = %+v, %v; want none, no error", got, err)
	}
}

// TestEveryRuleCounterIsExported: for every golden spec, the counters read from our table through
// [nft.OurChains] (what nodelocaldns_nftables_packets_total exports) are those of every rule Build made, chain by
// chain: a chain added to Build whose counters no scrape reads fails here.
func TestEveryRuleCounterIsExported(t *testing.T) {
	c := freshConn(t)
	for _, tc := range goldenCases {
		rs := nft.Build(tc.spec)
		if err := c.Apply(rs); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var want []string
		for _, ch := range rs.Chains {
			for _, r := range ch.Rules {
				want = append(want, ch.Name+": "+r.Comment)
			}
		}
		counters, err := c.TableCounters(c.Table(), nft.OurChains()...)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var got []string
		for _, rc := range counters {
			got = append(got, rc.Chain+": "+rc.Comment)
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: exported counters\n%s\nwant every rule's\n%s", tc.name, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}
