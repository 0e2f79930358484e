package link

import (
	"net/netip"
	"strings"
	"testing"
)

func TestSpecValidate(t *testing.T) {
	ip := netip.MustParseAddr
	ok := []netip.Addr{ip("169.254.20.10")}
	tests := []struct {
		name string
		spec Spec
		err  string // substring; "" means valid
	}{
		{"node-cache default", Spec{Name: "nodelocaldns", IPs: ok}, ""},
		{"dual stack", Spec{Name: "nodelocaldns", IPs: []netip.Addr{ip("169.254.20.10"), ip("fd00::10")}}, ""},
		{"fifteen bytes", Spec{Name: "abcdefghijklmno", IPs: ok}, ""},
		{"ifb prefix but not ifbN", Spec{Name: "ifbx1", IPs: ok}, ""},
		{"empty name", Spec{IPs: ok}, "empty"},
		{"sixteen bytes", Spec{Name: "abcdefghijklmnop", IPs: ok}, "longer than 15"},
		{"dot", Spec{Name: ".", IPs: ok}, "not a valid"},
		{"slash", Spec{Name: "a/b", IPs: ok}, "contains"},
		{"colon", Spec{Name: "eth0:1", IPs: ok}, "contains"},
		{"space", Spec{Name: "a b", IPs: ok}, "contains"},
		{"ifb0", Spec{Name: "ifb0", IPs: ok}, "reserved"},
		{"ifb17", Spec{Name: "ifb17", IPs: ok}, "reserved"},
		{"no IPs", Spec{Name: "nodelocaldns"}, "no local IPs"},
		{"zero IP", Spec{Name: "nodelocaldns", IPs: []netip.Addr{{}}}, "invalid local IP"},
		{"unspecified", Spec{Name: "nodelocaldns", IPs: []netip.Addr{ip("0.0.0.0")}}, "not a unicast"},
		{"multicast", Spec{Name: "nodelocaldns", IPs: []netip.Addr{ip("ff02::1")}}, "not a unicast"},
		{"zone", Spec{Name: "nodelocaldns", IPs: []netip.Addr{ip("fe80::1%eth0")}}, "zones"},
		{"duplicate", Spec{Name: "nodelocaldns", IPs: []netip.Addr{ip("10.96.0.10"), ip("::ffff:10.96.0.10")}}, "twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.spec.Validate()
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.err)
			}
		})
	}
}

func TestSpecPrefixesAreHostRoutes(t *testing.T) {
	s := Spec{Name: "x", IPs: []netip.Addr{
		netip.MustParseAddr("169.254.20.10"), netip.MustParseAddr("::ffff:10.96.0.10"), netip.MustParseAddr("fd00::a")}}
	got := s.prefixes()
	want := []string{"169.254.20.10/32", "10.96.0.10/32", "fd00::a/128"}
	for i, p := range got {
		if p.String() != want[i] {
			t.Errorf("prefixes()[%d] = %s, want %s", i, p, want[i])
		}
	}
}
