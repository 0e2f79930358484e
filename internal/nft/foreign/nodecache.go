package foreign

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
)

// node-cache's leftovers. node-cache (kubernetes-sigs/node-local-dns, `initIptables`) writes 12 iptables rules per
// listen IP and removes them only on SIGTERM: after an OOM kill or a SIGKILL they stay, and the nodes that
// migrate to us are exactly those. Its ungated `-j NOTRACK` for the ClusterIP in the raw table then keeps
// kube-proxy's DNAT from running whenever we do not serve, which undoes our fail-open. [RemoveNodeCacheRules]
// does node-cache's own teardown for it, and nothing more: a rule is removed only when it is, expression for
// expression, one of the rules initIptables writes for one of our listen IPs and ports, with its comment.
//
//	raw PREROUTING  -p tcp|udp -d IP --dport DNS     -j NOTRACK  "NodeLocal DNS Cache: skip conntrack"
//	filter INPUT    -p tcp|udp -d IP --dport DNS     -j ACCEPT   "NodeLocal DNS Cache: allow DNS traffic"
//	raw OUTPUT      -p tcp|udp -s IP --sport DNS     -j NOTRACK  skip conntrack
//	filter OUTPUT   -p tcp|udp -s IP --sport DNS     -j ACCEPT   allow DNS traffic
//	raw OUTPUT      -p tcp|udp -d IP --dport DNS     -j NOTRACK  skip conntrack (host-network clients)
//	raw OUTPUT      -p tcp -d IP --dport HEALTH      -j NOTRACK  skip conntrack (liveness probe)
//	raw OUTPUT      -p tcp -s IP --sport HEALTH      -j NOTRACK  skip conntrack
//
// In iptables-nft's tables `ip raw`, `ip filter`, `ip6 raw`, `ip6 filter` (xtables.go shows the encoding). Rules
// node-cache wrote through iptables-legacy are not in nftables at all ([LegacyTables] reports those tables).

// staleRule is one rule of node-cache's, decoded (parity_test.go has the same twelve, written from its source).
type staleRule struct {
	table, chain string
	proto        nft.Proto
	dir          nft.Dir
	ip           netip.Addr
	port         uint16
	verdict      nft.Verdict // nft.VerdictNotrack or nft.VerdictAccept
	comment      string
}

func (r staleRule) String() string {
	addr, port := "-d", "--dport"
	if r.dir == nft.DirFrom {
		addr, port = "-s", "--sport"
	}
	target := "NOTRACK"
	if r.verdict == nft.VerdictAccept {
		target = "ACCEPT"
	}
	return fmt.Sprintf("-t %s -A %s -p %s %s %s %s %d -m comment --comment %q -j %s",
		r.table, r.chain, r.proto, addr, r.ip, port, r.port, r.comment, target)
}

// staleRules is every rule initIptables writes for ips on dnsPort and healthPort.
func staleRules(ips []netip.Addr, dnsPort, healthPort uint16) []staleRule {
	var out []staleRule
	add := func(table, chain string, dir nft.Dir, port uint16, v nft.Verdict, comment string, ip netip.Addr, protos ...nft.Proto) {
		for _, p := range protos {
			out = append(out, staleRule{table, chain, p, dir, ip, port, v, comment})
		}
	}
	both := []nft.Proto{nft.ProtoTCP, nft.ProtoUDP}
	for _, ip := range ips {
		add("raw", "PREROUTING", nft.DirTo, dnsPort, nft.VerdictNotrack, nft.CommentSkipConntrack, ip, both...)
		add("filter", "INPUT", nft.DirTo, dnsPort, nft.VerdictAccept, nft.CommentAllowDNS, ip, both...)
		add("raw", "OUTPUT", nft.DirFrom, dnsPort, nft.VerdictNotrack, nft.CommentSkipConntrack, ip, both...)
		add("filter", "OUTPUT", nft.DirFrom, dnsPort, nft.VerdictAccept, nft.CommentAllowDNS, ip, both...)
		add("raw", "OUTPUT", nft.DirTo, dnsPort, nft.VerdictNotrack, nft.CommentSkipConntrack, ip, both...)
		add("raw", "OUTPUT", nft.DirTo, healthPort, nft.VerdictNotrack, nft.CommentSkipConntrack, ip, nft.ProtoTCP)
		add("raw", "OUTPUT", nft.DirFrom, healthPort, nft.VerdictNotrack, nft.CommentSkipConntrack, ip, nft.ProtoTCP)
	}
	return out
}

// staleChains are the iptables-nft chains node-cache writes to.
var staleChains = []struct{ table, chain string }{
	{"raw", "PREROUTING"}, {"raw", "OUTPUT"}, {"filter", "INPUT"}, {"filter", "OUTPUT"},
}

// decodeStaleRule reads a rule of table/chain as one iptables-nft wrote for `-p P -d|-s IP --dport|--sport
// PORT -m comment --comment C -j NOTRACK|ACCEPT`, in any order of its expressions; anything else in the rule
// (another match, a mask, an interface, a second address) and it is not node-cache's.
func decodeStaleRule(table, chain string, v6 bool, r *nftables.Rule) (staleRule, bool) {
	out := staleRule{table: table, chain: chain, comment: ruleComment(r.UserData)}
	dst, addrLen := nft.AddrOffset(nft.DirTo, v6)
	src, _ := nft.AddrOffset(nft.DirFrom, v6)
	seen := map[string]bool{}
	once := func(what string) bool { ok := !seen[what]; seen[what] = true; return ok }
	ex := r.Exprs
	for i := 0; i < len(ex); i++ {
		var cmp *expr.Cmp
		if i+1 < len(ex) {
			cmp, _ = ex[i+1].(*expr.Cmp)
		}
		if cmp != nil && cmp.Op != expr.CmpOpEq {
			return out, false
		}
		switch e := ex[i].(type) {
		case *expr.Meta:
			if e.Key != expr.MetaKeyL4PROTO || cmp == nil || len(cmp.Data) != 1 || !once("proto") {
				return out, false
			}
			out.proto, i = protoName(cmp.Data[0]), i+1
		case *expr.Payload:
			switch {
			case cmp == nil || e.OperationType != expr.PayloadLoad:
				return out, false
			case e.Base == expr.PayloadBaseNetworkHeader && !v6 && e.Offset == 9 && e.Len == 1 && len(cmp.Data) == 1 && once("proto"):
				out.proto = protoName(cmp.Data[0])
			case e.Base == expr.PayloadBaseNetworkHeader && e.Len == addrLen && (e.Offset == dst || e.Offset == src) && once("addr"):
				ip, _ := netip.AddrFromSlice(cmp.Data)
				out.ip = ip
				out.dir = map[bool]nft.Dir{true: nft.DirTo, false: nft.DirFrom}[e.Offset == dst]
				seen[string(out.dir)] = true
			case e.Base == expr.PayloadBaseTransportHeader && e.Len == 2 && (e.Offset == nft.PortOffset(nft.DirTo) || e.Offset == nft.PortOffset(nft.DirFrom)) && len(cmp.Data) == 2 && once("port"):
				out.port = binary.BigEndian.Uint16(cmp.Data)
				seen["port "+map[bool]string{true: string(nft.DirTo), false: string(nft.DirFrom)}[e.Offset == nft.PortOffset(nft.DirTo)]] = true
			default:
				return out, false
			}
			i++
		case *expr.Match:
			c, ok := xtComment(e)
			if !ok || !once("comment") {
				return out, false
			}
			out.comment = c
		case *expr.Counter:
		case *expr.Target:
			if !isNotrack(e) || !once("verdict") {
				return out, false
			}
			out.verdict = nft.VerdictNotrack
		case *expr.Verdict:
			if e.Kind != expr.VerdictAccept || !once("verdict") {
				return out, false
			}
			out.verdict = nft.VerdictAccept
		default:
			return out, false
		}
	}
	// The port must be on the same side as the address: node-cache writes -d with --dport, -s with --sport.
	ok := out.proto != "" && out.ip.IsValid() && out.verdict != "" && seen["port "+string(out.dir)]
	return out, ok
}

func protoName(p byte) nft.Proto {
	switch p {
	case unix.IPPROTO_TCP:
		return nft.ProtoTCP
	case unix.IPPROTO_UDP:
		return nft.ProtoUDP
	}
	return nft.Proto(fmt.Sprintf("proto-%d", p))
}

// RemoveNodeCacheRules deletes, in one batch, every rule node-cache's initIptables writes for s's listen IPs,
// DNS port and health port from iptables-nft's raw and filter tables (ip for IPv4 addresses, ip6 for IPv6), and
// returns them as iptables-save would name them. It reads only those four chains per family, and touches
// nothing else: a rule differing in any expression stays. A missing table or chain is no error.
//
// Like [Scan], it runs on a short-lived socket of its own.
func RemoveNodeCacheRules(s nft.Spec) ([]string, error) {
	var removed []string
	err := withSocket(func(sock socket) (err error) {
		removed, err = removeNodeCacheRules(sock, s)
		return err
	})
	return removed, err
}

func removeNodeCacheRules(sock socket, s nft.Spec) ([]string, error) {
	want := staleRules(s.LocalIPs, s.DNSPort, s.HealthPort)
	var removed []string
	for _, fam := range []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6} {
		v6 := fam == nftables.TableFamilyIPv6
		if !slices.ContainsFunc(s.LocalIPs, func(ip netip.Addr) bool { return ip.Is6() == v6 }) {
			continue
		}
		for _, tc := range staleChains {
			t := &nftables.Table{Name: tc.table, Family: fam}
			rules, err := sock.GetRules(t, &nftables.Chain{Name: tc.chain, Table: t})
			if nft.IsNotExist(err) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("list rules of %s %s/%s: %w", nft.FamilyName(uint8(fam)), tc.table, tc.chain, err)
			}
			for _, r := range rules {
				got, ok := decodeStaleRule(tc.table, tc.chain, v6, r)
				if !ok || !slices.ContainsFunc(want, func(w staleRule) bool { return w == got }) {
					continue
				}
				if err := sock.DelRule(&nftables.Rule{Table: t, Chain: &nftables.Chain{Name: tc.chain, Table: t}, Handle: r.Handle}); err != nil {
					return nil, fmt.Errorf("queue deletion of %s: %w", got, err)
				}
				cmd := "iptables " + got.String()
				if v6 {
					cmd = "ip6tables " + got.String()
				}
				removed = append(removed, cmd)
			}
		}
	}
	if len(removed) == 0 {
		return nil, nil
	}
	if err := sock.Flush(); err != nil {
		sock.Discard()
		return nil, fmt.Errorf("delete node-cache's rules: %w", err)
	}
	return removed, nil
}
