package nft

import (
	"fmt"
	"net/netip"
	"testing"
)

// nodeCacheRule is one of the rules node-cache inserts for each -localip address (cmd/node-cache/app, initIptables),
// written down by hand from its source rather than from our output: its table, chain, match and target.
type nodeCacheRule struct {
	table, chain string // iptables table and built-in chain
	proto        string // -p
	dir          string // "-d IP --dport" or "-s IP --sport"
	port         string // "dns" (-dns.port) or "health" (-health-port)
	target       string // -j
}

// nodeCacheRules are node-cache's twelve rules per listen IP, in its order.
var nodeCacheRules = []nodeCacheRule{
	// 1, 2: queries to the cache skip conntrack, so kube-proxy's DNAT of the ClusterIP never sees them.
	{"raw", "PREROUTING", "tcp", "-d --dport", "dns", "NOTRACK"},
	{"raw", "PREROUTING", "udp", "-d --dport", "dns", "NOTRACK"},
	// 3, 4: queries are let in past an INPUT policy that only accepts tracked connections.
	{"filter", "INPUT", "tcp", "-d --dport", "dns", "ACCEPT"},
	{"filter", "INPUT", "udp", "-d --dport", "dns", "ACCEPT"},
	// 5, 6: the cache's replies skip conntrack.
	{"raw", "OUTPUT", "tcp", "-s --sport", "dns", "NOTRACK"},
	{"raw", "OUTPUT", "udp", "-s --sport", "dns", "NOTRACK"},
	// 7, 8: the replies are let out past an OUTPUT policy.
	{"filter", "OUTPUT", "tcp", "-s --sport", "dns", "ACCEPT"},
	{"filter", "OUTPUT", "udp", "-s --sport", "dns", "ACCEPT"},
	// 9, 10: queries of host-network clients, which leave through OUTPUT, skip conntrack (PR #319).
	{"raw", "OUTPUT", "tcp", "-d --dport", "dns", "NOTRACK"},
	{"raw", "OUTPUT", "udp", "-d --dport", "dns", "NOTRACK"},
	// 11, 12: the kubelet's liveness probe of the health plugin and its reply skip conntrack (PR #352).
	{"raw", "OUTPUT", "tcp", "-d --dport", "health", "NOTRACK"},
	{"raw", "OUTPUT", "tcp", "-s --sport", "health", "NOTRACK"},
}

// parityKey is what a node-cache rule and one of ours must agree on. It leaves out everything else a Rule may
// carry (comments, and conditions added on top of node-cache's match, such as a socket gate), so the comparison
// is about coverage: the same packets get the same verdict at the same point.
type parityKey struct {
	ipv6     bool
	hook     Hook
	priority int32
	dir      Dir
	proto    Proto
	port     uint16
	verdict  Verdict
}

// translate maps a node-cache rule to its counterpart for one family:
// the raw table is a base chain at raw priority (before conntrack), filter one at filter priority; the built-in
// chain is the hook; -d/--dport is "to the local IP", -s/--sport "from it"; NOTRACK and ACCEPT are the verdicts.
func translate(t *testing.T, r nodeCacheRule, ipv6 bool, dnsPort, healthPort uint16) parityKey {
	t.Helper()
	k := parityKey{ipv6: ipv6}
	switch r.table {
	case "raw":
		k.priority = -300
	case "filter":
		k.priority = 0
	default:
		t.Fatalf("unknown table %q", r.table)
	}
	k.hook = map[string]Hook{"PREROUTING": HookPrerouting, "INPUT": HookInput, "OUTPUT": HookOutput}[r.chain]
	k.dir = map[string]Dir{"-d --dport": DirTo, "-s --sport": DirFrom}[r.dir]
	k.proto = map[string]Proto{"tcp": ProtoTCP, "udp": ProtoUDP}[r.proto]
	k.port = map[string]uint16{"dns": dnsPort, "health": healthPort}[r.port]
	k.verdict = map[string]Verdict{"NOTRACK": VerdictNotrack, "ACCEPT": VerdictAccept}[r.target]
	if k.hook == "" || k.dir == "" || k.proto == "" || k.port == 0 || k.verdict == "" {
		t.Fatalf("cannot translate %+v", r)
	}
	return k
}

// Each of node-cache's rules has exactly one counterpart in our ruleset for each address family, and each of our
// rules is the counterpart of one of node-cache's: no rule lost, none added. Unlike the golden file, this does
// not come from our own output.
func TestParityWithNodeCache(t *testing.T) {
	const dnsPort, healthPort = 5353, 8081 // not the defaults, so a port taken from the wrong flag shows
	spec := Spec{LocalIPs: []netip.Addr{netip.MustParseAddr("169.254.20.10"), netip.MustParseAddr("fd00::10")}, DNSPort: dnsPort, HealthPort: healthPort}
	ours := map[parityKey][]string{}
	for _, c := range Build(spec).Chains {
		for _, r := range c.Rules {
			k := parityKey{ipv6: r.IPv6, hook: c.Hook, priority: c.Priority, dir: r.Dir, proto: r.Proto, port: r.Port, verdict: r.Verdict}
			ours[k] = append(ours[k], fmt.Sprintf("%s: %s", c.Name, r.Comment))
		}
	}
	want := map[parityKey]nodeCacheRule{}
	for _, ipv6 := range []bool{false, true} {
		for _, r := range nodeCacheRules {
			k := translate(t, r, ipv6, dnsPort, healthPort)
			if prev, dup := want[k]; dup {
				t.Fatalf("node-cache rules %+v and %+v translate alike", prev, r)
			}
			want[k] = r
			switch got := ours[k]; len(got) {
			case 0:
				t.Errorf("node-cache's -t %s -A %s -p %s %s %s -j %s (ipv6=%v) has no counterpart", r.table, r.chain, r.proto, r.dir, r.port, r.target, ipv6)
			case 1:
			default:
				t.Errorf("node-cache's -t %s -A %s -p %s %s %s -j %s (ipv6=%v) has %d counterparts: %q", r.table, r.chain, r.proto, r.dir, r.port, r.target, ipv6, len(got), got)
			}
		}
	}
	for k, rules := range ours {
		if _, ok := want[k]; !ok {
			t.Errorf("our rule %q (%+v) matches none of node-cache's", rules, k)
		}
	}
	if n := len(nodeCacheRules); n != 12 {
		t.Errorf("%d node-cache rules written down, want its 12", n)
	}
}
