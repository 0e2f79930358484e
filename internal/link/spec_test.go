package link

import (
	"net/netip"
	"strings"
	"testing"
)

// TestSpecValidate checks that Validate applies internal/addr's checks (whose table is in that package) to both
// fields, and names the interface for an IP error.
func TestSpecValidate(t *testing.T) {
	ip := netip.MustParseAddr
	ok := []netip.Addr{ip("169.254.20.10")}
	tests := []struct {
		name string
		spec Spec
		err  string // substring; "" means valid
	}{
		{"node-cache default", Spec{Name: "nodelocaldns", IPs: ok}, ""},
		{"ifbN name", Spec{Name: "ifb0", IPs: ok}, "reserved"},
		{"no IPs", Spec{Name: "nodelocaldns"}, `interface "nodelocaldns": no local IPs`},
		{"duplicate", Spec{Name: "nodelocaldns", IPs: []netip.Addr{ip("10.96.0.10"), ip("10.96.0.10")}}, "twice"},
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
