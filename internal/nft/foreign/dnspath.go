package foreign

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
)

// Foreign drops: what, outside our tables, may drop the DNS traffic our rules accept. An nftables accept ends
// only its own base chain; every other base chain on the same hook still sees the packet, so a drop there
// wins whatever we do. We never write into those tables; we find them and say so.

// Drop is one base chain of another table that may drop DNS traffic.
type Drop struct {
	// Chain is "family table/chain", e.g. "ip filter/INPUT".
	Chain string
	// Hook is prerouting, input or output.
	Hook string
	// Policy is true when the chain's policy is drop (whatever its rules).
	Policy bool
	// Rules describes the chain's own drop and reject rules that may match DNS ("handle 7: reject"), in order.
	Rules []string
}

// dnsPathHooks are the hooks a DNS query to us or its reply crosses: prerouting and input for a pod's query,
// output for our reply and for a host-network client's query.
var dnsPathHooks = map[nftables.ChainHook]nft.Hook{
	*nftables.ChainHookPrerouting: nft.HookPrerouting,
	*nftables.ChainHookInput:      nft.HookInput,
	*nftables.ChainHookOutput:     nft.HookOutput,
}

// Chain is one base chain of another table on the DNS path, as read from the kernel: what the
// foreign-drop report ([Chain.Drop]), the notrack report ([Notracks]) and the step-aside
// decision ([Covering]) look at.
type Chain struct {
	// Chain is "family table/chain", e.g. "ip filter/INPUT".
	Chain    string
	Table    string
	Family   nftables.TableFamily
	Type     nftables.ChainType
	Hook     nft.Hook
	Priority int32
	// PolicyDrop is true when the chain's policy is drop.
	PolicyDrop bool
	Rules      []*nftables.Rule
}

// Scan reads the base chains of tables other than ours on the DNS path (ip, ip6 and inet families;
// prerouting, input and output hooks) with their own rules; ours are the inet tables named in ours. It dumps
// the chains once (no rules) and then reads only those base chains' rules: a bounded read, whatever the size
// of kube-proxy's or anyone's regular chains. Rules reached through a jump are not read. Sorted by chain.
//
// It runs on a short-lived socket of its own, never under our owning socket's lock: the dump of a node's
// every chain (25k on a big kube-proxy node, about 100 ms) delays no Apply, scrape or /ready.
func Scan(ours ...string) ([]Chain, error) {
	var out []Chain
	err := withSocket(func(s socket) (err error) {
		out, err = scan(s, ours)
		return err
	})
	return out, err
}

func scan(s socket, ours []string) ([]Chain, error) {
	chains, err := s.ListChains()
	if err != nil {
		return nil, fmt.Errorf("list chains: %w", err)
	}
	var out []Chain
	for _, ch := range chains {
		if ch.Table == nil || ch.Hooknum == nil {
			continue
		}
		if ch.Table.Family == nftables.TableFamilyINet && slices.Contains(ours, ch.Table.Name) {
			continue
		}
		fam := ch.Table.Family
		hook, onPath := dnsPathHooks[*ch.Hooknum]
		if (fam != nftables.TableFamilyIPv4 && fam != nftables.TableFamilyIPv6 && fam != nftables.TableFamilyINet) || !onPath {
			continue // arp, bridge, netdev, forward, postrouting: not the path of DNS traffic to us
		}
		fc := Chain{Chain: fmt.Sprintf("%s %s/%s", nft.FamilyName(uint8(fam)), ch.Table.Name, ch.Name), Table: ch.Table.Name, Family: ch.Table.Family,
			Type: ch.Type, Hook: hook, PolicyDrop: ch.Policy != nil && *ch.Policy == nftables.ChainPolicyDrop}
		if ch.Priority != nil {
			fc.Priority = int32(*ch.Priority)
		}
		if fc.Rules, err = s.GetRules(ch.Table, ch); err != nil {
			if nft.IsNotExist(err) {
				continue // gone while we looked
			}
			return nil, fmt.Errorf("list rules of base chain %s: %w", fc.Chain, err)
		}
		out = append(out, fc)
	}
	slices.SortFunc(out, func(a, b Chain) int { return strings.Compare(a.Chain, b.Chain) })
	return out, nil
}

// ScanDrops finds, among the base chains [Scan] reads, those that drop by policy or hold drop or reject rules
// that may match DNS on port (`-dns.port`). Sorted by chain.
func ScanDrops(port uint16, ours ...string) ([]Drop, error) {
	chains, err := Scan(ours...)
	if err != nil {
		return nil, err
	}
	return Drops(chains, port), nil
}

// Drops is the foreign-drop report of chains for DNS on port.
func Drops(chains []Chain, port uint16) []Drop {
	var out []Drop
	for _, ch := range chains {
		if d, ok := ch.Drop(port); ok {
			out = append(out, d)
		}
	}
	return out
}

// Drop says whether ch may drop DNS on port: by policy, or by drop and reject rules that may match a query
// to port or a reply from it, in either family, over either transport, whatever the address and interface:
// the rule read with the packet model (packet.go) with the address left unknown. What it rules out: another
// protocol, other ports, a conntrack match our untracked packets fail (`ct state invalid drop`).
func (ch Chain) Drop(port uint16) (Drop, bool) {
	d := Drop{Chain: ch.Chain, Hook: string(ch.Hook), Policy: ch.PolicyDrop}
	for _, r := range ch.Rules {
		if word, ok := mayDropDNS(r.Exprs, port); ok {
			d.Rules = append(d.Rules, fmt.Sprintf("handle %d: %s", r.Handle, word))
		}
	}
	return d, d.Policy || len(d.Rules) > 0
}

// mayDropDNS says whether a rule may drop some DNS packet on port, and with which statement.
func mayDropDNS(exprs []expr.Any, port uint16) (string, bool) {
	for _, family := range []netip.Addr{netip.IPv4Unspecified(), netip.IPv6Unspecified()} {
		for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
			for _, reply := range []bool{false, true} {
				p := packet{addr: family, proto: proto, port: port, reply: reply, anyAddr: true}
				if m, v, word := p.match(exprs); m != no && v == verdictDrop {
					return word, true
				}
			}
		}
	}
	return "", false
}

// LegacyTables lists the iptables-legacy tables that exist in this network namespace, as "ip filter" or
// "ip6 nat". The kernel creates a legacy table in a namespace only when something uses it there (the
// iptables-legacy tools' first call, through the x_tables sockopt interface; loading a module instantiates
// nothing by itself), and iptables-nft never does, so a listed table means a legacy ruleset is being used
// beside nftables: its rules see our traffic too, in hooks we cannot read through nftables. An empty or
// absent file (no ip_tables module) means none.
func LegacyTables() []string {
	var out []string
	for _, f := range []struct{ family, path string }{
		{"ip", "/proc/net/ip_tables_names"},
		{"ip6", "/proc/net/ip6_tables_names"},
	} {
		b, err := os.ReadFile(f.path)
		if err != nil {
			continue
		}
		for _, name := range strings.Fields(string(b)) {
			out = append(out, f.family+" "+name)
		}
	}
	slices.Sort(out)
	return out
}
