package nft

import (
	"fmt"
	"time"

	"go.uber.org/zap"
)

// A leaving instance keeps answering the queries it already holds (a miss waits for its upstream) after it
// stops intercepting. Its answers leave from the local addresses, and without our raw-output notrack each
// would make a conntrack entry (local address:53 -> client), which captures the client's next query from the
// same port (as that connection's reply: no DNAT, no fallback) until it expires. So leaving swaps the instance
// table for a drain table in one batch: the instance is gone (the drain table is no instance's, Instances
// does not list it), new queries are no longer taken from kube-proxy and the fallback, and replies from the
// local addresses still skip conntrack. The drain table is owned like the instance table: it goes with our
// socket, or with EndDrain once the answers are written.

// Draining is the drain table for s: the local address sets, and the DNS reply rules of raw-output and
// filter-output only (no query is taken, no instance vote is cast). A query sent from now on is tracked, and
// so is its connection's every packet: only the replies to queries taken before, untracked, skip conntrack.
// nil without interception.
func Draining(s Spec) *Ruleset {
	if s.NoInterception {
		return nil
	}
	return &Ruleset{
		Sets: setPair(SetLocal4, SetLocal6, s.LocalIPs),
		Chains: []Chain[Rule]{
			{Name: ChainRawOutput, Hook: HookOutput, Priority: priorityRaw, Rules: perFamily(
				rule(DirFrom, s.DNSPort, VerdictNotrack, CommentSkipConntrack, purposeReplies, ProtoTCP, ProtoUDP),
			)},
			{Name: ChainFilterOutput, Hook: HookOutput, Priority: priorityFilter, Rules: perFamily(
				rule(DirFrom, s.DNSPort, VerdictAccept, CommentAllowDNS, purposeReplies, ProtoTCP, ProtoUDP),
			)},
		},
	}
}

// Leave deletes our instance table and, in the same batch, fills a drain table with drain (Draining), created
// just before, empty, under [DrainTableName]. Without drain, or when the drain table cannot be made, it is
// [Conn.Teardown]. Without a table it does nothing.
func (c *Conn) Leave(drain *Ruleset) error {
	if drain != nil {
		err := c.swapForDrain(drain)
		if err == nil {
			return nil
		}
		c.log.Warn("no drain table: replies to the queries in flight go through conntrack", zap.Error(err))
	}
	return c.Teardown()
}

func (c *Conn) swapForDrain(drain *Ruleset) error {
	c.lock()
	defer c.mu.Unlock()
	if c.table == "" {
		return nil
	}
	start := time.Now()
	name := DrainTableName(c.table)
	if err := c.ops.CreateOwnedTable(name); err != nil {
		return fmt.Errorf("create table inet %s with flags owner: %w", name, err)
	}
	t := tableNamed(name)
	if _, _, err := c.queueRuleset(t, drain); err != nil {
		c.dropTable(name)
		return err
	}
	c.ops.DelTable(tableNamed(c.table))
	if err := c.ops.Flush(); err != nil {
		c.ops.Discard()
		c.dropTable(name)
		return fmt.Errorf("swap table inet %s for inet %s: %w", c.table, name, err)
	}
	c.log.Info("deleted nftables table; replies to the queries in flight still skip conntrack", zap.String("table", "inet "+c.table),
		zap.String("drain_table", "inet "+name), zap.Duration("elapsed", time.Since(start)))
	c.table, c.drain = "", name
	return nil
}

// EndDrain deletes the drain table, if there is one.
func (c *Conn) EndDrain() error {
	c.lock()
	defer c.mu.Unlock()
	if c.drain == "" {
		return nil
	}
	if err := c.dropTable(c.drain); err != nil {
		return err
	}
	c.log.Info("deleted the drain table", zap.String("table", "inet "+c.drain))
	c.drain = ""
	return nil
}

// dropTable deletes table inet name; one already gone is no error. Called with c.mu held.
func (c *Conn) dropTable(name string) error {
	c.ops.DelTable(tableNamed(name))
	err := c.ops.Flush()
	if err != nil && !IsNotExist(err) {
		c.ops.Discard()
		return fmt.Errorf("delete table inet %s: %w", name, err)
	}
	return nil
}
