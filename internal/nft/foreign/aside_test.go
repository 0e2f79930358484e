package foreign

import (
	"net/netip"
	"slices"
	"testing"
)

// StepAside steps aside for exactly the covered IPs, and names what changed since the last look.
func TestStepAside(t *testing.T) {
	by := func(ss ...string) map[netip.Addr]string {
		m := map[netip.Addr]string{}
		for _, ip := range ips(ss...) {
			m[ip] = "inet filter input"
		}
		return m
	}
	for _, tc := range []struct {
		name              string
		was, covered      map[netip.Addr]string
		now, gained, lost []netip.Addr
	}{
		{"nothing", nil, nil, ips(), nil, nil},
		{"a drop appears", by(), by("10.96.0.10", "169.254.20.10"), ips("10.96.0.10", "169.254.20.10"), ips("10.96.0.10", "169.254.20.10"), nil},
		{"unchanged", by("10.96.0.10"), by("10.96.0.10"), ips("10.96.0.10"), nil, nil},
		{"one goes, one comes", by("10.96.0.10"), by("fd00::a"), ips("fd00::a"), ips("fd00::a"), ips("10.96.0.10")},
		{"all go", by("10.96.0.10", "fd00::a"), nil, ips(), nil, ips("10.96.0.10", "fd00::a")},
	} {
		now, gained, lost := StepAside(tc.was, tc.covered)
		if !slices.Equal(now, tc.now) || !slices.Equal(gained, tc.gained) || !slices.Equal(lost, tc.lost) {
			t.Errorf("%s: StepAside = %v, +%v, -%v; want %v, +%v, -%v", tc.name, now, gained, lost, tc.now, tc.gained, tc.lost)
		}
	}
}
