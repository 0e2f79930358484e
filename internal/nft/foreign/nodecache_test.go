package foreign

import (
	"slices"
	"strings"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
)

// TestRemoveNodeCacheRules writes node-cache's rules with the real iptables-nft and ip6tables-nft, as its
// initIptables does (-I, in its order), beside rules that differ in one thing each, and checks that exactly
// node-cache's go, in both families, and that a second call finds nothing.
func TestRemoveNodeCacheRules(t *testing.T) {
	freshConn(t)
	spec := nft.Spec{LocalIPs: ips("169.254.20.10", "fd00::a"), DNSPort: 53, HealthPort: 8080}
	insert := func(cmd, table, chain, proto, addrFlag, ip, portFlag, port, target, comment string, extra ...string) {
		args := append([]string{"-t", table, "-I", chain, "-p", proto, addrFlag, ip, portFlag, port}, extra...)
		testenv.Run(t, cmd, append(args, "-j", target, "-m", "comment", "--comment", comment)...)
	}
	written := 0
	for _, f := range []struct{ cmd, ip string }{{"iptables", "169.254.20.10"}, {"ip6tables", "fd00::a"}} {
		for _, p := range []string{"tcp", "udp"} {
			insert(f.cmd, "raw", "PREROUTING", p, "-d", f.ip, "--dport", "53", "NOTRACK", nft.CommentSkipConntrack)
			insert(f.cmd, "filter", "INPUT", p, "-d", f.ip, "--dport", "53", "ACCEPT", nft.CommentAllowDNS)
			insert(f.cmd, "raw", "OUTPUT", p, "-s", f.ip, "--sport", "53", "NOTRACK", nft.CommentSkipConntrack)
			insert(f.cmd, "filter", "OUTPUT", p, "-s", f.ip, "--sport", "53", "ACCEPT", nft.CommentAllowDNS)
			insert(f.cmd, "raw", "OUTPUT", p, "-d", f.ip, "--dport", "53", "NOTRACK", nft.CommentSkipConntrack)
		}
		insert(f.cmd, "raw", "OUTPUT", "tcp", "-d", f.ip, "--dport", "8080", "NOTRACK", nft.CommentSkipConntrack)
		insert(f.cmd, "raw", "OUTPUT", "tcp", "-s", f.ip, "--sport", "8080", "NOTRACK", nft.CommentSkipConntrack)
		written += 12
	}
	// Lookalikes: another comment, another port, another address, an interface, a reversed port side, a
	// health-port rule for udp (node-cache writes tcp only), and the right rule in the wrong chain.
	insert("iptables", "raw", "PREROUTING", "udp", "-d", "169.254.20.10", "--dport", "53", "NOTRACK", "mine")
	insert("iptables", "raw", "PREROUTING", "udp", "-d", "169.254.20.10", "--dport", "5353", "NOTRACK", nft.CommentSkipConntrack)
	insert("iptables", "raw", "PREROUTING", "udp", "-d", "169.254.20.11", "--dport", "53", "NOTRACK", nft.CommentSkipConntrack)
	insert("iptables", "raw", "PREROUTING", "udp", "-d", "169.254.20.10", "--dport", "53", "NOTRACK", nft.CommentSkipConntrack, "-i", "eth0")
	insert("iptables", "raw", "PREROUTING", "udp", "-d", "169.254.20.10", "--sport", "53", "NOTRACK", nft.CommentSkipConntrack)
	insert("iptables", "raw", "OUTPUT", "udp", "-d", "169.254.20.10", "--dport", "8080", "NOTRACK", nft.CommentSkipConntrack)
	insert("ip6tables", "filter", "FORWARD", "udp", "-d", "fd00::a", "--dport", "53", "ACCEPT", nft.CommentAllowDNS)
	lookalikes := 7

	removed, err := RemoveNodeCacheRules(spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != written {
		t.Errorf("removed %d rules, want %d:\n%s", len(removed), written, strings.Join(removed, "\n"))
	}
	left := nodeCacheSave(t, "iptables-save")
	left = append(left, nodeCacheSave(t, "ip6tables-save")...)
	if len(left) != lookalikes {
		t.Errorf("left %d rules, want the %d lookalikes:\n%s", len(left), lookalikes, strings.Join(left, "\n"))
	}
	if !slices.Contains(removed, `ip6tables -t filter -A INPUT -p udp -d fd00::a --dport 53 -m comment --comment "NodeLocal DNS Cache: allow DNS traffic" -j ACCEPT`) {
		t.Errorf("removed lacks the IPv6 filter INPUT udp rule:\n%s", strings.Join(removed, "\n"))
	}
	if again, err := RemoveNodeCacheRules(spec); err != nil || len(again) != 0 {
		t.Errorf("a second pass removed %q, %v; want nothing", again, err)
	}
}

// TestRemoveNodeCacheRulesWithoutTables: no iptables-nft table at all is no error.
func TestRemoveNodeCacheRulesWithoutTables(t *testing.T) {
	freshConn(t)
	if got, err := RemoveNodeCacheRules(nft.Spec{LocalIPs: ips("169.254.20.10", "fd00::a"), DNSPort: 53, HealthPort: 8080}); err != nil || got != nil {
		t.Errorf("RemoveNodeCacheRules = %q, %v; want nothing, no error", got, err)
	}
}

func nodeCacheSave(t *testing.T, cmd string) []string {
	var out []string
	for _, l := range strings.Split(testenv.Run(t, cmd), "\n") {
		if strings.HasPrefix(l, "-A ") {
			out = append(out, l)
		}
	}
	return out
}
