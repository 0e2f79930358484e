package instance

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
)

// A reload that drops a bind re-applies our table with host-network rules for the bound addresses only, and
// one that binds it again puts them back; the sets that say which addresses we need do not change.
func TestRebindKeepsHostRulesToBoundAddresses(t *testing.T) {
	k := newFakeKernel()
	a, reg := newInstance(t, k, "169.254.20.10", "10.96.0.10")
	start(t, a)
	if !a.SetUnbound(addrs("10.96.0.10")) || a.SetUnbound(addrs("10.96.0.10")) {
		t.Fatal("setUnbound reports no change, or a change twice")
	}
	if err := a.Rebind(); err != nil {
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
	if !a.SetUnbound(nil) {
		t.Fatal("binding again is no change")
	}
	if err := a.Rebind(); err != nil {
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
	a.SetUnbound(addrs("10.96.0.10"))
	if err := a.Rebind(); err != nil {
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
	if _, err := a.Leave(true, 0); err != nil {
		t.Fatal(err)
	}
	a.SetUnbound(addrs("10.96.0.10"))
	if err := a.Rebind(); err != nil || len(k.tables) != 0 || reg.name != "" {
		t.Errorf("rebind after leave: %v; tables %v, want none", err, k.tables)
	}
}
