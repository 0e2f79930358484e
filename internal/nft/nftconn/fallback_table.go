package nftconn

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/userdata"
	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
)

// FallbackTable writes the link-local fallback's table, inet [nft.FallbackTableName], and nothing else. It writes
// through c's owning socket, under its lock, for one reason: the notifications' reader recognises our own
// writes by that socket's port (nftwatch.IgnoreConn; in a container the pid cannot say it), so renewing the
// lease on every pass triggers no pass. The table itself is not owned: it outlives the socket, by design.
type FallbackTable struct{ c *Conn }

// Fallback is c's writer of the fallback table.
func (c *Conn) Fallback() FallbackTable { return FallbackTable{c} }

// Apply makes table inet [nft.FallbackTableName] hold exactly f, in one transaction whatever is there:
// add the table (a no-op when it exists), delete it, add it again with f's set, chains and rules. Packets see
// the old table or the new one, never none, and every covered pair starts a new lease. The table is not
// owned: it stays when c's socket closes.
func (ft FallbackTable) Apply(f *nft.Fallback) error {
	c := ft.c
	c.lock()
	defer c.mu.Unlock()
	start := time.Now()
	if ce := c.log.Check(zap.DebugLevel, "applying nftables fallback table"); ce != nil {
		ce.Write(zap.String("ruleset", f.String()))
	}
	t := nft.InetTable(nft.FallbackTableName)
	c.tx.AddTable(t)
	c.tx.DelTable(t)
	c.tx.AddTable(t)
	for _, s := range f.Sets {
		set, elems := s.Encode(t)
		if err := c.tx.AddSet(set, elems); err != nil {
			c.tx.DelTable(t) // a marshalling error: nothing sent yet, and this batch must not apply half a table
			c.tx.Discard()
			return fmt.Errorf("queue set %s: %w", s.Name, err)
		}
	}
	rules := 0
	for _, fc := range f.Chains {
		rules += addChain(c.tx, t, fc)
	}
	if err := c.tx.Flush(); err != nil {
		c.tx.Discard()
		return fmt.Errorf("apply table inet %s: %w", nft.FallbackTableName, err)
	}
	c.log.Info("applied nftables fallback table", zap.String("table", "inet "+nft.FallbackTableName),
		zap.Int("chains", len(f.Chains)), zap.Int("rules", rules), zap.Duration("elapsed", time.Since(start)))
	return nil
}

// InSync reports whether the kernel's table inet [nft.FallbackTableName] holds exactly f: the same pairs
// (whatever their timeouts and what is left of them: instances of other -fallback-lease values must not fight,
// and [FallbackTable.Lease] says when to renew), the same chains (type, hook, priority) and, chain by chain, the
// same rules expression by expression (counter values and handles aside).
// It asks for that set and those chains only, whatever else the node holds.
func (ft FallbackTable) InSync(f *nft.Fallback) (bool, error) {
	c := ft.c
	c.lock()
	defer c.mu.Unlock()
	t := nft.InetTable(nft.FallbackTableName)
	if ok, err := c.holdsCoveredSets(t, f); !ok || err != nil {
		return false, err
	}
	for _, fc := range f.Chains {
		have, err := c.rd.ListChain(t, fc.Name)
		if nft.IsNotExist(err) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("get chain %s %s: %w", nft.FallbackTableName, fc.Name, err)
		}
		if !sameBaseChain(have, fc.Encode(t)) {
			return false, nil
		}
		rules, err := c.rd.GetRules(t, have)
		if nft.IsNotExist(err) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("list rules of chain %s %s: %w", nft.FallbackTableName, fc.Name, err)
		}
		if len(rules) != len(fc.Rules) {
			return false, nil
		}
		want := fc.EncodeRules(t, have)
		for j, r := range rules {
			if exprsKey(r.Exprs) != exprsKey(want[j].Exprs) {
				return false, nil
			}
		}
	}
	return true, nil
}

// coveredSets are the fallback table's sets as the read-back names them, without their elements.
var coveredSets = []nft.Set{{Name: nft.SetCovered4, Concat: true}, {Name: nft.SetCovered6, Concat: true, IPv6: true}}

// setHolds reports whether set want in table t holds exactly want's pairs (present), or is not there (not
// present). Called with c.mu held.
func (c *Conn) setHolds(t *nftables.Table, want nft.Set, present bool) (bool, error) {
	set, _ := want.Encode(t)
	elems, err := c.rd.GetSetElements(set)
	if nft.IsNotExist(err) {
		return !present, nil
	}
	if err != nil {
		return false, fmt.Errorf("list elements of set %s %s: %w", nft.FallbackTableName, want.Name, err)
	}
	if !present {
		return false, nil
	}
	var have []netip.AddrPort
	for _, e := range elems {
		p, ok := nft.PairOf(e.Key)
		if !ok {
			return false, nil
		}
		have = append(have, p)
	}
	return slices.Equal(nft.SortedPairs(have), want.Pairs), nil
}

// Lease reports the least time left on the lease of table inet [nft.FallbackTableName]'s covered pairs
// (the first to expire), and whether it has any.
func (ft FallbackTable) Lease() (time.Duration, bool, error) {
	c := ft.c
	c.lock()
	defer c.mu.Unlock()
	var least time.Duration
	found := false
	for _, s := range coveredSets {
		set, _ := s.Encode(nft.InetTable(nft.FallbackTableName))
		elems, err := c.rd.GetSetElements(set)
		if nft.IsNotExist(err) {
			continue
		}
		if err != nil {
			return 0, false, fmt.Errorf("list elements of set %s %s: %w", nft.FallbackTableName, s.Name, err)
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
	t := nft.InetTable(nft.FallbackTableName)
	for _, name := range nft.TakingChains() {
		c.tx.FlushChain(&nftables.Chain{Name: name, Table: t})
	}
	err := c.tx.Flush()
	switch {
	case nft.IsNotExist(err):
		c.tx.Discard()
		return false, nil
	case err != nil:
		c.tx.Discard()
		return false, fmt.Errorf("stop table inet %s: %w", nft.FallbackTableName, err)
	}
	return true, nil
}

// Delete deletes table inet [nft.FallbackTableName]; an absent table is not an error. It reports whether
// there was one.
func (ft FallbackTable) Delete() (bool, error) {
	c := ft.c
	c.lock()
	defer c.mu.Unlock()
	c.tx.DelTable(nft.InetTable(nft.FallbackTableName))
	err := c.tx.Flush()
	switch {
	case nft.IsNotExist(err):
		return false, nil
	case err != nil:
		c.tx.Discard()
		return false, fmt.Errorf("delete table inet %s: %w", nft.FallbackTableName, err)
	}
	c.log.Info("deleted nftables fallback table", zap.String("table", "inet "+nft.FallbackTableName))
	return true, nil
}

func sameBaseChain(a, b *nftables.Chain) bool {
	return a.Type == b.Type && a.Hooknum != nil && b.Hooknum != nil && *a.Hooknum == *b.Hooknum &&
		a.Priority != nil && b.Priority != nil && *a.Priority == *b.Priority
}

// holdsCoveredSets reports whether the kernel's table t holds exactly f's covered pairs in each covered set (an
// empty set where f has none), whatever its rules. The caller holds c's lock.
func (c *Conn) holdsCoveredSets(t *nftables.Table, f *nft.Fallback) (bool, error) {
	for _, s := range coveredSets {
		i := slices.IndexFunc(f.Sets, func(w nft.Set) bool { return w.Name == s.Name })
		if i >= 0 {
			s = f.Sets[i]
		}
		if ok, err := c.setHolds(t, s, i >= 0); !ok || err != nil {
			return false, err
		}
	}
	return true, nil
}

// Stamp reads the stamp of the kernel's table inet [nft.FallbackTableName]: found false when there is no table or
// no stamp (a version before stamps wrote it, or someone edited the rule).
func (ft FallbackTable) Stamp() (nft.FallbackStamp, bool, error) {
	c := ft.c
	c.lock()
	defer c.mu.Unlock()
	t := nft.InetTable(nft.FallbackTableName)
	chain, err := c.rd.ListChain(t, nft.ChainPodPrerouting)
	if nft.IsNotExist(err) {
		return nft.FallbackStamp{}, false, nil
	}
	if err != nil {
		return nft.FallbackStamp{}, false, fmt.Errorf("get chain %s %s: %w", nft.FallbackTableName, nft.ChainPodPrerouting, err)
	}
	rules, err := c.rd.GetRules(t, chain)
	if nft.IsNotExist(err) || err == nil && len(rules) == 0 {
		return nft.FallbackStamp{}, false, nil
	}
	if err != nil {
		return nft.FallbackStamp{}, false, fmt.Errorf("list rules of chain %s %s: %w", nft.FallbackTableName, nft.ChainPodPrerouting, err)
	}
	comment, ok := userdata.GetString(rules[0].UserData, userdata.TypeComment)
	if !ok {
		return nft.FallbackStamp{}, false, nil
	}
	s, ok := nft.ParseStamp(comment)
	return s, ok, nil
}

// Covers reports whether the kernel's table covers exactly f's pairs, whatever its rules: what every
// generation reads alike.
func (ft FallbackTable) Covers(f *nft.Fallback) (bool, error) {
	c := ft.c
	c.lock()
	defer c.mu.Unlock()
	return c.holdsCoveredSets(nft.InetTable(nft.FallbackTableName), f)
}
