package nftconn

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// A re-apply over every spec replaces the table's whole contents, asking for its chains by name (readOps has no
// dump of the node's chains: listing.go).
func TestFakeNoChainDump(t *testing.T) {
	c, k := fakeConn(t)
	for _, tc := range append(goldenCases, goldenCases...) {
		if err := c.Apply(nft.Build(tc.spec)); err != nil {
			t.Fatalf("Apply %s: %v", tc.name, err)
		}
		if got, want := len(k.tables[0].chains), len(nft.Build(tc.spec).Chains); got != want {
			t.Fatalf("after Apply %s: %d chains, want %d", tc.name, got, want)
		}
	}
	if err := c.Apply(nft.Registration(goldenCases[0].spec)); err != nil {
		t.Fatal(err)
	}
	ins, err := c.Instances()
	if err != nil || len(ins) != 1 || ins[0].Serving {
		t.Errorf("Instances after registration = %+v, %v; want ours, not serving", ins, err)
	}
	if err := c.Apply(nft.Build(goldenCases[0].spec)); err != nil {
		t.Fatal(err)
	}
	if ins, err := c.Instances(); err != nil || len(ins) != 1 || !ins[0].Serving {
		t.Errorf("Instances after Build = %+v, %v; want ours serving", ins, err)
	}
}

// The same against the kernel, next to a few thousand chains of a foreign table (one nft -f batch): Apply
// replaces our table, and Instances tells a registered instance from a serving one.
func TestOwnTablesAmongForeignChains(t *testing.T) {
	c := freshConn(t)
	var b strings.Builder
	b.WriteString("add table ip big\n")
	for i := range 3000 {
		fmt.Fprintf(&b, "add chain ip big c%d\n", i)
	}
	testenv.NftApply(t, b.String())
	for _, rs := range []*nft.Ruleset{nft.Registration(goldenCases[3].spec), nft.Build(goldenCases[3].spec), nft.Build(goldenCases[6].spec), nft.Build(goldenCases[2].spec)} {
		if err := c.Apply(rs); err != nil {
			t.Fatalf("Apply: %v", err)
		}
		if got, want := listOwn(t, nft.TableName), rs.Text(nft.TableName); got != want {
			t.Fatalf("table lists as:\n%s\nwant:\n%s", got, want)
		}
	}
	c2, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := c2.Apply(nft.Registration(goldenCases[0].spec)); err != nil {
		t.Fatal(err)
	}
	ins, err := c.Instances()
	if err != nil || len(ins) != 2 || !ins[0].Serving || ins[1].Serving || ins[1].Self {
		t.Errorf("Instances = %+v, %v; want ours serving and the second registered", ins, err)
	}
	if err := c2.Apply(nft.Build(goldenCases[6].spec)); err != nil { // -setupiptables=false: only the marker chain
		t.Fatal(err)
	}
	if ins, err := c.Instances(); err != nil || len(ins) != 2 || !ins[1].Serving {
		t.Errorf("Instances = %+v, %v; want the second serving", ins, err)
	}
}

// Each instance's table says its word on the fallback, and Instances reads it back: a ClusterIP and port, none,
// no say (no interception), and an earlier version's table (its mark chain) is told apart.
func TestInstancesSayTheirWord(t *testing.T) {
	c := freshConn(t)
	open := func() *Conn {
		o, err := Open()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { o.Close() })
		return o
	}
	spec := nft.Spec{LocalIPs: ips("169.254.20.10"), DNSPort: 53, HealthPort: 8080, Fallbacks: []netip.AddrPort{netip.MustParseAddrPort("10.96.0.10:53")}}
	if err := c.Apply(nft.Registration(spec)); err != nil {
		t.Fatal(err)
	}
	none, nosay, legacy, dual := open(), open(), open(), open()
	off := spec
	off.Fallbacks = nil
	if err := none.Apply(nft.Listening(off)); err != nil {
		t.Fatal(err)
	}
	both := spec
	both.Fallbacks = []netip.AddrPort{netip.MustParseAddrPort("[fd00:96::a]:53"), netip.MustParseAddrPort("10.96.0.10:53")}
	if err := dual.Apply(nft.Registration(both)); err != nil {
		t.Fatal(err)
	}
	noInterception := spec
	noInterception.NoInterception = true
	if err := nosay.Apply(nft.Build(noInterception)); err != nil {
		t.Fatal(err)
	}
	if err := legacy.Apply(&nft.Ruleset{Sets: nft.Registration(nft.Spec{LocalIPs: spec.LocalIPs, NoInterception: true}).Sets,
		Chains: []nft.Chain[nft.Rule]{{Name: "mark-output", Hook: nft.HookOutput, Priority: -300}}}); err != nil {
		t.Fatal(err)
	}
	ins, err := c.Instances()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, in := range ins {
		got[in.Table] = fmt.Sprintf("voted=%v fallback=%v legacy=%v", in.Voted, in.Fallbacks, in.Legacy)
	}
	want := map[string]string{
		c.Table():      "voted=true fallback=[10.96.0.10:53] legacy=false",
		none.Table():   "voted=true fallback=[] legacy=false",
		nosay.Table():  "voted=false fallback=[] legacy=false",
		legacy.Table(): "voted=false fallback=[] legacy=true",
		dual.Table():   "voted=true fallback=[10.96.0.10:53 [fd00:96::a]:53] legacy=false",
	}
	for table, w := range want {
		if got[table] != w {
			t.Errorf("table %s: %s, want %s", table, got[table], w)
		}
	}
}

// GetRules decodes what google/nftables v0.3.0 fails on (ct with a direction, dumped as 8 bits), in any table.
func TestGetRulesDecodesCtDirection(t *testing.T) {
	c := freshConn(t)
	testenv.NftApply(t, `table inet other {
	chain in {
		type filter hook input priority 0; policy accept;
		ct reply ip saddr 192.0.2.1 counter drop
	}
}
`)
	tbl := nft.InetTable("other")
	rules, err := c.rd.GetRules(tbl, &nftables.Chain{Name: "in", Table: tbl})
	if err != nil {
		t.Fatalf("GetRules: %v", err)
	}
	var cts []*expr.Ct
	for _, r := range rules {
		for _, e := range r.Exprs {
			if ct, ok := e.(*expr.Ct); ok {
				cts = append(cts, ct)
			}
		}
	}
	if len(rules) != 1 || len(cts) != 1 || cts[0].Direction != 1 /* IP_CT_DIR_REPLY */ || cts[0].Register != 1 {
		t.Fatalf("decoded %d rules with ct expressions %+v, want one reading the reply direction into register 1", len(rules), cts)
	}
	if v, ok := rules[0].Exprs[len(rules[0].Exprs)-1].(*expr.Verdict); !ok || v.Kind != expr.VerdictDrop {
		t.Errorf("last expression %#v, want the drop verdict", rules[0].Exprs[len(rules[0].Exprs)-1])
	}
}
