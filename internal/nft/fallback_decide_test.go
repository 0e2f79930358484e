package nft

import (
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

const decideLease = 15 * time.Minute

// voter is an instance table with ips and a vote: the ClusterIPs and ports it names for the fallback
// (comma-separated; "" says none; "-" says it has no say).
func voter(table, vote string, ips ...string) Instance {
	in := Instance{Table: table, IPs: addrs(ips...), Voted: vote != "-"}
	if vote != "-" {
		in.Fallbacks = votes(vote)
	}
	return in
}

// votes reads a comma-separated vote ("10.96.0.10:53,[fd00:96::a]:53"); "" is none.
func votes(s string) []netip.AddrPort {
	var out []netip.AddrPort
	for _, v := range strings.Split(s, ",") {
		if v != "" {
			out = append(out, netip.MustParseAddrPort(v))
		}
	}
	return out
}

// TestDecideFallback: every instance derives the same table from the same instances, whatever their flags.
func TestDecideFallback(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ins    []Instance
		leave  bool
		target string   // the targets, space-separated; "" with leave false: delete the table
		covers []string // the covered pairs, sorted
	}{
		{name: "one instance, iptables mode: the ClusterIP fails open through kube-proxy",
			ins:    []Instance{voter("nodelocaldns", "10.96.0.10:53", "169.254.20.10", "10.96.0.10")},
			target: "10.96.0.10", covers: []string{"169.254.20.10:53"}},
		{name: "a surge adding an address on another port: the union",
			ins: []Instance{voter("nodelocaldns", "10.96.0.10:53", "169.254.20.10", "10.96.0.10"),
				voter("nodelocaldns-1", "10.96.0.10:5353", "169.254.20.11")},
			target: "10.96.0.10", covers: []string{"169.254.20.10:53", "169.254.20.11:5353"}},
		{name: "two ClusterIPs said (kube-dns recreated): the lowest, and neither is covered",
			ins: []Instance{voter("nodelocaldns", "10.96.0.20:53", "169.254.20.10", "10.96.0.20"),
				voter("nodelocaldns-1", "10.96.0.10:53", "169.254.20.10", "10.96.0.10")},
			target: "10.96.0.10", covers: []string{"169.254.20.10:53"}},
		{name: "one instance wants none: none, from its first pod on",
			ins: []Instance{voter("nodelocaldns", "10.96.0.10:53", "169.254.20.10"),
				voter("nodelocaldns-1", "", "169.254.20.10")}},
		{name: "an instance without interception has no say",
			ins: []Instance{voter("nodelocaldns", "-", "169.254.20.11"),
				voter("nodelocaldns-1", "10.96.0.10:53", "169.254.20.10")},
			target: "10.96.0.10", covers: []string{"169.254.20.10:53"}},
		{name: "IPv6-only: the IPv6 ClusterIP, the IPv6 local address",
			ins:    []Instance{voter("nodelocaldns", "[fd00:96::a]:53", "fd00::10", "fd00:96::a")},
			target: "fd00:96::a", covers: []string{"[fd00::10]:53"}},
		{name: "dual-stack: each family towards its own ClusterIP",
			ins:    []Instance{voter("nodelocaldns", "10.96.0.10:53,[fd00:96::a]:53", "169.254.20.10", "fd00::10", "10.96.0.10", "fd00:96::a")},
			target: "10.96.0.10 fd00:96::a", covers: []string{"169.254.20.10:53", "[fd00::10]:53"}},
		{name: "a surge from an IPv4 to a dual-stack vote: IPv4 only, as the old instance decides, until it leaves",
			ins: []Instance{voter("nodelocaldns", "10.96.0.10:53", "169.254.20.10", "10.96.0.10", "fd00::10"),
				voter("nodelocaldns-1", "10.96.0.10:53,[fd00:96::a]:53", "169.254.20.10", "fd00::10", "10.96.0.10", "fd00:96::a")},
			target: "10.96.0.10", covers: []string{"169.254.20.10:53"}},
		{name: "an IPv4 vote and an IPv6 one: no family both name, no table",
			ins: []Instance{voter("nodelocaldns", "10.96.0.10:53", "169.254.20.10"),
				voter("nodelocaldns-1", "[fd00:96::a]:53", "fd00::10")}},
		{name: "nobody has a say", ins: []Instance{voter("nodelocaldns", "-", "169.254.20.10")}, leave: true},
		{name: "an earlier version keeps its own table",
			ins: []Instance{{Table: "nodelocaldns", IPs: addrs("169.254.20.10"), Legacy: true},
				voter("nodelocaldns-1", "10.96.0.10:53", "169.254.20.10")}, leave: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := DecideFallback(tc.ins, decideLease)
			rev := slices.Clone(tc.ins)
			slices.Reverse(rev)
			if again := DecideFallback(rev, decideLease); !reflect.DeepEqual(again.Spec, d.Spec) || again.Leave != d.Leave {
				t.Errorf("the order of the instances changes the decision: %+v, then %+v", d, again)
			}
			switch {
			case d.Leave != tc.leave:
				t.Fatalf("leave = %v (%s), want %v", d.Leave, d.Why, tc.leave)
			case tc.leave:
				return
			case tc.target == "":
				if d.Spec != nil {
					t.Fatalf("decided %+v (%s), want no table", d.Spec, d.Why)
				}
				return
			case d.Spec == nil:
				t.Fatalf("decided no table (%s), want one towards %s", d.Why, tc.target)
			}
			var targets []string
			for _, ip := range d.Spec.Targets {
				targets = append(targets, ip.String())
			}
			if got := strings.Join(targets, " "); got != tc.target {
				t.Errorf("target %s, want %s", got, tc.target)
			}
			var got []string
			for _, p := range BuildFallback(*d.Spec).Covered() {
				got = append(got, p.String())
			}
			if !slices.Equal(got, tc.covers) {
				t.Errorf("covers %v, want %v", got, tc.covers)
			}
		})
	}
}
