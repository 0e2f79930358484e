package supervisor

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodelocaldns/nodelocaldns/internal/instance"
	"github.com/nodelocaldns/nodelocaldns/internal/link"
	"github.com/nodelocaldns/nodelocaldns/internal/nft"
)

// fakeKernel is the node's instance tables (the addresses each needs, by name) and one interface, as the
// kernel gives them to the instances (internal/instance's node_test.go has the full model; this one is what
// desired_test.go needs: a table per socket, the gate refused or not, one interface).
type fakeKernel struct {
	tables  map[string][]netip.Addr
	link    bool
	name    string // the interface's, as the last Ensure named it
	addrs   []netip.Addr
	removed []string // the names Remove removed, in order
	// removeErr is what removing the interface fails with (a kernel that refuses: EPERM, EBUSY); nil succeeds.
	removeErr error
}

func newFakeKernel() *fakeKernel { return &fakeKernel{tables: map[string][]netip.Addr{}} }

// fakeReg is one instance's socket: it owns at most one table.
type fakeReg struct {
	k          *fakeKernel
	name       string
	refuseGate bool         // the kernel has no nft_socket
	last       *nft.Ruleset // the last ruleset applied
}

func (r *fakeReg) Apply(rs *nft.Ruleset) error {
	for _, c := range rs.Chains {
		for _, rule := range c.Rules {
			if rule.Gate != nft.GateNone && r.refuseGate {
				return fmt.Errorf("apply: %w", unix.EOPNOTSUPP)
			}
		}
	}
	for n := 0; r.name == ""; n++ {
		if _, taken := r.k.tables[nft.InstanceTableName(n)]; !taken {
			r.name = nft.InstanceTableName(n)
		}
	}
	var ips []netip.Addr
	for _, s := range rs.Sets {
		if s.Name == nft.SetLocal4 || s.Name == nft.SetLocal6 {
			ips = append(ips, s.Elements...)
		}
	}
	r.k.tables[r.name], r.last = ips, rs
	return nil
}

func (r *fakeReg) Leave(*nft.Ruleset) error {
	delete(r.k.tables, r.name)
	r.name = ""
	return nil
}

func (r *fakeReg) EndDrain() error                 { return nil }
func (r *fakeReg) DeleteLegacy() ([]string, error) { return nil, nil }
func (r *fakeReg) Table() string                   { return r.name }

func (r *fakeReg) Instances() ([]nft.Instance, error) {
	var out []nft.Instance
	for name, ips := range r.k.tables {
		out = append(out, nft.Instance{Table: name, IPs: slices.Clone(ips), Serving: true, Self: name == r.name})
	}
	slices.SortFunc(out, func(a, b nft.Instance) int { return strings.Compare(a.Table, b.Table) })
	return out, nil
}

// fakeLinks is the interface: Ensure makes it carry exactly the spec's addresses, as link.Manager does.
type fakeLinks struct{ k *fakeKernel }

func (l *fakeLinks) Ensure(s link.Spec) ([]string, error) {
	l.k.link, l.k.name = true, s.Name
	l.k.addrs = slices.Clone(s.IPs)
	slices.SortFunc(l.k.addrs, netip.Addr.Compare)
	return nil, nil
}

func (l *fakeLinks) Remove(name string) (bool, error) {
	if l.k.removeErr != nil {
		return false, fmt.Errorf("delete link %q: %w", name, l.k.removeErr)
	}
	if !l.k.link || name != l.k.name {
		return false, nil
	}
	l.k.link, l.k.addrs = false, nil
	l.k.removed = append(l.k.removed, name)
	return true, nil
}

func (l *fakeLinks) Kind() string { return "fake" }

var (
	_ instance.Registry    = (*fakeReg)(nil)
	_ instance.LinkManager = (*fakeLinks)(nil)
)

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// start runs an instance's start-up as the supervisor does: register, interface, listen, serve.
func start(t *testing.T, n *instance.Node) {
	t.Helper()
	if err := n.Register(); err != nil {
		t.Fatal(err)
	}
	ips, _, err := n.Addresses()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Carry(ips); err != nil {
		t.Fatal(err)
	}
	if err := n.Listen(); err != nil {
		t.Fatal(err)
	}
	if err := n.Serve(); err != nil {
		t.Fatal(err)
	}
}
