package nftconn

import (
	"fmt"
	"math/bits"
	"net/netip"
	"slices"

	"github.com/google/nftables"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/nft/nlsock"
)

// hasOwner reads the owner flag in either byte order: google/nftables v0.3.0 decodes NFTA_TABLE_FLAGS without
// setting big endian (see isDormant).
func hasOwner(flags uint32) bool {
	return flags&nlsock.TableFlagOwner != 0 || bits.ReverseBytes32(flags)&nlsock.TableFlagOwner != 0
}

// Instances lists the live instances on the node: every inet table with an instance name and the owner flag.
// A table being created may have no sets yet; it needs no address yet either. Sorted by table name. It reads
// the instance tables only, by name (listing.go): its cost does not grow with the node's other chains.
func (c *Conn) Instances() ([]nft.Instance, error) {
	c.lock()
	defer c.mu.Unlock()
	tables, err := c.rd.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("list inet tables: %w", err)
	}
	var out []nft.Instance
	for _, t := range tables {
		if !nft.IsInstanceTableName(t.Name) || !hasOwner(t.Flags) {
			continue
		}
		serving, err := chainsOf(c.rd, nft.InetTable(t.Name), nft.ServingChains(), true)
		if err != nil {
			return nil, err
		}
		legacy, err := chainsOf(c.rd, nft.InetTable(t.Name), nft.LegacyChains(), true)
		if err != nil {
			return nil, err
		}
		in := nft.Instance{Table: t.Name, Serving: len(serving) > 0, Self: t.Name == c.table, Legacy: len(legacy) > 0}
		sets, err := c.rd.GetSets(nft.InetTable(t.Name))
		if nft.IsNotExist(err) {
			continue // gone while we looked: its owner exited
		}
		if err != nil {
			return nil, fmt.Errorf("list sets of table inet %s: %w", t.Name, err)
		}
		for _, s := range sets {
			if s.Name != nft.SetLocal4 && s.Name != nft.SetLocal6 && s.Name != nft.SetFallback4 && s.Name != nft.SetFallback6 {
				continue
			}
			elems, err := c.rd.GetSetElements(s)
			if nft.IsNotExist(err) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("list elements of set %s of table inet %s: %w", s.Name, t.Name, err)
			}
			if s.Name == nft.SetFallback4 || s.Name == nft.SetFallback6 {
				in.Voted = in.Voted || s.Name == nft.SetFallback4
				for _, e := range elems {
					if p, ok := nft.PairOf(e.Key); ok {
						in.Fallbacks = append(in.Fallbacks, p)
					}
				}
				continue
			}
			for _, e := range elems {
				if ip, ok := netip.AddrFromSlice(e.Key); ok {
					in.IPs = append(in.IPs, ip.Unmap())
				}
			}
		}
		in.IPs = nft.SortedUnique(in.IPs)
		in.Fallbacks = nft.SortedPairs(in.Fallbacks)
		out = append(out, in)
	}
	slices.SortFunc(out, func(a, b nft.Instance) int {
		if a.Table < b.Table {
			return -1
		}
		if a.Table > b.Table {
			return 1
		}
		return 0
	})
	return out, nil
}

// DeleteLegacy deletes the inet tables with an instance name but without the owner flag: what versions before
// owned tables left behind (their notrack rules are not gated and would blackhole the ClusterIP after a
// crash). It returns the names deleted.
func (c *Conn) DeleteLegacy() ([]string, error) {
	c.lock()
	defer c.mu.Unlock()
	tables, err := c.rd.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("list inet tables: %w", err)
	}
	var deleted []string
	for _, t := range tables {
		if !nft.IsInstanceTableName(t.Name) || hasOwner(t.Flags) {
			continue
		}
		c.tx.DelTable(nft.InetTable(t.Name))
		if err := c.tx.Flush(); err != nil && !nft.IsNotExist(err) {
			c.tx.Discard()
			return deleted, fmt.Errorf("delete table inet %s: %w", t.Name, err)
		}
		deleted = append(deleted, t.Name)
	}
	return deleted, nil
}
