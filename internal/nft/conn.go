package nft

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"go.uber.org/zap"
)

// nftOps is the part of *nftables.Conn we use: queue messages, send them as one batch, dump objects.
// A kernel-like fake stands in for it in unit tests.
type nftOps interface {
	AddTable(*nftables.Table) *nftables.Table
	DelTable(*nftables.Table)
	AddSet(*nftables.Set, []nftables.SetElement) error
	AddChain(*nftables.Chain) *nftables.Chain
	AddRule(*nftables.Rule) *nftables.Rule
	Flush() error
	ListTablesOfFamily(nftables.TableFamily) ([]*nftables.Table, error)
	ListChains() ([]*nftables.Chain, error)
	GetSets(*nftables.Table) ([]*nftables.Set, error)
	GetSetElements(*nftables.Set) ([]nftables.SetElement, error)
	GetRules(*nftables.Table, *nftables.Chain) ([]*nftables.Rule, error)
	CloseLasting() error
}

// Conn programs and reads our table over one netlink socket. Its methods are safe for concurrent use
// (the reconcile loop and a metrics scrape).
type Conn struct {
	mu     sync.Mutex
	log    *zap.Logger
	dial   func() (nftOps, error)
	ops    nftOps
	portID atomic.Uint32 // netlink port of our socket: the kernel stamps it on the notifications our writes cause
}

// Option configures [Open].
type Option func(*options)

type options struct {
	log   *zap.Logger
	netns int
	dial  func() (nftOps, error)
}

// WithLogger sets the logger; Conn names it "nft". The default discards.
func WithLogger(l *zap.Logger) Option { return func(o *options) { o.log = l } }

// withOps replaces the kernel with a fake (unit tests).
func withOps(ops nftOps) Option {
	return func(o *options) { o.dial = func() (nftOps, error) { return ops, nil } }
}

// Open dials a lasting netlink socket for nftables. It does not touch the ruleset.
func Open(opts ...Option) (*Conn, error) {
	o := options{log: zap.NewNop()}
	for _, opt := range opts {
		opt(&o)
	}
	c := &Conn{log: o.log.Named("nft"), dial: o.dial}
	if c.dial == nil {
		c.dial = func() (nftOps, error) {
			nopts := []nftables.ConnOption{nftables.AsLasting(), nftables.WithSockOptions(func(nc *netlink.Conn) error {
				c.portID.Store(nc.PID())
				return nil
			})}
			if o.netns != 0 {
				nopts = append(nopts, nftables.WithNetNSFd(o.netns))
			}
			return nftables.New(nopts...)
		}
	}
	ops, err := c.dial()
	if err != nil {
		return nil, fmt.Errorf("open nftables netlink socket: %w", err)
	}
	c.ops = ops
	return c, nil
}

// Close closes the socket. The table stays: removing it is [Conn.Teardown]'s job.
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.ops.CloseLasting(); err != nil {
		return fmt.Errorf("close nftables netlink socket: %w", err)
	}
	return nil
}

// PortID is the netlink port id of c's socket; [IgnoreConn] uses it to recognise c's own writes.
func (c *Conn) PortID() uint32 { return c.portID.Load() }

// Apply replaces our table with r in one netlink transaction: add table (so the delete cannot fail), delete
// table, add table, sets and elements, chains, rules, one commit. Packets see the old table or the new one,
// and whatever was in the table before (including foreign rules and duplicates) is gone.
func (c *Conn) Apply(r *Ruleset) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	start := time.Now()
	if ce := c.log.Check(zap.DebugLevel, "applying nftables table"); ce != nil {
		ce.Write(zap.String("ruleset", r.String())) // printed only when someone reads it
	}
	t := nftTable()
	c.ops.AddTable(t)
	c.ops.DelTable(t)
	c.ops.AddTable(t)
	elements := 0
	for _, s := range r.Sets {
		set, elems := nftSet(t, s)
		if err := c.ops.AddSet(set, elems); err != nil {
			// The batch already holds "delete table": never flush a partial one. Start over on a new socket.
			c.redial()
			return fmt.Errorf("queue set %s: %w", s.Name, err)
		}
		elements += len(elems)
	}
	rules := 0
	for _, ch := range r.Chains {
		chain := c.ops.AddChain(nftChain(t, ch))
		for _, rule := range ch.Rules {
			c.ops.AddRule(&nftables.Rule{Table: t, Chain: chain, Exprs: rule.exprs(), UserData: rule.userData()})
			rules++
		}
	}
	if err := c.ops.Flush(); err != nil {
		return fmt.Errorf("apply table inet %s: %w", TableName, err)
	}
	c.log.Info("applied nftables table", zap.String("table", "inet "+TableName), zap.Int("chains", len(r.Chains)),
		zap.Int("rules", rules), zap.Int("elements", elements), zap.Duration("elapsed", time.Since(start)))
	return nil
}

// Teardown deletes our table, and with it every chain, rule and set, in one call. A table that is not
// there is not an error.
func (c *Conn) Teardown() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	start := time.Now()
	c.ops.DelTable(nftTable())
	err := c.ops.Flush()
	switch {
	case IsNotExist(err):
		c.log.Debug("nftables table already absent", zap.String("table", "inet "+TableName))
		return nil
	case err != nil:
		return fmt.Errorf("delete table inet %s: %w", TableName, err)
	}
	c.log.Info("deleted nftables table", zap.String("table", "inet "+TableName), zap.Duration("elapsed", time.Since(start)))
	return nil
}

// redial replaces the socket, dropping whatever the old one had queued. Called with c.mu held.
func (c *Conn) redial() {
	_ = c.ops.CloseLasting()
	ops, err := c.dial()
	if err != nil {
		c.log.Warn("reopen nftables netlink socket", zap.Error(err))
		return
	}
	c.ops = ops
}
