package nft

import (
	"fmt"
	"math/bits"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

// Drift is one difference between the kernel and the desired table.
type Drift struct {
	Kind DriftKind
	// Object names what differs: "chain raw-output", "set local4 element 169.254.20.10",
	// or "rule filter-input: <nft text of the desired rule, or the normalised expressions of a foreign one>".
	Object string
}

// DriftKind classifies a [Drift].
type DriftKind string

// Kinds of drift. Missing objects are in the desired table but not in the kernel; extra (foreign) objects are
// in our table in the kernel but not desired; a mismatch is an object whose type, hook, priority or policy differ.
const (
	DriftMissingTable   DriftKind = "missing table"
	DriftTableDormant   DriftKind = "table dormant"
	DriftMissingSet     DriftKind = "missing set"
	DriftExtraSet       DriftKind = "extra set"
	DriftSetMismatch    DriftKind = "set mismatch"
	DriftMissingElement DriftKind = "missing element"
	DriftExtraElement   DriftKind = "extra element"
	DriftMissingChain   DriftKind = "missing chain"
	DriftExtraChain     DriftKind = "extra chain"
	DriftChainMismatch  DriftKind = "chain mismatch"
	DriftMissingRule    DriftKind = "missing rule"
	DriftExtraRule      DriftKind = "extra rule"
)

func (d Drift) String() string { return string(d.Kind) + ": " + d.Object }

// Check reads our owned table back from the kernel and compares it with r, ignoring handles and counter values.
// It returns nil when the kernel is in sync. Rules are compared expression by expression in a normalised
// form (see ruleKey), as a multiset per chain: a missing and a foreign rule are both reported, and so is a
// duplicate.
func (c *Conn) Check(r *Ruleset) ([]Drift, error) {
	c.lock()
	defer c.mu.Unlock()
	tables, err := c.ops.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("list inet tables: %w", err)
	}
	name := c.table
	if name == "" {
		name = TableName
	}
	i := slices.IndexFunc(tables, func(t *nftables.Table) bool { return c.table != "" && t.Name == c.table })
	if i < 0 {
		return []Drift{{Kind: DriftMissingTable, Object: "table inet " + name}}, nil
	}
	var drifts []Drift
	if isDormant(tables[i].Flags) {
		// A dormant table keeps its rules but has no hooks: nothing would be notracked.
		drifts = append(drifts, Drift{Kind: DriftTableDormant, Object: "table inet " + name})
	}
	t := tableNamed(name)
	sets, err := c.checkSets(t, r.Sets)
	if err != nil {
		return nil, err
	}
	drifts = append(drifts, sets...)
	more, err := c.checkChains(t, r.Chains)
	if err != nil {
		return nil, err
	}
	return append(drifts, more...), nil
}

// isDormant reads the table flags in either byte order: google/nftables v0.3.0 decodes NFTA_TABLE_FLAGS
// without setting big endian, so on x86 the dormant bit arrives as 1<<24 (no real flag uses that bit).
func isDormant(flags uint32) bool {
	return flags&unix.NFT_TABLE_F_DORMANT != 0 || bits.ReverseBytes32(flags)&unix.NFT_TABLE_F_DORMANT != 0
}

func (c *Conn) checkSets(t *nftables.Table, want []Set) ([]Drift, error) {
	sets, err := c.ops.GetSets(t)
	if err != nil {
		return nil, fmt.Errorf("list sets of table inet %s: %w", t.Name, err)
	}
	have := map[string]*nftables.Set{}
	for _, s := range sets {
		have[s.Name] = s
	}
	var drifts []Drift
	for _, w := range want {
		s, ok := have[w.Name]
		delete(have, w.Name)
		if !ok {
			drifts = append(drifts, Drift{Kind: DriftMissingSet, Object: "set " + w.Name})
			continue
		}
		wantSet, _ := nftSet(t, w)
		if s.KeyType.Name != wantSet.KeyType.Name || s.Interval || s.IsMap || s.HasTimeout || s.Constant {
			drifts = append(drifts, Drift{Kind: DriftSetMismatch, Object: fmt.Sprintf("set %s: type %s", w.Name, s.KeyType.Name)})
			continue
		}
		elems, err := c.ops.GetSetElements(s)
		if err != nil {
			return nil, fmt.Errorf("list elements of set %s: %w", w.Name, err)
		}
		got := map[netip.Addr]bool{}
		for _, e := range elems {
			if ip, ok := netip.AddrFromSlice(e.Key); ok {
				got[ip] = true
			}
		}
		for _, ip := range w.Elements {
			if !got[ip] {
				drifts = append(drifts, Drift{Kind: DriftMissingElement, Object: fmt.Sprintf("set %s element %s", w.Name, ip)})
			}
			delete(got, ip)
		}
		for _, ip := range sortedUnique(mapKeys(got)) {
			drifts = append(drifts, Drift{Kind: DriftExtraElement, Object: fmt.Sprintf("set %s element %s", w.Name, ip)})
		}
	}
	for _, name := range sortedKeys(have) {
		drifts = append(drifts, Drift{Kind: DriftExtraSet, Object: "set " + name})
	}
	return drifts, nil
}

func (c *Conn) checkChains(t *nftables.Table, want []Chain) ([]Drift, error) {
	all, err := c.ops.ListChains()
	if err != nil {
		return nil, fmt.Errorf("list chains: %w", err)
	}
	have := map[string]*nftables.Chain{}
	for _, ch := range all {
		if ch.Table != nil && ch.Table.Name == t.Name && ch.Table.Family == nftables.TableFamilyINet {
			have[ch.Name] = ch
		}
	}
	var drifts []Drift
	for _, w := range want {
		ch, ok := have[w.Name]
		delete(have, w.Name)
		if !ok {
			drifts = append(drifts, Drift{Kind: DriftMissingChain, Object: "chain " + w.Name})
			continue
		}
		if d, bad := chainMismatch(ch, nftChain(t, w)); bad {
			drifts = append(drifts, Drift{Kind: DriftChainMismatch, Object: "chain " + w.Name + ": " + d})
		}
		rules, err := c.ops.GetRules(t, ch)
		if err != nil {
			return nil, fmt.Errorf("list rules of chain %s: %w", w.Name, err)
		}
		drifts = append(drifts, compareRules(w, rules)...)
	}
	for _, name := range sortedKeys(have) {
		drifts = append(drifts, Drift{Kind: DriftExtraChain, Object: "chain " + name})
	}
	return drifts, nil
}

// chainMismatch describes how the kernel's chain differs in type, hook, priority or policy.
func chainMismatch(got, want *nftables.Chain) (string, bool) {
	str := func(c *nftables.Chain) string {
		s := fmt.Sprintf("type %s", c.Type)
		if c.Hooknum != nil {
			s += fmt.Sprintf(" hook %d", *c.Hooknum)
		}
		if c.Priority != nil {
			s += fmt.Sprintf(" priority %d", *c.Priority)
		}
		if c.Policy != nil {
			s += fmt.Sprintf(" policy %d", *c.Policy)
		}
		return s
	}
	g, w := str(got), str(want)
	return fmt.Sprintf("have %s, want %s", g, w), g != w
}

// compareRules matches the kernel's rules against the desired ones by normalised key, as multisets.
func compareRules(want Chain, got []*nftables.Rule) []Drift {
	count := map[string]int{}
	var order []string // the kernel's order, for stable reports of extra rules
	for _, r := range got {
		k := ruleKey(r.Exprs, r.UserData)
		if count[k] == 0 {
			order = append(order, k)
		}
		count[k]++
	}
	var drifts []Drift
	for _, w := range want.Rules {
		k := ruleKey(w.exprs(), w.userData())
		if count[k] == 0 {
			drifts = append(drifts, Drift{Kind: DriftMissingRule, Object: "rule " + want.Name + ": " + w.String()})
			continue
		}
		count[k]--
	}
	for _, k := range order {
		for ; count[k] > 0; count[k]-- {
			drifts = append(drifts, Drift{Kind: DriftExtraRule, Object: "rule " + want.Name + ": " + k})
		}
	}
	return drifts
}

func mapKeys[K comparable, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := mapKeys(m)
	slices.Sort(out)
	return out
}
