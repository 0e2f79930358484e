package foreign

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// Conventions: our local IPs are 169.254.20.10 (link-local) and 10.96.0.10 (ClusterIP) and fd00::a; each case
// writes a host firewall with the real nft or iptables-nft, and Covering must name exactly the addresses whose
// pods' DNS the firewall certainly stops while we intercept (cover.go says what counts).
var coverIPs = ips("10.96.0.10", "169.254.20.10", "fd00::a")

type coverCase struct {
	name     string
	nft      string     // ruleset for nft -f
	iptables [][]string // iptables-nft commands
	port     uint16     // 0: 53
	want     []string   // covered addresses
}

// Every case that must cover, written as host firewalls write them.
var coverTrue = []coverCase{
	{name: "iptables -P INPUT DROP with lo and established accepted", iptables: [][]string{
		{"-A", "INPUT", "-i", "lo", "-j", "ACCEPT"},
		{"-A", "INPUT", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"},
		{"-P", "INPUT", "DROP"},
	}, want: []string{"10.96.0.10", "169.254.20.10", "fd00::a"}},
	{name: "iptables -j REJECT of udp 53", iptables: [][]string{{"-A", "INPUT", "-p", "udp", "--dport", "53", "-j", "REJECT"}},
		want: []string{"10.96.0.10", "169.254.20.10", "fd00::a"}},
	{name: "iptables -P OUTPUT DROP: our replies", iptables: [][]string{{"-A", "OUTPUT", "-o", "lo", "-j", "ACCEPT"}, {"-P", "OUTPUT", "DROP"}},
		want: []string{"10.96.0.10", "169.254.20.10", "fd00::a"}},
	{name: "inet reject udp dport 53", nft: "table inet fw { chain input { type filter hook input priority 0; udp dport 53 reject; } }",
		want: []string{"10.96.0.10", "169.254.20.10", "fd00::a"}},
	{name: "inet policy drop, ct state established,related accept, iifname lo accept",
		nft:  `table inet fw { chain input { type filter hook input priority 10; policy drop; ct state established,related accept; iifname "lo" accept; } }`,
		want: []string{"10.96.0.10", "169.254.20.10", "fd00::a"}},
	{name: "ct state untracked drop", nft: "table inet fw { chain input { type filter hook input priority -50; ct state untracked drop; } }",
		want: []string{"10.96.0.10", "169.254.20.10", "fd00::a"}},
	{name: "one address only", nft: "table ip fw { chain input { type filter hook input priority 0; ip daddr 10.96.0.10 drop; } }",
		want: []string{"10.96.0.10"}},
	{name: "a prefix", nft: "table ip fw { chain input { type filter hook input priority 0; ip daddr 169.254.0.0/16 tcp dport 53 drop; } }",
		want: []string{"169.254.20.10"}},
	{name: "a port range", nft: "table inet fw { chain input { type filter hook input priority 0; udp dport 1-1023 drop; } }",
		want: []string{"10.96.0.10", "169.254.20.10", "fd00::a"}},
	{name: "ip6 policy drop", nft: "table ip6 fw { chain input { type filter hook input priority 0; policy drop; } }",
		want: []string{"fd00::a"}},
	{name: "-dns.port 5353", port: 5353, nft: "table inet fw { chain input { type filter hook input priority 0; udp dport 5353 drop; } }",
		want: []string{"10.96.0.10", "169.254.20.10", "fd00::a"}},
}

// Every case that must not: a drop that is not certain, or not for our packets.
var coverFalse = []coverCase{
	{name: "DNS accepted before the policy drop", nft: "table inet fw { chain input { type filter hook input priority 0; policy drop; udp dport 53 accept; tcp dport 53 accept; } }"},
	{name: "iptables DNS accepted before the policy", iptables: [][]string{
		{"-A", "INPUT", "-p", "udp", "--dport", "53", "-j", "ACCEPT"}, {"-A", "INPUT", "-p", "tcp", "--dport", "53", "-j", "ACCEPT"},
		{"-A", "OUTPUT", "-p", "udp", "--sport", "53", "-j", "ACCEPT"}, {"-A", "OUTPUT", "-p", "tcp", "--sport", "53", "-j", "ACCEPT"},
		{"-P", "INPUT", "DROP"}, {"-P", "OUTPUT", "DROP"},
	}},
	{name: "drop by source address", nft: "table inet fw { chain input { type filter hook input priority 0; ip saddr 10.0.0.0/8 drop; } }"},
	{name: "drop by interface", nft: `table inet fw { chain input { type filter hook input priority 0; iifname "eth0" drop; } }`},
	{name: "drop by set", nft: "table inet fw { set bad { type ipv4_addr; } chain input { type filter hook input priority 0; ip saddr @bad drop; } }"},
	{name: "a jump before the policy", nft: "table inet fw { chain allow { udp dport 53 accept; } chain input { type filter hook input priority 0; policy drop; jump allow; } }"},
	{name: "ct state new drop", nft: "table inet fw { chain input { type filter hook input priority 0; ct state new drop; } }"},
	{name: "ct mark drop", nft: "table inet fw { chain input { type filter hook input priority 0; ct mark 0x1 drop; } }"},
	{name: "other ports", nft: "table inet fw { chain input { type filter hook input priority 0; tcp dport 22 drop; udp dport 5353 drop; } }"},
	{name: "another address", nft: "table ip fw { chain input { type filter hook input priority 0; ip daddr 10.96.0.11 drop; } }"},
	{name: "icmp", nft: "table inet fw { chain input { type filter hook input priority 0; meta l4proto icmp drop; } }"},
	{name: "prerouting and forward policies", nft: "table inet fw { chain p { type filter hook prerouting priority 0; policy drop; } chain f { type filter hook forward priority 0; policy drop; } }"},
	{name: "limit", nft: "table inet fw { chain input { type filter hook input priority 0; udp dport 53 limit rate over 100/second drop; } }"},
	{name: "our own table", nft: "table inet nodelocaldns-3 { chain input { type filter hook input priority 0; policy drop; } }"},
}

func TestCovering(t *testing.T) {
	freshConn(t)
	run := func(t *testing.T, tc coverCase) {
		testenv.Run(t, "nft", "flush", "ruleset")
		if tc.nft != "" {
			// One line per statement, as nft -f wants them: the cases are written on one line for reading.
			text := strings.NewReplacer("{ ", "{\n", "; ", "\n", "}", "}\n").Replace(tc.nft)
			testenv.NftApply(t, text)
		}
		for _, args := range tc.iptables {
			testenv.Run(t, "iptables", args...)
			testenv.Run(t, "ip6tables", args...) // the same firewall for IPv6, as host firewalls write both
		}
		port := tc.port
		if port == 0 {
			port = 53
		}
		chains, err := Scan("nodelocaldns-3")
		if err != nil {
			t.Fatal(err)
		}
		var gotS []string
		for ip := range maps.Keys(Covering(chains, coverIPs, port)) {
			gotS = append(gotS, ip.String())
		}
		slices.Sort(gotS)
		want := slices.Clone(tc.want)
		slices.Sort(want)
		want = slices.Compact(want)
		if !slices.Equal(gotS, want) {
			t.Errorf("Covering = %v, want %v\n%s", gotS, want, describe(chains, port))
		}
	}
	for _, tc := range coverTrue {
		t.Run("covers/"+tc.name, func(t *testing.T) { run(t, tc) })
	}
	for _, tc := range coverFalse {
		t.Run("not/"+tc.name, func(t *testing.T) { run(t, tc) })
	}
}

func describe(chains []Chain, port uint16) string {
	var b strings.Builder
	for _, ch := range chains {
		d, _ := ch.Drop(port)
		b.WriteString(ch.Chain + " " + string(ch.Hook) + " " + strings.Join(d.Rules, ",") + "\n")
	}
	return b.String()
}

// TestForeignNotracks: someone else's notrack of our queries before conntrack is found; after conntrack, for
// another address or port, or in an instance table (gated, ours), it is not.
func TestForeignNotracks(t *testing.T) {
	freshConn(t)
	testenv.NftApply(t, `table inet nodelocaldns-4 {
	chain raw-prerouting { type filter hook prerouting priority raw; ip daddr 10.96.0.10 udp dport 53 notrack; }
}
table ip someone {
	chain early { type filter hook prerouting priority raw; ip daddr 10.96.0.10 udp dport 53 notrack; ip daddr 10.96.0.11 notrack; tcp dport 80 notrack; }
	chain late { type filter hook prerouting priority mangle; udp dport 53 notrack; }
	chain out { type filter hook output priority raw; notrack; }
}
`)
	testenv.Run(t, "iptables", "-t", "raw", "-A", "PREROUTING", "-d", "169.254.20.10", "-p", "tcp", "--dport", "53", "-j", "NOTRACK")
	chains, err := Scan()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range Notracks(chains, coverIPs, 53) {
		got = append(got, n.Chain)
	}
	want := []string{"ip raw/PREROUTING", "ip someone/early", "ip someone/out"}
	if !slices.Equal(got, want) {
		t.Errorf("Notracks = %v, want %v", got, want)
	}
}
