package foreign

import (
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/nft/nftconn"
	"github.com/nodelocaldns/nodelocaldns/internal/nft/nfttest"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

var handleNum = regexp.MustCompile(`handle \d+: `)

// TestForeignDrops builds the cases of the foreign-drop check in the kernel, with nft and iptables-nft as an
// admin or kube-proxy would, and reads them back.
func TestForeignDrops(t *testing.T) {
	c := freshConn(t)
	if err := c.Apply(nft.Build(ipv4)); err != nil {
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
	got, err := ScanDrops(53, nft.TableName, "nodelocaldns-2")
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
			t.Errorf("ScanDrops =\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
		}
	}
	// Without naming nodelocaldns-2 as ours, it is someone else's drop.
	got, err = ScanDrops(53, nft.TableName)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(got, func(d Drop) bool {
		return d.Chain == "inet nodelocaldns-2/input" && d.Policy && len(d.Rules) == 1
	}) {
		t.Errorf("ScanDrops(%q) = %+v, want inet nodelocaldns-2/input with its policy and rule", nft.TableName, got)
	}
}

// TestScanDropsPolicies: with only our table there is nothing to report; drop policies of nft's and
// iptables-nft's base chains on the DNS path are reported, a forward chain's is not.
func TestScanDropsPolicies(t *testing.T) {
	c := freshConn(t)
	if got, err := ScanDrops(53, c.Table()); err != nil || got != nil {
		t.Errorf("ScanDrops with only our table = %v, %v", got, err)
	}
	testenv.NftApply(t, `
table inet filter {
	chain input { type filter hook input priority 0; policy drop; }
	chain pass-through { type filter hook forward priority 0; policy drop; }
}
table ip other {
	chain out { type filter hook output priority 10; policy drop; }
	chain inbound { type filter hook input priority 0; policy accept; }
}
`)
	testenv.Run(t, "iptables", "-P", "INPUT", "DROP")
	drops, err := ScanDrops(53, c.Table())
	if err != nil {
		t.Fatalf("ScanDrops: %v", err)
	}
	var got []string
	for _, d := range drops {
		if d.Policy {
			got = append(got, d.Chain)
		}
	}
	if want := []string{"inet filter/input", "ip filter/INPUT", "ip other/out"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("ScanDrops with a drop policy = %q, want %q", got, want)
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

func freshConn(t *testing.T) *nftconn.Conn { return nfttest.FreshConn(t) }

// ipv4 is an instance table's spec with one local IPv4 address.
var ipv4 = nft.Spec{LocalIPs: ips("169.254.20.10"), DNSPort: 53, HealthPort: 8080}

func ips(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}
