package nft

import (
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

var handleNum = regexp.MustCompile(`handle \d+: `)

// TestForeignDrops builds the cases of the foreign-drop check in the kernel, with nft and iptables-nft as an
// admin or kube-proxy would, and reads them back.
func TestForeignDrops(t *testing.T) {
	c := freshConn(t)
	if err := c.Apply(Build(goldenCases[0].spec)); err != nil {
		t.Fatal(err)
	}
	testenv.NftApply(t, `
table inet nodelocaldns-2 {
	chain input { type filter hook input priority 0; policy drop; udp dport 53 drop; }
}
table inet filter {
	chain input {
		type filter hook input priority 0; policy accept;
		ct state invalid drop
		tcp dport 22 drop
		udp dport 53 reject
		meta l4proto icmp drop
		ip saddr 10.0.0.0/8 drop
		udp dport 53 accept
	}
	chain forwarding { type filter hook forward priority 0; policy drop; }
	chain helper { udp dport 53 drop; }
}
table ip pre {
	chain p { type filter hook prerouting priority -150; policy drop; }
}
table ip post {
	chain p { type nat hook postrouting priority 100; policy accept; udp dport 53 drop; }
}
`)
	testenv.Run(t, "iptables", "-A", "INPUT", "-p", "udp", "--dport", "53", "-j", "REJECT")
	testenv.Run(t, "iptables", "-A", "OUTPUT", "-p", "tcp", "--dport", "80", "-j", "DROP")
	got, err := c.ForeignDrops(53, TableName, "nodelocaldns-2")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, d := range got {
		lines = append(lines, d.Chain+" "+d.Hook+" policy-drop="+map[bool]string{true: "yes", false: "no"}[d.Policy]+
			" ["+handleNum.ReplaceAllString(strings.Join(d.Rules, ","), "")+"]")
	}
	want := []string{
		"inet filter/input input policy-drop=no [reject,drop]",
		"ip filter/INPUT input policy-drop=no [xt REJECT]",
		"ip pre/p prerouting policy-drop=yes []",
	}
	if !slices.Equal(lines, want) {
		// iptables-nft may write REJECT as nft's own reject statement.
		alt := slices.Clone(want)
		alt[1] = "ip filter/INPUT input policy-drop=no [reject]"
		if !slices.Equal(lines, alt) {
			t.Errorf("ForeignDrops =\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
		}
	}
	// Without naming nodelocaldns-2 as ours, it is someone else's drop.
	got, err = c.ForeignDrops(53, TableName)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(got, func(d ForeignDrop) bool {
		return d.Chain == "inet nodelocaldns-2/input" && d.Policy && len(d.Rules) == 1
	}) {
		t.Errorf("ForeignDrops(%q) = %+v, want inet nodelocaldns-2/input with its policy and rule", TableName, got)
	}
}

func TestTableCountersReadsOnlyTheNamedTable(t *testing.T) {
	c := freshConn(t)
	if err := c.Apply(Build(goldenCases[0].spec)); err != nil {
		t.Fatal(err)
	}
	testenv.NftApply(t, "add table inet nodelocaldns-5\nadd chain inet nodelocaldns-5 filter-input\n"+
		"add rule inet nodelocaldns-5 filter-input counter accept comment \"other instance\"\n")
	got, err := c.TableCounters("nodelocaldns-5", OurChains()...)
	if err != nil || len(got) != 1 || got[0].Comment != "other instance" || got[0].Chain != ChainFilterInput {
		t.Errorf("TableCounters(nodelocaldns-5) = %+v, %v; want its one counter", got, err)
	}
	if got, err := c.TableCounters("absent", OurChains()...); err != nil || len(got) != 0 {
		t.Errorf("TableCounters(absent) = %+v, %v; want none, no error", got, err)
	}
}

// TestEveryRuleCounterIsExported: for every golden spec, the counters read from our table through
// [OurChains] (what nodelocaldns_nftables_packets_total exports) are those of every rule Build made, chain by
// chain: a chain added to Build whose counters no scrape reads fails here.
func TestEveryRuleCounterIsExported(t *testing.T) {
	c := freshConn(t)
	for _, tc := range goldenCases {
		rs := Build(tc.spec)
		if err := c.Apply(rs); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var want []string
		for _, ch := range rs.Chains {
			for _, r := range ch.Rules {
				want = append(want, ch.Name+": "+r.Comment)
			}
		}
		counters, err := c.TableCounters(c.Table(), OurChains()...)
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

// TestLegacyTables: a table appears once iptables-legacy has used it in this namespace.
func TestLegacyTables(t *testing.T) {
	freshConn(t)
	before := LegacyTables()
	if slices.Contains(before, "ip mangle") {
		t.Skip("ip mangle already exists in this namespace")
	}
	if _, err := runQuiet("iptables-legacy", "-t", "mangle", "-L", "-n"); err != nil {
		t.Skipf("iptables-legacy unusable here: %v", err)
	}
	if got := LegacyTables(); !slices.Contains(got, "ip mangle") {
		t.Errorf("LegacyTables() = %q after iptables-legacy -t mangle -L, want ip mangle", got)
	}
}

func runQuiet(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}
