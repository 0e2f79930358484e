package supervisor

import (
	"slices"
	"testing"
)

func TestUnboundIPs(t *testing.T) {
	local := addrs("169.254.20.10", "10.96.0.10", "fd00::a")
	for _, tc := range []struct {
		name  string
		addrs []string
		want  []string
	}{
		{"all bound", []string{"169.254.20.10:53", "10.96.0.10:53", "[fd00::a]:53"}, nil},
		{"bind drops the ClusterIP", []string{"169.254.20.10:53", "[fd00::a]:53"}, []string{"10.96.0.10"}},
		{"another port is no listener", []string{"169.254.20.10:53", "10.96.0.10:5353", "[fd00::a]:53"}, []string{"10.96.0.10"}},
		{"wildcard", []string{"[::]:53"}, []string{"169.254.20.10", "10.96.0.10", "fd00::a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := unboundIPs(tc.addrs, local, 53); !slices.Equal(got, addrs(tc.want...)) {
				t.Errorf("unboundIPs = %v, want %v", got, tc.want)
			}
		})
	}
}
