package instance

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	"github.com/nodelocaldns/nodelocaldns/internal/link"
	"github.com/nodelocaldns/nodelocaldns/internal/nft"
)

// fakeKernel is the node's kernel state as the instances share it: owned tables (by name) and one interface.
// Like the kernel, it gives each instance the first free table name and lists every table to everyone.
type fakeKernel struct {
	tables   map[string]*fakeTable
	link     bool
	name     string // the interface's, as the last Ensure named it
	addrs    []netip.Addr
	removed  []string // the names Remove removed, in order
	removals int
	// removeErr is what removing the interface fails with (a kernel that refuses: EPERM, EBUSY); nil succeeds.
	removeErr error
}

type fakeTable struct {
	ips     []netip.Addr
	aside   []netip.Addr // the step-aside sets' elements
	serving bool
	gated   bool
	applies int
	voted   bool // the fallback's set, and what it says
	vote    []netip.AddrPort
}

func newFakeKernel() *fakeKernel { return &fakeKernel{tables: map[string]*fakeTable{}} }

// fakeReg is one instance's socket: it owns at most one table.
type fakeReg struct {
	k          *fakeKernel
	name       string
	refuseGate bool                 // the kernel has no nft_socket
	last       *nft.Ruleset         // the last ruleset applied
	step       func(request string) // nil, or called before each request reaches the kernel (interleave_test.go)
}

func (r *fakeReg) turn(request string) {
	if r.step != nil {
		r.step(request)
	}
}

func (r *fakeReg) Apply(rs *nft.Ruleset) error {
	r.turn("apply")
	if r.name == "" {
		for n := 0; ; n++ {
			if _, taken := r.k.tables[nft.InstanceTableName(n)]; !taken {
				r.name = nft.InstanceTableName(n)
				break
			}
		}
	}
	t := &fakeTable{}
	r.last = rs
	if old := r.k.tables[r.name]; old != nil {
		t.applies = old.applies
	}
	t.applies++
	for _, s := range rs.Sets {
		switch s.Name {
		case nft.SetLocal4, nft.SetLocal6: // as Conn.Instances: only these say what the interface must carry
			t.ips = append(t.ips, s.Elements...)
		case nft.SetBound4, nft.SetBound6: // the listeners' addresses, not the interface's
		case nft.SetFallback4, nft.SetFallback6:
			t.voted = true
			t.vote = append(t.vote, s.Pairs...)
		default:
			t.aside = append(t.aside, s.Elements...)
		}
	}
	for _, c := range rs.Chains {
		t.serving = t.serving || c.Name != nft.ChainRawOutput // as Conn.Instances: the listening chain alone is no serving
		for _, rule := range c.Rules {
			if rule.Gate != nft.GateNone {
				if r.refuseGate {
					return fmt.Errorf("apply: %w", unix.EOPNOTSUPP)
				}
				t.gated = true
			}
		}
	}
	r.k.tables[r.name] = t
	return nil
}

func (r *fakeReg) Teardown() error {
	r.turn("delete table")
	delete(r.k.tables, r.name)
	r.name = ""
	return nil
}

// Leave is Teardown: the drain table is no instance's, and Instances, as the kernel's, does not list it.
func (r *fakeReg) Leave(*nft.Ruleset) error { return r.Teardown() }
func (r *fakeReg) EndDrain() error          { return nil }

func (r *fakeReg) Instances() ([]nft.Instance, error) {
	r.turn("list tables")
	var out []nft.Instance
	for name, t := range r.k.tables {
		out = append(out, nft.Instance{Table: name, IPs: slices.Clone(t.ips), Serving: t.serving, Self: name == r.name, Voted: t.voted, Fallbacks: t.vote})
	}
	slices.SortFunc(out, func(a, b nft.Instance) int { return strings.Compare(a.Table, b.Table) })
	return out, nil
}

func (r *fakeReg) DeleteLegacy() ([]string, error) { r.turn("delete legacy"); return nil, nil }
func (r *fakeReg) Table() string                   { return r.name }

// fakeLinks is the interface: Ensure makes it carry exactly the spec's addresses, as link.Manager does.
type fakeLinks struct {
	k    *fakeKernel
	step func(request string) // as fakeReg.step
}

func (l *fakeLinks) Ensure(s link.Spec) ([]string, error) {
	if l.step != nil {
		l.step(fmt.Sprintf("ensure link %v", s.IPs))
	}
	var changes []string
	if !l.k.link {
		l.k.link, l.k.name = true, s.Name
		changes = append(changes, "create")
	}
	want := slices.Clone(s.IPs)
	slices.SortFunc(want, netip.Addr.Compare)
	if !slices.Equal(want, l.k.addrs) {
		changes = append(changes, fmt.Sprintf("addresses %v -> %v", l.k.addrs, want))
		l.k.addrs = want
	}
	return changes, nil
}

func (l *fakeLinks) Remove(name string) (bool, error) {
	if l.step != nil {
		l.step("remove link")
	}
	if l.k.removeErr != nil {
		return false, fmt.Errorf("delete link %q: %w", name, l.k.removeErr)
	}
	if !l.k.link || name != l.k.name {
		return false, nil // as link.Manager: an absent interface is removed already
	}
	l.k.link, l.k.addrs = false, nil
	l.k.removals++
	l.k.removed = append(l.k.removed, name)
	return true, nil
}

func (l *fakeLinks) Kind() string { return "fake" }

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

func newInstance(t *testing.T, k *fakeKernel, ips ...string) (*Node, *fakeReg) {
	reg := &fakeReg{k: k}
	return &Node{log: zaptest.NewLogger(t), m: testMetrics(t), reg: reg, links: &fakeLinks{k: k}, link: link.Spec{Name: "nodelocaldns"},
		spec: nft.Spec{LocalIPs: addrs(ips...), DNSPort: 53, HealthPort: 8080}}, reg
}

// start runs an instance's start-up as the supervisor does: register, interface, (CoreDNS), listen, serve.
func start(t *testing.T, n *Node) {
	t.Helper()
	startListening(t, n)
	if err := n.Serve(); err != nil {
		t.Fatal(err)
	}
}

// startListening runs start-up up to the listeners being bound: register, interface, listen.
func startListening(t *testing.T, n *Node) {
	t.Helper()
	if err := n.Register(); err != nil {
		t.Fatal(err)
	}
	if _, err := n.ensureLink(); err != nil {
		t.Fatal(err)
	}
	if err := n.Listen(); err != nil {
		t.Fatal(err)
	}
}

// leave runs an instance's leaving sequence, which must not fail, and reports whether others remain.
func leave(t *testing.T, n *Node, keepLink bool) bool {
	t.Helper()
	others, err := n.Leave(keepLink, 0)
	if err != nil {
		t.Fatalf("leave: %v", err)
	}
	return others
}

func TestSurgeThatAddsAnAddressKeepsBoth(t *testing.T) {
	k := newFakeKernel()
	old, _ := newInstance(t, k, "169.254.20.10", "10.96.0.10")
	start(t, old)
	surge, reg := newInstance(t, k, "169.254.20.10", "10.96.0.10", "fd00::a")
	start(t, surge)
	if reg.name != "nodelocaldns-1" {
		t.Errorf("the second instance took table %q", reg.name)
	}
	if want := addrs("169.254.20.10", "10.96.0.10", "fd00::a"); !slices.Equal(k.addrs, want) {
		t.Fatalf("interface carries %v, want %v", k.addrs, want)
	}
	// The old instance's own pass must not remove the address it does not know.
	if _, err := old.ensureLink(); err != nil || !slices.Contains(k.addrs, netip.MustParseAddr("fd00::a")) {
		t.Fatalf("the old instance's pass removed the new address: %v %v", k.addrs, err)
	}
	if !leave(t, old, false) {
		t.Error("the old instance did not see the new one when leaving")
	}
	if want := addrs("169.254.20.10", "10.96.0.10", "fd00::a"); !k.link || !slices.Equal(k.addrs, want) {
		t.Fatalf("after the old instance left: link %v with %v, want %v", k.link, k.addrs, want)
	}
	if leave(t, surge, false) || k.link || k.removals != 1 {
		t.Errorf("the last instance out left link=%v after %d removals", k.link, k.removals)
	}
}

func TestLeavingRemovesOnlyWhatNobodyNeeds(t *testing.T) {
	k := newFakeKernel()
	old, _ := newInstance(t, k, "169.254.20.10", "10.96.0.10", "169.254.20.11")
	start(t, old)
	next, _ := newInstance(t, k, "169.254.20.10", "10.96.0.10")
	start(t, next)
	leave(t, old, false)
	if want := addrs("169.254.20.10", "10.96.0.10"); !slices.Equal(k.addrs, want) {
		t.Errorf("after the old instance left: %v, want %v", k.addrs, want)
	}
}

func TestSkipTeardownKeepsTheInterface(t *testing.T) {
	k := newFakeKernel()
	a, _ := newInstance(t, k, "169.254.20.10")
	start(t, a)
	leave(t, a, true)
	if !k.link || len(k.tables) != 0 {
		t.Errorf("-skipteardown: link %v, %d tables; want the link and no table", k.link, len(k.tables))
	}
}

func TestReadinessWaitsForEveryInstance(t *testing.T) {
	k := newFakeKernel()
	a, _ := newInstance(t, k, "169.254.20.10")
	if err := a.Ready(); err == nil {
		t.Error("ready before registering")
	}
	start(t, a)
	if err := a.Ready(); err != nil {
		t.Fatalf("a serving alone: %v", err)
	}
	b, _ := newInstance(t, k, "169.254.20.10")
	b.Register()
	b.ensureLink()
	if err := a.Ready(); err != nil {
		t.Errorf("a before its next look = %v: /ready answers from the last look, not from the kernel", err)
	}
	a.Addresses() // b's table notification triggers a pass of a's, which looks
	if err := a.Ready(); err == nil || !strings.Contains(err.Error(), "nodelocaldns-1") {
		t.Errorf("a while b is still starting = %v, want not ready naming b's table", err)
	}
	if err := b.Ready(); err == nil {
		t.Error("b ready before it serves")
	}
	b.Serve()
	for name, n := range map[string]*Node{"a": a, "b": b} {
		n.Addresses()
		if err := n.Ready(); err != nil {
			t.Errorf("%s with both serving: %v", name, err)
		}
	}
	leave(t, a, false)
	if err := a.Ready(); err == nil {
		t.Error("a ready while leaving")
	}
}

func TestServeFallsBackWithoutSocketExpression(t *testing.T) {
	k := newFakeKernel()
	a, reg := newInstance(t, k, "169.254.20.10")
	reg.refuseGate = true
	start(t, a)
	if a.gated.Load() || !k.tables[reg.name].serving || k.tables[reg.name].gated {
		t.Errorf("gated=%v table=%+v; want ungated rules in place", a.gated.Load(), k.tables[reg.name])
	}
	b, regB := newInstance(t, k, "169.254.20.10")
	start(t, b)
	if !b.gated.Load() || !k.tables[regB.name].gated {
		t.Error("a kernel with nft_socket got ungated rules")
	}
}

// TestStepAside: what the foreign report finds before serving is in the first programming; a change while
// serving is programmed at once (gate fallback kept), an unchanged one is not, and the interface still carries
// the addresses stepped aside for.
func TestStepAside(t *testing.T) {
	k := newFakeKernel()
	a, reg := newInstance(t, k, "169.254.20.10", "10.96.0.10")
	reg.refuseGate = true
	cluster := addrs("10.96.0.10")
	if err := a.Register(); err != nil {
		t.Fatal(err)
	}
	if err := a.ForeignFound(false, cluster); err != nil {
		t.Fatal(err)
	}
	if got := k.tables[reg.name]; got.applies != 1 || got.aside != nil {
		t.Fatalf("before serving: %+v; want only the registration", got)
	}
	if err := a.Listen(); err != nil {
		t.Fatal(err)
	}
	if err := a.Serve(); err != nil {
		t.Fatal(err)
	}
	if got := k.tables[reg.name]; !slices.Equal(got.aside, cluster) || !slices.Equal(got.ips, addrs("10.96.0.10", "169.254.20.10")) {
		t.Errorf("served: %+v; want aside %v and both addresses in the local sets", got, cluster)
	}
	applies := k.tables[reg.name].applies
	if err := a.ForeignFound(false, cluster); err != nil || k.tables[reg.name].applies != applies {
		t.Errorf("the same findings programmed the table again (%v)", err)
	}
	if err := a.ForeignFound(false, nil); err != nil { // the drop went: take it back
		t.Fatal(err)
	}
	if got := k.tables[reg.name]; got.aside != nil || got.applies != applies+1 || got.gated {
		t.Errorf("taken back: %+v; want no aside set, one more apply, still ungated (the kernel has no nft_socket)", got)
	}
}

// TestStepAsideDuringServe: findings that arrive while serve programs the table are programmed too, on top
// of serve's: serve and the foreign pass read what the table is made of under one lock.
func TestStepAsideDuringServe(t *testing.T) {
	k := newFakeKernel()
	a, reg := newInstance(t, k, "169.254.20.10", "10.96.0.10")
	startListening(t, a)
	cluster := addrs("10.96.0.10")
	done := make(chan error, 1)
	reg.step = func(request string) {
		if request != "apply" {
			return
		}
		go func() { done <- a.ForeignFound(false, cluster) }()
		// Let it finish when it can: it waits for serve's programming when that holds the lock.
		select {
		case err := <-done:
			done <- err
		case <-time.After(200 * time.Millisecond):
		}
		reg.step = nil
	}
	if err := a.Serve(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := k.tables[reg.name]; !slices.Equal(got.aside, cluster) {
		t.Errorf("served: aside %v; want %v, found while serve programmed", got.aside, cluster)
	}
}

func TestTeardownModeKeepsInterfaceOfLiveInstance(t *testing.T) {
	k := newFakeKernel()
	a, _ := newInstance(t, k, "169.254.20.10")
	start(t, a)
	teardown := func() *Node {
		return &Node{log: zaptest.NewLogger(t), m: testMetrics(t), reg: &fakeReg{k: k}, links: &fakeLinks{k: k}, link: link.Spec{Name: "nodelocaldns"}}
	}
	if !leave(t, teardown(), false) || !k.link {
		t.Error("-teardown removed the interface of a live instance")
	}
	a.reg.Leave(nil) // the instance dies: the kernel drops its table
	if leave(t, teardown(), false) || k.link {
		t.Error("-teardown with no live instance left the interface")
	}
}

// The state machine moves only along transitions; any other move is an error and changes nothing.
func TestStateMachineRefusesIllegalTransitions(t *testing.T) {
	// path reaches each state the legal way.
	path := map[state][]state{
		stateNew:         nil,
		stateRegistering: {stateRegistering},
		stateServing:     {stateRegistering, stateServing},
		stateLeaving:     {stateRegistering, stateServing, stateLeaving},
		stateStopped:     {stateRegistering, stateServing, stateLeaving, stateStopped},
	}
	all := []state{stateNew, stateRegistering, stateServing, stateLeaving, stateStopped}
	legal := map[[2]state]bool{
		{stateNew, stateRegistering}: true, {stateNew, stateLeaving}: true,
		{stateRegistering, stateServing}: true, {stateRegistering, stateLeaving}: true,
		{stateServing, stateLeaving}: true,
		{stateLeaving, stateStopped}: true,
	}
	for _, from := range all {
		for _, to := range all {
			n := &Node{log: zaptest.NewLogger(t), m: testMetrics(t)}
			for _, s := range path[from] {
				if err := n.to(s); err != nil {
					t.Fatalf("reaching %s: %v", from, err)
				}
			}
			err := n.to(to)
			switch {
			case legal[[2]state{from, to}] && (err != nil || n.current() != to):
				t.Errorf("%s -> %s: %v, now %s; want allowed", from, to, err, n.current())
			case !legal[[2]state{from, to}] && (!errors.Is(err, errTransition) || n.current() != from):
				t.Errorf("%s -> %s: %v, now %s; want refused, still %s", from, to, err, n.current(), from)
			}
		}
	}
}

// The node's operations refuse to run out of order, before touching the kernel.
func TestNodeRefusesOperationsOutOfOrder(t *testing.T) {
	k := newFakeKernel()
	a, _ := newInstance(t, k, "169.254.20.10")
	if err := a.Serve(); !errors.Is(err, errTransition) || len(k.tables) != 0 {
		t.Fatalf("serve before register = %v with %d tables; want refused, no table", err, len(k.tables))
	}
	if err := a.Listen(); !errors.Is(err, errTransition) || len(k.tables) != 0 {
		t.Fatalf("listen before register = %v with %d tables; want refused, no table", err, len(k.tables))
	}
	start(t, a)
	if err := a.Register(); !errors.Is(err, errTransition) {
		t.Errorf("register while serving = %v, want refused", err)
	}
	if err := a.Listen(); !errors.Is(err, errTransition) {
		t.Errorf("listen while serving = %v, want refused", err)
	}
	leave(t, a, false)
	if _, err := a.Leave(false, 0); !errors.Is(err, errTransition) {
		t.Errorf("leaving twice = %v, want refused", err)
	}
	if err := a.Register(); !errors.Is(err, errTransition) || len(k.tables) != 0 {
		t.Errorf("register after stopping = %v with %d tables; want refused, no table", err, len(k.tables))
	}
}

// A stopping instance whose interface removal fails says so to its caller.
func TestLeaveReturnsWhatItLeft(t *testing.T) {
	k := newFakeKernel()
	a, _ := newInstance(t, k, "169.254.20.10")
	start(t, a)
	k.removeErr = unix.EBUSY
	if others, err := a.Leave(false, 0); others || !errors.Is(err, unix.EBUSY) {
		t.Fatalf("leave = %v, %v; want no others and the removal's error", others, err)
	}
	if len(k.tables) != 0 {
		t.Errorf("%d tables after leaving; the failed removal must not keep our table", len(k.tables))
	}
}
