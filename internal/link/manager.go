package link

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// requestTimeout bounds each netlink request of the Manager.
const requestTimeout = 5 * time.Second

// Manager creates, repairs and removes our interface. Its methods are safe for concurrent use; each
// reads the kernel afresh, so a Manager carries no state between calls beyond the link kind it chose at start.
type Manager struct {
	log  *zap.Logger
	ops  linkOps
	kind string
	mu   sync.Mutex
}

// Option configures [New].
type Option func(*config)

type config struct {
	ops     linkOps
	noDummy bool
}

// withoutDummy makes [New] behave as on a kernel without the dummy kind, so the ifb fallback can be exercised
// on any kernel.
func withoutDummy() Option { return func(c *config) { c.noDummy = true } }

// withOps replaces the netlink handle (unit tests pass a fake).
func withOps(ops linkOps) Option { return func(c *config) { c.ops = ops } }

// New opens a netlink handle in the current network namespace and tries which link kind to use (see
// [chooseKind]); it fails when the kernel supports neither dummy nor ifb.
func New(log *zap.Logger, opts ...Option) (*Manager, error) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	log = log.Named("link")
	if c.ops == nil {
		h, err := openHandle()
		if err != nil {
			return nil, err
		}
		c.ops = h
	}
	kind, why, err := chooseKind(c.ops, !c.noDummy)
	if err != nil {
		c.ops.Close()
		return nil, err
	}
	if why != "" {
		log.Warn("using ifb links instead of dummy", zap.String("reason", why))
	}
	return &Manager{log: log, ops: c.ops, kind: kind}, nil
}

// openHandle opens a route netlink handle whose every request has a deadline (requestTimeout).
func openHandle() (*netlink.Handle, error) {
	// Route only: with no argument NewHandle also opens XFRM and netfilter sockets, and fails on a kernel
	// without xfrm_user loaded ("protocol not supported"), as in the kernel-matrix VM.
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("open netlink handle: %w", err)
	}
	// Every request gets an answer in milliseconds; one that gets none for this long fails instead of
	// hanging the reconcile loop (SO_RCVTIMEO/SO_SNDTIMEO on the handle's socket).
	if err := h.SetSocketTimeout(requestTimeout); err != nil {
		h.Close()
		return nil, fmt.Errorf("set netlink socket timeout: %w", err)
	}
	return h, nil
}

// Close releases the netlink handle. It does not remove the interface: see [Manager.Remove].
func (m *Manager) Close() { m.ops.Close() }

// Kind returns the link kind the Manager creates: [KindDummy], or [KindIfb] where the kernel has no dummy kind.
func (m *Manager) Kind() string { return m.kind }

// Ensure makes the kernel match s and returns what it changed, in order; nothing when it was already right.
// On error it returns the changes made before the failing step.
func (m *Manager) Ensure(s Spec) ([]string, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	start := time.Now()
	l, o, err := m.observe(s.Name)
	if err != nil {
		return nil, err
	}
	p, err := diff(s, o)
	if err != nil {
		return nil, err
	}
	steps := p.describe(s.Name, m.kind)
	done, err := m.apply(s.Name, l, p)
	if done > 0 {
		m.log.Info("link repaired", zap.String("link", s.Name), zap.Strings("changes", steps[:done]),
			zap.Duration("elapsed", time.Since(start)))
	}
	return steps[:done], err
}

// apply runs p step by step and returns how many steps succeeded.
func (m *Manager) apply(name string, l netlink.Link, p plan) (int, error) {
	done := 0
	if p.create {
		var err error
		if l, err = m.create(name); err != nil {
			return done, err
		}
		done++
	}
	if p.setUp {
		if err := m.ops.LinkSetUp(l); err != nil {
			return done, fmt.Errorf("set link %q up: %w", name, err)
		}
		done++
	}
	for _, a := range p.add {
		if err := m.ops.AddrReplace(l, toAddr(a)); err != nil {
			return done, fmt.Errorf("add address %s to link %q: %w", a, name, err)
		}
		done++
	}
	for _, a := range p.del {
		if err := m.ops.AddrDel(l, toAddr(a)); err != nil && !isAddrGone(err) {
			return done, fmt.Errorf("remove address %s from link %q: %w", a, name, err)
		}
		done++
	}
	return done, nil
}

// create adds the link, marks it ours ([OwnerAlias]: the kernel takes no alias in the message that creates
// a link), and returns the kernel's view of it (with its index). EEXIST means another writer created it
// between our lookup and now: we adopt it, unmarked, and let the next pass judge it.
func (m *Manager) create(name string) (netlink.Link, error) {
	err := m.ops.LinkAdd(newLink(m.kind, name))
	if err != nil && !isExist(err) {
		return nil, fmt.Errorf("create %s link %q: %w", m.kind, name, err)
	}
	l, lerr := m.ops.LinkByName(name)
	if lerr != nil {
		return nil, fmt.Errorf("look up link %q after creating it: %w", name, lerr)
	}
	if err == nil {
		if err := m.ops.LinkSetAlias(l, OwnerAlias); err != nil {
			return nil, fmt.Errorf("mark link %q ours (alias %q): %w", name, OwnerAlias, err)
		}
	}
	return l, nil
}

// Remove deletes the link named name if we created it, and says whether there was one to delete. A link that is
// already gone is not an error (removed is false); one we did not create (a foreign kind, or without
// [OwnerAlias]: node-cache's, after a rollback) is left alone, and the error says so ([ErrNotOurs]).
func (m *Manager) Remove(name string) (removed bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, err := m.ops.LinkByName(name)
	if isNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up link %q: %w", name, err)
	}
	if k := l.Type(); k != KindDummy && k != KindIfb {
		return false, fmt.Errorf("remove link %q: it is of kind %q: %w", name, k, ErrNotOurs)
	}
	if a := l.Attrs().Alias; a != OwnerAlias {
		return false, fmt.Errorf("remove link %q: its alias is %q, not %q: %w", name, a, OwnerAlias, ErrNotOurs)
	}
	if err := m.ops.LinkDel(l); isNotFound(err) {
		return false, nil // gone between the look-up and the delete: another instance removed it
	} else if err != nil {
		return false, fmt.Errorf("remove link %q: %w", name, err)
	}
	m.log.Info("link removed", zap.String("link", name))
	return true, nil
}

// observe reads the link named name and its addresses. A missing link is not an error: observed.exists says so.
func (m *Manager) observe(name string) (netlink.Link, observed, error) {
	l, err := m.ops.LinkByName(name)
	if isNotFound(err) {
		return nil, observed{}, nil
	}
	if err != nil {
		return nil, observed{}, fmt.Errorf("look up link %q: %w", name, err)
	}
	o := observed{exists: true, kind: l.Type(), up: l.Attrs().Flags&net.FlagUp != 0}
	addrs, err := m.listAddrs(l)
	if err != nil {
		return nil, observed{}, fmt.Errorf("list addresses of link %q: %w", name, err)
	}
	for _, a := range addrs {
		p, err := fromAddr(a)
		if err != nil {
			return nil, observed{}, fmt.Errorf("read address of link %q: %w", name, err)
		}
		o.addrs = append(o.addrs, p)
	}
	return l, o, nil
}

// listAddrs retries a dump the kernel marked as interrupted (NLM_F_DUMP_INTR: addresses changed while it was
// being read), whose result may be incomplete.
func (m *Manager) listAddrs(l netlink.Link) ([]netlink.Addr, error) {
	const attempts = 5
	var err error
	for range attempts {
		var addrs []netlink.Addr
		addrs, err = m.ops.AddrList(l, netlink.FAMILY_ALL)
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return addrs, err
		}
	}
	return nil, err
}
