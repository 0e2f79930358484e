package nft

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/google/nftables"
	"go.uber.org/zap"
)

// FallbackTable writes the link-local fallback's table, inet [FallbackTableName], and nothing else. It writes
// through c's owning socket, under its lock, for one reason: the notifications' reader recognises our own
// writes by that socket's port (nftwatch.IgnoreConn; in a container the pid cannot say it), so renewing the
// lease on every pass triggers no pass. The table itself is not owned: it outlives the socket, by design.
type FallbackTable struct{ c *Conn }

// Fallback is c's writer of the fallback table.
func (c *Conn) Fallback() FallbackTable { return FallbackTable{c} }

// Apply makes table inet [FallbackTableName] hold exactly f, in one transaction whatever is there:
// add the table (a no-op when it exists), delete it, add it again with f's set, chains and rules. Packets see
// the old table or the new one, never none, and every covered pair starts a new lease. The table is not
// owned: it stays when c's socket closes.
func (ft FallbackTable) Apply(f *Fallback) error {
	c := ft.c
	c.lock()
	defer c.mu.Unlock()
	start := time.Now()
	if ce := c.log.Check(zap.DebugLevel, "applying nftables fallback table"); ce != nil {
		ce.Write(zap.String("ruleset", f.String()))
	}
	t := tableNamed(FallbackTableName)
	c.ops.AddTable(t)
	c.ops.DelTable(t)
	c.ops.AddTable(t)
	for _, s := range f.Sets {
		set, elems := nftSet(t, s)
		if err := c.ops.AddSet(set, elems); err != nil {
			c.ops.DelTable(t) // a marshalling error: nothing sent yet, and this batch must not apply half a table
			c.ops.Discard()
			return fmt.Errorf("queue set %s: %w", s.Name, err)
		}
	}
	rules := 0
	for _, fc := range f.Chains {
		rules += addChain(c.ops, t, fc)
	}
	if err := c.ops.Flush(); err != nil {
		c.ops.Discard()
		return fmt.Errorf("apply table inet %s: %w", FallbackTableName, err)
	}
	c.log.Info("applied nftables fallback table", zap.String("table", "inet "+FallbackTableName),
		zap.Int("chains", len(f.Chains)), zap.Int("rules", rules), zap.Duration("elapsed", time.Since(start)))
	return nil
}

// InSync reports whether the kernel's table inet [FallbackTableName] holds exactly f: the same pairs
// (whatever their timeouts and what is left of them: instances of other -fallback-lease values must not fight,
// and [FallbackTable.Lease] says when to renew), the same chains (type, hook, priority) and, chain by chain, the
// same rules expression by expression (counter values and handles aside).
// It asks for that set and those chains only, whatever else the node holds.
func (ft FallbackTable) InSync(f *Fallback) (bool, error) {
	c := ft.c
	c.lock()
	defer c.mu.Unlock()
	t := tableNamed(FallbackTableName)
	if ok, err := c.holdsCoveredSets(t, f); !ok || err != nil {
		return false, err
	}
	for _, fc := range f.Chains {
		have, err := c.ops.ListChain(t, fc.Name)
		if IsNotExist(err) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("get chain %s %s: %w", FallbackTableName, fc.Name, err)
		}
		if !sameBaseChain(have, nftChain(t, fc)) {
			return false, nil
		}
		rules, err := c.ops.GetRules(t, have)
		if IsNotExist(err) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("list rules of chain %s %s: %w", FallbackTableName, fc.Name, err)
		}
		if len(rules) != len(fc.Rules) {
			return false, nil
		}
		for j, r := range rules {
			if exprsKey(r.Exprs) != exprsKey(fc.Rules[j].exprs()) {
				return false, nil
			}
		}
	}
	return true, nil
}

// coveredSets are the fallback table's sets as the read-back names them, without their elements.
var coveredSets = []Set{{Name: SetCovered4, Concat: true}, {Name: SetCovered6, Concat: true, IPv6: true}}

// setHolds reports whether set want in table t holds exactly want's pairs (present), or is not there (not
// present). Called with c.mu held.
func (c *Conn) setHolds(t *nftables.Table, want Set, present bool) (bool, error) {
	set, _ := nftSet(t, want)
	elems, err := c.ops.GetSetElements(set)
	if IsNotExist(err) {
		return !present, nil
	}
	if err != nil {
		return false, fmt.Errorf("list elements of set %s %s: %w", FallbackTableName, want.Name, err)
	}
	if !present {
		return false, nil
	}
	var have []netip.AddrPort
	for _, e := range elems {
		p, ok := pairOf(e.Key)
		if !ok {
			return false, nil
		}
		have = append(have, p)
	}
	return slices.Equal(sortedPairs(have), want.Pairs), nil
}

// Lease reports the least time left on the lease of table inet [FallbackTableName]'s covered pairs
// (the first to expire), and whether it has any.
func (ft FallbackTable) Lease() (time.Duration, bool, error) {
	c := ft.c
	c.lock()
	defer c.mu.Unlock()
	var least time.Duration
	found := false
	for _, s := range coveredSets {
		set, _ := nftSet(tableNamed(FallbackTableName), s)
		elems, err := c.ops.GetSetElements(set)
		if IsNotExist(err) {
			continue
		}
		if err != nil {
			return 0, false, fmt.Errorf("list elements of set %s %s: %w", FallbackTableName, s.Name, err)
		}
		for _, e := range elems {
			if !found || e.Expires < least {
				least = e.Expires
			}
			found = true
		}
	}
	return least, found, nil
}

// Stop empties the fallback's chains that take new queries (pod-prerouting, host-output) in one transaction: no new
// query is redirected, while the replies of those already redirected are still given their address back. Call
// it, let the queries in flight be answered, then [FallbackTable.Delete]. It reports whether there was a table.
func (ft FallbackTable) Stop() (bool, error) {
	c := ft.c
	c.lock()
	defer c.mu.Unlock()
	t := tableNamed(FallbackTableName)
	for _, name := range takingChains() {
		c.ops.FlushChain(&nftables.Chain{Name: name, Table: t})
	}
	err := c.ops.Flush()
	switch {
	case IsNotExist(err):
		c.ops.Discard()
		return false, nil
	case err != nil:
		c.ops.Discard()
		return false, fmt.Errorf("stop table inet %s: %w", FallbackTableName, err)
	}
	return true, nil
}

// Delete deletes table inet [FallbackTableName]; an absent table is not an error. It reports whether
// there was one.
func (ft FallbackTable) Delete() (bool, error) {
	c := ft.c
	c.lock()
	defer c.mu.Unlock()
	c.ops.DelTable(tableNamed(FallbackTableName))
	err := c.ops.Flush()
	switch {
	case IsNotExist(err):
		return false, nil
	case err != nil:
		c.ops.Discard()
		return false, fmt.Errorf("delete table inet %s: %w", FallbackTableName, err)
	}
	c.log.Info("deleted nftables fallback table", zap.String("table", "inet "+FallbackTableName))
	return true, nil
}

func sameBaseChain(a, b *nftables.Chain) bool {
	return a.Type == b.Type && a.Hooknum != nil && b.Hooknum != nil && *a.Hooknum == *b.Hooknum &&
		a.Priority != nil && b.Priority != nil && *a.Priority == *b.Priority
}

// holdsCoveredSets reports whether the kernel's table t holds exactly f's covered pairs in each covered set (an
// empty set where f has none), whatever its rules. The caller holds c's lock.
func (c *Conn) holdsCoveredSets(t *nftables.Table, f *Fallback) (bool, error) {
	for _, s := range coveredSets {
		i := slices.IndexFunc(f.Sets, func(w Set) bool { return w.Name == s.Name })
		if i >= 0 {
			s = f.Sets[i]
		}
		if ok, err := c.setHolds(t, s, i >= 0); !ok || err != nil {
			return false, err
		}
	}
	return true, nil
}
