package instance

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/link"
	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
	"github.com/nodelocaldns/nodelocaldns/internal/nft"
)

// The node's kernel state is shared by every instance running on it (a surge rollout runs two), and the kernel
// itself is the rendezvous between them: each instance owns one nftables table (NFT_TABLE_F_OWNER), which the
// kernel removes the moment the instance's netlink socket closes, SIGKILL included, and which no other process
// can change. Its sets say which addresses the instance needs on the shared interface; its chains say it serves.
// No instance waits for, talks to, or trusts another: each decides from what the kernel lists.
//
// One instance's life is one state machine (state.go).
//
// Deleting our table before looking at the others makes the last-out decision safe: of two instances leaving at
// once, at least the one that looks last sees nobody and removes the interface. A leaving instance that takes its
// addresses off looks once more afterwards, so the last look is always after the last change to the interface
// (interleave_test.go drives every order).

// Registry is this instance's owned table and the kernel's list of all instances (nftconn's Conn).
type Registry interface {
	Apply(*nft.Ruleset) error
	// Leave deletes our table, putting the drain table ([nft.Draining]; nil: none) in its place in the same
	// batch; EndDrain deletes that.
	Leave(drain *nft.Ruleset) error
	EndDrain() error
	Instances() ([]nft.Instance, error)
	DeleteLegacy() ([]string, error)
	Table() string
}

// LinkManager is the shared interface ([*link.Manager]).
type LinkManager interface {
	Ensure(link.Spec) ([]string, error)
	Remove(name string) (removed bool, err error)
	Kind() string
}

// Node makes every decision about the kernel state, through Registry and LinkManager.
type Node struct {
	log   *zap.Logger
	m     *metrics.Metrics
	reg   Registry    // nil: the agent touches no kernel state at all
	links LinkManager // nil: -setupinterface=false
	link  link.Spec   // our interface and our addresses (the desired state's Link); it carries the union of every instance's
	// specMu guards what our table is made of (spec, aside, stage) and is held while programming it: the
	// start-up steps, a foreign pass (foreign.go) and a reload's rebind (after listeners.go's check) each program the latest
	// of all three, one after the other.
	specMu sync.Mutex
	spec   nft.Spec // Unbound changes on reloads, Ungated once serve found the kernel without nft_socket
	// aside are the local IPs we step aside for (foreign.go): the reconcile runner sets them, and every
	// programming reads them, the reload goroutine's rebind included.
	aside   []netip.Addr
	stage   tableStage   // what our table holds now (see desired)
	applied *nft.Ruleset // and the table last applied at that stage
	// quiesce, when set, is how the last instance out lets queries already steered to it be answered before
	// the interface goes: it must also make sure nothing of ours listens on the addresses afterwards (the
	// link-local fallback sends queries to kube-dns only while no socket is bound to them). nil: wait drain.
	quiesce func(drain time.Duration)

	state  atomic.Int32
	gated  atomic.Bool
	others atomic.Int32 // live instances seen besides us at the last look
	// notrack is set while a foreign notrack may take our addresses' queries from kube-proxy (foreign.go):
	// then nothing fails open, gated or not.
	notrack atomic.Bool
	// seen is the last look at the instance tables (a pass, a start-up step, a leave): /ready answers from it,
	// never from the kernel, so a probe costs nothing whatever the node holds. Other instances' tables
	// changing trigger a pass (their notifications), which refreshes it.
	seen atomic.Pointer[[]nft.Instance]
}

// Table names our table for logs, "" when we have none.
func (n *Node) Table() string {
	if n.reg == nil {
		return ""
	}
	return "inet " + n.reg.Table()
}

// register creates our table with our sets and no chain: from now on every instance sees which addresses we
// need, and we steer nothing yet.
func (n *Node) Register() error {
	if err := n.to(stateRegistering); err != nil {
		return err
	}
	if err := n.program(tableRegistered); err != nil {
		return fmt.Errorf("register: %w", err)
	}
	if n.reg == nil {
		return nil
	}
	n.log.Info("registered", zap.String("table", "inet "+n.reg.Table()))
	return nil
}

// listen adds raw-output to our table ([nft.Listening]): CoreDNS's listeners are bound, so the node's own
// queries to our addresses skip conntrack, and so the fallback, and come to us from now on instead of going to
// kube-dns.
func (n *Node) Listen() error {
	if s := n.current(); s != stateRegistering {
		return fmt.Errorf("instance %s cannot start listening: %w", s, errTransition)
	}
	if err := n.program(tableListening); err != nil {
		return fmt.Errorf("take host-network queries: %w", err)
	}
	return nil
}

// ensureLink makes the interface carry the union of the addresses every live instance needs (see carry).
func (n *Node) ensureLink() ([]string, error) {
	if n.links == nil {
		return nil, nil
	}
	ips, _, err := n.Addresses()
	if err != nil {
		return nil, err
	}
	return n.Carry(ips)
}

// addresses is the union of the addresses every live instance needs, ours included while we register or
// serve (even if our table were unreadable), and the live instances as the kernel lists them (with ours, as
// our table says it, in those states); it counts the instances.
func (n *Node) Addresses() ([]netip.Addr, []nft.Instance, error) {
	self := nft.Instance{Table: "self", IPs: n.spec.LocalIPs, Self: true, Voted: !n.spec.NoInterception, Fallbacks: n.spec.Fallbacks}
	if n.reg == nil {
		return union(nil, self), []nft.Instance{self}, nil
	}
	ins, err := n.reg.Instances()
	if err != nil {
		return nil, nil, err
	}
	n.count(ins)
	listed := slices.ContainsFunc(ins, func(in nft.Instance) bool { return in.Self })
	if s := n.current(); (s == stateServing || s == stateRegistering) && !listed {
		ins = append(slices.Clone(ins), self)
	}
	return union(ins), ins, nil
}

// carry makes the interface carry ips: ours are added, and an address is removed only when no instance table
// holds it (an older instance whose spec lacks an address a newer one added never removes it).
func (n *Node) Carry(ips []netip.Addr) ([]string, error) {
	if n.links == nil || len(ips) == 0 {
		return nil, nil
	}
	return n.links.Ensure(link.Spec{Name: n.link.Name, IPs: ips})
}

// union is every address the instances need, sorted, each once.
func union(ins []nft.Instance, more ...nft.Instance) []netip.Addr {
	var ips []netip.Addr
	for _, in := range append(slices.Clone(ins), more...) {
		ips = append(ips, in.IPs...)
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	return slices.Compact(ips)
}

func (n *Node) count(ins []nft.Instance) {
	others := 0
	for _, in := range ins {
		if !in.Self {
			others++
		}
	}
	n.others.Store(int32(others))
	n.seen.Store(&ins)
	n.m.Instances.Set(float64(len(ins)))
}

// serve adds our chains. A kernel that refuses the socket expression (nft_socket missing) gets rules gated on
// what the agent knows instead (the addresses its listeners are bound to: [nft.Spec.Ungated]), with one
// warning and nodelocaldns_fail_open{path="prerouting"} 0: a listener gone inside a running process then
// blackholes pods' queries until the table goes with the process (a stopped process blackholes them with the
// gate too: its sockets stay bound; docs/failure-model.md measures both kernels row by row).
func (n *Node) Serve() error {
	if err := n.may(stateServing); err != nil {
		return err
	}
	if n.reg == nil {
		return n.to(stateServing)
	}
	intercepts := !n.spec.NoInterception // never changes
	err := n.program(tableServing)
	gated := err == nil && intercepts
	if err != nil && intercepts && (nft.IsNotSupported(err) || nft.IsNotExist(err)) {
		// While this process runs without a listener it does not know of (one failed inside it), pods' queries to
		// that address are lost instead of going to kube-dns: the cost the preflight names for this kernel.
		n.log.Warn("kernel refused the socket expression", zap.String("module", "nft_socket"),
			zap.String("gate", "bound addresses"), zap.Error(err))
		n.specMu.Lock()
		n.spec.Ungated = true // desired.Of's for Facts.NoSocket; kept whenever the table is programmed again
		n.specMu.Unlock()
		err = n.program(tableServing)
	}
	if err != nil {
		return fmt.Errorf("program table: %w", err)
	}
	n.gated.Store(gated)
	n.reportFailOpen()
	return n.to(stateServing)
}

// reportFailOpen says whether pods' queries fail open: gated, and no foreign notrack in the way.
func (n *Node) reportFailOpen() {
	n.m.FailOpen.WithLabelValues("prerouting").Set(b2f(n.gated.Load() && !n.notrack.Load()))
	n.m.FailOpen.WithLabelValues("output").Set(0) // host-network clients fail open only when the table goes
}

// ForeignFound takes what a look at the other tables found: a foreign notrack (fail_open says so) and the
// local IPs to step aside for. A change of those is programmed at once, at the stage our table is at (a table
// without chains yet, or without interception, does not change).
func (n *Node) ForeignFound(notrack bool, aside []netip.Addr) error {
	if n.notrack.Swap(notrack) != notrack && n.current() == stateServing {
		n.reportFailOpen()
	}
	n.specMu.Lock()
	same := slices.Equal(n.aside, aside)
	n.aside = aside
	n.specMu.Unlock()
	if same {
		return nil
	}
	if err := n.program(tableAsIs); err != nil {
		return fmt.Errorf("program table stepping aside for %v: %w", aside, err)
	}
	return nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// ready says whether this instance serves and every live instance on the node does: whichever pod answers
// the shared health address, no pod is reported Ready while any instance is still starting. It reads the last
// look (seen), not the kernel; our own state is ours to know, whatever that look said of our table.
func (n *Node) Ready() error {
	if s := n.current(); s != stateServing {
		return fmt.Errorf("instance %s", s)
	}
	if n.reg == nil {
		return nil
	}
	seen := n.seen.Load()
	if seen == nil {
		return errors.New("no look at the instance tables yet")
	}
	var starting []string
	self := false
	for _, in := range *seen {
		self = self || in.Self
		if !in.Self && !in.Serving {
			starting = append(starting, in.Table)
		}
	}
	switch {
	case !self:
		return errors.New("our table is missing")
	case len(starting) > 0:
		return fmt.Errorf("instance tables still starting: %s", strings.Join(starting, ", "))
	}
	return nil
}

// leave is the one way out, for SIGTERM, SIGINT, SIGHUP and SIGQUIT alike, and for `-teardown` (a node with
// no table of its own). It reports whether other instances remain (the caller then hands its DNS listeners
// over to them before stopping CoreDNS). A step that fails does not stop the ones after it; err names what
// each failure left behind. An instance leaves once: leaving again is an error.
func (n *Node) Leave(keepLink bool, drain time.Duration) (othersRemain bool, err error) {
	if err := n.to(stateLeaving); err != nil {
		return false, err
	}
	defer n.to(stateStopped) // always allowed from leaving
	if n.reg == nil {
		return false, nil
	}
	t := time.Now()
	var errs []error
	// The drain table keeps our answers to the queries we hold out of conntrack (nft/drain.go) until shutdown
	// has written them (endDrain).
	if err := n.reg.Leave(n.drain()); err != nil {
		// Our socket closing at exit removes it anyway.
		errs = append(errs, fmt.Errorf("our table stays until the process exits: %w", err))
	}
	if err := n.DeleteLegacy(); err != nil {
		errs = append(errs, err)
	}
	// Our addresses come off only after a look that saw others, and the interface is left to them only after a
	// look that came after that change: an instance that removed the interface while we changed it (and our
	// change made it again) was gone before that second look, so we then find ourselves the last out.
	shrunk := false
	for {
		ins, err := n.reg.Instances()
		if err != nil {
			// Not knowing, keep the interface: a leftover interface only costs ICMP unreachables, a removed
			// one the other instance's DNS.
			errs = append(errs, fmt.Errorf("interface %q kept, not knowing whether another instance needs it: list instance tables: %w", n.link.Name, err))
			return true, errors.Join(errs...)
		}
		n.count(ins)
		if len(ins) == 0 {
			break
		}
		if shrunk {
			n.log.Info("other instances remain; leaving the interface to them", zap.Int("instances", len(ins)),
				zap.Duration("elapsed", time.Since(t)))
			return true, errors.Join(errs...)
		}
		changes, err := n.ensureLink()
		if err != nil {
			errs = append(errs, fmt.Errorf("our addresses may stay on interface %q: %w", n.link.Name, err))
		}
		n.log.Info("other instances remain; removed the addresses only we needed", zap.Strings("changes", changes))
		shrunk = true
	}
	switch {
	case keepLink || n.links == nil:
		n.log.Info("last instance out; leaving the interface in place", zap.Bool("skipteardown", keepLink))
		return false, errors.Join(errs...)
	}
	// Queries already steered to us are answered from the addresses they were sent to: give them a moment.
	if n.quiesce != nil {
		n.quiesce(drain)
	} else {
		time.Sleep(drain)
	}
	if ins, err := n.reg.Instances(); err == nil && len(ins) > 0 {
		n.log.Info("an instance registered while we drained; leaving the interface to it")
		return true, errors.Join(errs...)
	}
	removed, err := n.links.Remove(n.link.Name)
	if errors.Is(err, link.ErrNotOurs) {
		// node-cache's own interface (a rollback), or one an earlier version made: not ours to remove.
		n.log.Info("last instance out; left the interface in place: we did not create it", zap.String("interface", n.link.Name), zap.Error(err))
		return false, errors.Join(errs...)
	} else if err != nil {
		errs = append(errs, fmt.Errorf("interface %q left in place: %w", n.link.Name, err))
		return false, errors.Join(errs...)
	}
	if !removed {
		n.log.Info("last instance out; no interface to remove", zap.String("interface", n.link.Name))
		return false, errors.Join(errs...)
	}
	n.log.Info("last instance out; removed the interface", zap.String("interface", n.link.Name), zap.Duration("elapsed", time.Since(t)))
	return false, errors.Join(errs...)
}

// endDrain deletes the drain table leave put in place: the answers we held are written (or abandoned).
func (n *Node) EndDrain() {
	if n.reg == nil {
		return
	}
	if err := n.reg.EndDrain(); err != nil {
		n.log.Warn("delete the drain table; it goes when the process exits", zap.Error(err))
	}
}

// deleteLegacy deletes the tables an earlier version left (unowned, their notrack not gated): one would
// blackhole the ClusterIP whenever we do not serve. An earlier version still running re-creates its own; it
// goes for good when that instance stops or when we leave.
func (n *Node) DeleteLegacy() error {
	if n.reg == nil {
		return nil
	}
	legacy, err := n.reg.DeleteLegacy()
	if err != nil {
		return fmt.Errorf("tables left by earlier versions stay: %w", err)
	}
	if len(legacy) > 0 {
		n.log.Info("deleted tables left by earlier versions", zap.Strings("tables", legacy))
	}
	return nil
}
