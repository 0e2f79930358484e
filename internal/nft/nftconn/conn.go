package nftconn

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/nftables"
	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/nft/nlsock"
)

// Conn is one instance's netlink socket for nftables, and the table it owns. The socket is opened once and
// closed only by [Conn.Close]: the kernel removes the owned table the moment it closes, whether we close it,
// exit, or are SIGKILLed, and nobody else (root included) can change or delete the table meanwhile. Methods are
// safe for concurrent use (the supervisor and a metrics scrape).
type Conn struct {
	mu     sync.Mutex
	log    *zap.Logger
	tx     txOps
	rd     readOps
	sock   sockOps
	table  string        // the owned table's name; "" until the first Apply
	drain  string        // the drain table's name while the instance drains (drain.go); ""
	portID atomic.Uint32 // netlink port of our socket: the kernel stamps it on the notifications our writes cause
}

// Option configures [Open].
type Option func(*options)

type options struct {
	log *zap.Logger
	ops nftOps
}

// WithLogger sets the logger; Conn names it "nft". The default discards.
func WithLogger(l *zap.Logger) Option { return func(o *options) { o.log = l } }

// withOps replaces the kernel with a fake (unit tests).
func withOps(ops nftOps) Option { return func(o *options) { o.ops = ops } }

// Open dials the lasting netlink socket. It does not touch the ruleset.
func Open(opts ...Option) (*Conn, error) {
	o := options{log: zap.NewNop()}
	for _, opt := range opts {
		opt(&o)
	}
	ops := o.ops
	c := &Conn{log: o.log.Named("nft")}
	if ops == nil {
		sock, err := nlsock.Open()
		if err != nil {
			return nil, err
		}
		c.portID.Store(sock.PortID())
		ops = &kernelOps{sock}
	}
	c.tx, c.rd, c.sock = ops, ops, ops
	return c, nil
}

// lock takes c.mu and sets the deadline for the requests made while holding it.
func (c *Conn) lock() {
	c.mu.Lock()
	if err := c.sock.SetDeadline(time.Now().Add(RequestTimeout)); err != nil {
		c.log.Debug("set netlink deadline", zap.Error(err))
	}
}

// Close closes the socket, and with it the kernel removes our table.
func (c *Conn) Close() error {
	c.lock()
	defer c.mu.Unlock()
	c.table = ""
	if err := c.sock.CloseLasting(); err != nil {
		return fmt.Errorf("close nftables netlink socket: %w", err)
	}
	return nil
}

// PortID is the netlink port id of c's socket; nftwatch.IgnoreConn uses it to recognise c's own writes.
func (c *Conn) PortID() uint32 { return c.portID.Load() }

// Table is the name of the table c owns, "" before the first [Conn.Apply].
func (c *Conn) Table() string {
	c.lock()
	defer c.mu.Unlock()
	return c.table
}

// Apply makes our owned table hold exactly r. The first call creates the table (the first free instance name)
// on c's socket; every call then replaces the contents in one netlink transaction: flush and delete the chains
// and sets there are, add r's sets with their elements, chains and rules, one commit. Packets see the old
// contents or the new, and a failed batch changes nothing. The table itself is never re-created: an owned
// table can only be replaced by closing the socket, which would leave a gap.
func (c *Conn) Apply(r *nft.Ruleset) error {
	c.lock()
	defer c.mu.Unlock()
	start := time.Now()
	if c.table == "" {
		if err := c.create(); err != nil {
			return err
		}
	}
	if ce := c.log.Check(zap.DebugLevel, "applying nftables table"); ce != nil {
		ce.Write(zap.String("ruleset", r.Text(c.table))) // printed only when someone reads it
	}
	t := nft.InetTable(c.table)
	if err := c.queueClear(t); err != nil {
		return err
	}
	elements, rules, err := c.queueRuleset(t, r)
	if err != nil {
		return err
	}
	if err := c.tx.Flush(); err != nil {
		c.tx.Discard()
		return fmt.Errorf("apply table inet %s: %w", c.table, err)
	}
	c.log.Info("applied nftables table", zap.String("table", "inet "+c.table), zap.Int("chains", len(r.Chains)),
		zap.Int("rules", rules), zap.Int("elements", elements), zap.Duration("elapsed", time.Since(start)))
	return nil
}

// queueRuleset queues r's sets, chains and rules into t, and counts the elements and rules. On a marshalling
// error nothing is sent. Called with c.mu held.
func (c *Conn) queueRuleset(t *nftables.Table, r *nft.Ruleset) (elements, rules int, err error) {
	for _, s := range r.Sets {
		set, elems := s.Encode(t)
		if err := c.tx.AddSet(set, elems); err != nil {
			// A marshalling error, before anything was sent: send what is queued so far only if it cannot
			// remove anything. It can (a clear, a table's delete), so drop the batch by failing it on purpose.
			c.abort(t)
			return 0, 0, fmt.Errorf("queue set %s: %w", s.Name, err)
		}
		elements += len(elems)
	}
	for _, ch := range r.Chains {
		rules += addChain(c.tx, t, ch)
	}
	return elements, rules, nil
}

// create takes the first free instance name with an owned table. Two instances starting at once may race for
// a name; the loser's create fails with EEXIST and it tries the next. Called with c.mu held.
func (c *Conn) create() error {
	tables, err := c.rd.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return fmt.Errorf("list inet tables: %w", err)
	}
	taken := map[string]bool{}
	for _, t := range tables {
		taken[t.Name] = true
	}
	for n := range nft.MaxInstances {
		name := nft.InstanceTableName(n)
		if taken[name] {
			continue
		}
		err := c.sock.CreateOwnedTable(name)
		switch {
		case err == nil:
			c.table = name
			c.log.Info("created owned nftables table", zap.String("table", "inet "+name))
			return nil
		case nft.IsExist(err):
			continue
		case nft.IsOwnerFlagRefused(err):
			return fmt.Errorf("create table inet %s with flags owner: %w (%s)", name, err, nft.ErrNoOwnerFlag)
		default:
			return fmt.Errorf("create table inet %s with flags owner: %w", name, err)
		}
	}
	return fmt.Errorf("no free instance table name among %s..%s", nft.InstanceTableName(0), nft.InstanceTableName(nft.MaxInstances-1))
}

// queueClear queues the removal of everything in our table. Called with c.mu held.
func (c *Conn) queueClear(t *nftables.Table) error {
	chains, err := chainsOf(c.rd, t, nft.InstanceChains(), false) // by name: never a dump of the node's chains (listing.go)
	if err != nil {
		return err
	}
	for _, name := range chains {
		ch := &nftables.Chain{Name: name, Table: t}
		c.tx.FlushChain(ch)
		c.tx.DelChain(ch)
	}
	sets, err := c.rd.GetSets(t)
	if err != nil {
		return fmt.Errorf("list sets of table inet %s: %w", t.Name, err)
	}
	for _, s := range sets {
		c.tx.DelSet(&nftables.Set{Table: t, Name: s.Name})
	}
	return nil
}

// abort empties the library's queue without committing it: a batch that deletes a chain twice fails as a
// whole in the kernel. Called with c.mu held.
func (c *Conn) abort(t *nftables.Table) {
	bogus := &nftables.Chain{Name: "nodelocaldns-abort", Table: t}
	c.tx.DelChain(bogus)
	_ = c.tx.Flush()
	c.tx.Discard()
}

// Teardown deletes our table, and with it every chain, rule and set, in one call, over the owning socket. The
// socket stays open; a later Apply creates a new table. Without a table it does nothing.
func (c *Conn) Teardown() error {
	c.lock()
	defer c.mu.Unlock()
	if c.table == "" {
		return nil
	}
	start := time.Now()
	c.tx.DelTable(nft.InetTable(c.table))
	err := c.tx.Flush()
	switch {
	case nft.IsNotExist(err):
		c.log.Debug("nftables table already absent", zap.String("table", "inet "+c.table))
	case err != nil:
		c.tx.Discard()
		return fmt.Errorf("delete table inet %s: %w", c.table, err)
	default:
		c.log.Info("deleted nftables table", zap.String("table", "inet "+c.table), zap.Duration("elapsed", time.Since(start)))
	}
	c.table = ""
	return nil
}
