package nftconn

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
)

// Leaving swaps the instance table for a drain table in one batch ([nft.Draining] says why and what it holds):
// the drain table is owned like the instance table, so it goes with our socket, or with EndDrain once the
// answers are written.

// Leave deletes our instance table and, in the same batch, fills a drain table with drain (Draining), created
// just before, empty, under [nft.DrainTableName]. Without drain, or when the drain table cannot be made, it is
// [Conn.Teardown]. Without a table it does nothing.
func (c *Conn) Leave(drain *nft.Ruleset) error {
	if drain != nil {
		err := c.swapForDrain(drain)
		if err == nil {
			return nil
		}
		c.log.Warn("no drain table: replies to the queries in flight go through conntrack", zap.Error(err))
	}
	return c.Teardown()
}

func (c *Conn) swapForDrain(drain *nft.Ruleset) error {
	c.lock()
	defer c.mu.Unlock()
	if c.table == "" {
		return nil
	}
	start := time.Now()
	name := nft.DrainTableName(c.table)
	if err := c.sock.CreateOwnedTable(name); err != nil {
		return fmt.Errorf("create table inet %s with flags owner: %w", name, err)
	}
	t := nft.InetTable(name)
	if _, _, err := c.queueRuleset(t, drain); err != nil {
		c.dropTable(name)
		return err
	}
	c.tx.DelTable(nft.InetTable(c.table))
	if err := c.tx.Flush(); err != nil {
		c.tx.Discard()
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
	c.tx.DelTable(nft.InetTable(name))
	err := c.tx.Flush()
	if err != nil && !nft.IsNotExist(err) {
		c.tx.Discard()
		return fmt.Errorf("delete table inet %s: %w", name, err)
	}
	return nil
}
