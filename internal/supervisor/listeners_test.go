package supervisor

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
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

// A reload that drops a bind re-applies our table with host-network rules for the bound addresses only, and
// one that binds it again puts them back; the sets that say which addresses we need do not change.
func TestRebindKeepsHostRulesToBoundAddresses(t *testing.T) {
	k := newFakeKernel()
	a, reg := newInstance(t, k, "169.254.20.10", "10.96.0.10")
	start(t, a)
	if !a.setUnbound(addrs("10.96.0.10")) || a.setUnbound(addrs("10.96.0.10")) {
		t.Fatal("setUnbound reports no change, or a change twice")
	}
	if err := a.rebind(); err != nil {
		t.Fatal(err)
	}
	if got := setElements(reg.last, nft.SetBound4); !slices.Equal(got, addrs("169.254.20.10")) {
		t.Errorf("bound4 = %v, want the link-local address only", got)
	}
	if got := setElements(reg.last, nft.SetLocal4); len(got) != 2 {
		t.Errorf("local4 = %v, want both addresses still", got)
	}
	hostRules := 0
	for _, c := range reg.last.Chains {
		for _, r := range c.Rules {
			if r.Bound {
				hostRules++
			}
		}
	}
	if hostRules != 4 { // raw-output's 4 host-network query rules
		t.Errorf("%d rules match the bound sets, want 4", hostRules)
	}
	if !a.setUnbound(nil) {
		t.Fatal("binding again is no change")
	}
	if err := a.rebind(); err != nil {
		t.Fatal(err)
	}
	if got := setElements(reg.last, nft.SetBound4); got != nil {
		t.Errorf("bound4 = %v with every address bound, want no bound sets", got)
	}
}

func setElements(rs *nft.Ruleset, name string) []netip.Addr {
	for _, s := range rs.Sets {
		if s.Name == name {
			return s.Elements
		}
	}
	return nil
}

// A listener found unbound once CoreDNS listens but before we serve (start-up's checkListeners) keeps the
// listening table's host-network rules off it at once: host-network queries to it go to kube-dns, not to an
// address nobody answers, from then on rather than from serve.
func TestRebindWhileListening(t *testing.T) {
	k := newFakeKernel()
	a, reg := newInstance(t, k, "169.254.20.10", "10.96.0.10")
	startListening(t, a)
	a.setUnbound(addrs("10.96.0.10"))
	if err := a.rebind(); err != nil {
		t.Fatal(err)
	}
	if got := setElements(reg.last, nft.SetBound4); !slices.Equal(got, addrs("169.254.20.10")) {
		t.Errorf("bound4 = %v while listening, want the link-local address only", got)
	}
	if len(reg.last.Chains) != 1 || reg.last.Chains[0].Name != nft.ChainRawOutput {
		t.Errorf("rebind while listening programmed %d chains, want raw-output alone", len(reg.last.Chains))
	}
}

// A rebind after leave does not bring our table back: leave's drain table took its place.
func TestRebindAfterLeaveProgramsNothing(t *testing.T) {
	k := newFakeKernel()
	a, reg := newInstance(t, k, "169.254.20.10", "10.96.0.10")
	start(t, a)
	if _, err := a.leave(true, 0); err != nil {
		t.Fatal(err)
	}
	a.setUnbound(addrs("10.96.0.10"))
	if err := a.rebind(); err != nil || len(k.tables) != 0 || reg.name != "" {
		t.Errorf("rebind after leave: %v; tables %v, want none", err, k.tables)
	}
}
