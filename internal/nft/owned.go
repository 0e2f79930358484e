package nft

import (
	"fmt"
	"math/bits"
	"net/netip"
	"slices"

	"github.com/google/nftables"

	"github.com/nodelocaldns/nodelocaldns/internal/nft/nlsock"
)

// kernelOps is our owning socket ([nlsock.Socket]) plus the raw NEWTABLE google/nftables cannot send: v0.3.0's
// AddTable always sends NFTA_TABLE_FLAGS 0, and the kernel refuses to change the flags of an owned table
// (EOPNOTSUPP), so the table is created here and never passed to AddTable again.
type kernelOps struct {
	*nlsock.Socket
}

func (k *kernelOps) CreateOwnedTable(name string) error {
	table, err := nlsock.NewTableMsg(name, nlsock.TableFlagOwner)
	if err != nil {
		return err
	}
	return k.SendBatch(table)
}

// Instance is one running nodelocaldns instance as the kernel shows it: an owned table of an instance name.
type Instance struct {
	Table   string
	IPs     []netip.Addr // the addresses it needs on the interface (its sets), sorted
	Serving bool         // it has its chains: it intercepts (or, without interception, says it serves)
	Self    bool         // the table this Conn owns
	// Voted says the table has set fallback4: the instance has a word on the link-local fallback, which is
	// Fallbacks (sets fallback4 and fallback6; empty: it wants none). Legacy says an earlier version's instance
	// owns it (it marks the queries it takes, for a fallback table of its own making).
	Voted, Legacy bool
	Fallbacks     []netip.AddrPort
}

// hasOwner reads the owner flag in either byte order: google/nftables v0.3.0 decodes NFTA_TABLE_FLAGS without
// setting big endian (see isDormant).
func hasOwner(flags uint32) bool {
	return flags&nlsock.TableFlagOwner != 0 || bits.ReverseBytes32(flags)&nlsock.TableFlagOwner != 0
}

// Instances lists the live instances on the node: every inet table with an instance name and the owner flag.
// A table being created may have no sets yet; it needs no address yet either. Sorted by table name. It reads
// the instance tables only, by name (listing.go): its cost does not grow with the node's other chains.
func (c *Conn) Instances() ([]Instance, error) {
	c.lock()
	defer c.mu.Unlock()
	tables, err := c.ops.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("list inet tables: %w", err)
	}
	var out []Instance
	for _, t := range tables {
		if !isInstanceTableName(t.Name) || !hasOwner(t.Flags) {
			continue
		}
		serving, err := c.chainsOf(tableNamed(t.Name), servingChains(), true)
		if err != nil {
			return nil, err
		}
		legacy, err := c.chainsOf(tableNamed(t.Name), legacyChains, true)
		if err != nil {
			return nil, err
		}
		in := Instance{Table: t.Name, Serving: len(serving) > 0, Self: t.Name == c.table, Legacy: len(legacy) > 0}
		sets, err := c.ops.GetSets(tableNamed(t.Name))
		if IsNotExist(err) {
			continue // gone while we looked: its owner exited
		}
		if err != nil {
			return nil, fmt.Errorf("list sets of table inet %s: %w", t.Name, err)
		}
		for _, s := range sets {
			if s.Name != SetLocal4 && s.Name != SetLocal6 && s.Name != SetFallback4 && s.Name != SetFallback6 {
				continue
			}
			elems, err := c.ops.GetSetElements(s)
			if IsNotExist(err) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("list elements of set %s of table inet %s: %w", s.Name, t.Name, err)
			}
			if s.Name == SetFallback4 || s.Name == SetFallback6 {
				in.Voted = in.Voted || s.Name == SetFallback4
				for _, e := range elems {
					if p, ok := pairOf(e.Key); ok {
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
		in.IPs = sortedUnique(in.IPs)
		in.Fallbacks = sortedPairs(in.Fallbacks)
		out = append(out, in)
	}
	slices.SortFunc(out, func(a, b Instance) int {
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
	tables, err := c.ops.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("list inet tables: %w", err)
	}
	var deleted []string
	for _, t := range tables {
		if !isInstanceTableName(t.Name) || hasOwner(t.Flags) {
			continue
		}
		c.ops.DelTable(tableNamed(t.Name))
		if err := c.ops.Flush(); err != nil && !IsNotExist(err) {
			c.ops.Discard()
			return deleted, fmt.Errorf("delete table inet %s: %w", t.Name, err)
		}
		deleted = append(deleted, t.Name)
	}
	return deleted, nil
}
