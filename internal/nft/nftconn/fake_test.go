package nftconn

import (
	"fmt"
	"slices"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// fakeKernel is an in-memory nftOps that keeps the kernel's rules that matter to us: queued messages take
// effect only on Flush, all or nothing; deleting an absent table, or adding to one, fails with ENOENT;
// adding an existing table or set is not an error (no NLM_F_EXCL). flushErr makes the next Flush fail.
type fakeKernel struct {
	tables    []*fakeTable
	queue     []func(*fakeKernel) error
	flushErr  error
	createErr error
	flushes   int
	discards  int
	deadlines []time.Time // every deadline set on the socket, in order
}

type fakeTable struct {
	t      *nftables.Table
	owned  bool
	sets   []*nftables.Set
	elems  map[string][]nftables.SetElement
	chains []*nftables.Chain
	rules  map[string][]*nftables.Rule
}

var _ nftOps = (*fakeKernel)(nil)

func (k *fakeKernel) table(t *nftables.Table) *fakeTable {
	for _, ft := range k.tables {
		if ft.t.Name == t.Name && ft.t.Family == t.Family {
			return ft
		}
	}
	return nil
}

func enoent(what string) error { return fmt.Errorf("conn.Receive: %s: %w", what, unix.ENOENT) }

// addTable adds a table at once, as another process would (owned: with the owner flag, in the byte order
// google/nftables v0.3.0 decodes it).
func (k *fakeKernel) addTable(name string, owned bool) *fakeTable {
	t := &nftables.Table{Name: name, Family: nftables.TableFamilyINet}
	if owned {
		t.Flags = 0x02000000
	}
	ft := &fakeTable{t: t, owned: owned, elems: map[string][]nftables.SetElement{}, rules: map[string][]*nftables.Rule{}}
	k.tables = append(k.tables, ft)
	return ft
}

func (k *fakeKernel) CreateOwnedTable(name string) error {
	if k.createErr != nil {
		return k.createErr
	}
	if k.table(&nftables.Table{Name: name, Family: nftables.TableFamilyINet}) != nil {
		return fmt.Errorf("create: %w", unix.EEXIST)
	}
	k.addTable(name, true)
	return nil
}

func (k *fakeKernel) Discard() { k.discards++ }

func (k *fakeKernel) SetDeadline(t time.Time) error { k.deadlines = append(k.deadlines, t); return nil }

func (k *fakeKernel) DelSet(s *nftables.Set) {
	k.queue = append(k.queue, func(k *fakeKernel) error {
		ft := k.table(s.Table)
		if ft == nil || !slices.ContainsFunc(ft.sets, func(x *nftables.Set) bool { return x.Name == s.Name }) {
			return enoent("set " + s.Name)
		}
		ft.sets = slices.DeleteFunc(ft.sets, func(x *nftables.Set) bool { return x.Name == s.Name })
		delete(ft.elems, s.Name)
		return nil
	})
}

func (k *fakeKernel) FlushChain(c *nftables.Chain) {
	k.queue = append(k.queue, func(k *fakeKernel) error {
		ft := k.table(c.Table)
		if ft == nil || !slices.ContainsFunc(ft.chains, func(x *nftables.Chain) bool { return x.Name == c.Name }) {
			return enoent("chain " + c.Name)
		}
		delete(ft.rules, c.Name)
		return nil
	})
}

func (k *fakeKernel) DelChain(c *nftables.Chain) {
	k.queue = append(k.queue, func(k *fakeKernel) error {
		ft := k.table(c.Table)
		if ft == nil || !slices.ContainsFunc(ft.chains, func(x *nftables.Chain) bool { return x.Name == c.Name }) {
			return enoent("chain " + c.Name)
		}
		if len(ft.rules[c.Name]) > 0 {
			return fmt.Errorf("conn.Receive: chain %s: %w", c.Name, unix.EBUSY)
		}
		ft.chains = slices.DeleteFunc(ft.chains, func(x *nftables.Chain) bool { return x.Name == c.Name })
		return nil
	})
}

func (k *fakeKernel) ListChain(t *nftables.Table, name string) (*nftables.Chain, error) {
	ft := k.table(t)
	if ft == nil {
		return nil, enoent("table " + t.Name)
	}
	for _, c := range ft.chains {
		if c.Name == name {
			return c, nil
		}
	}
	return nil, enoent("chain " + name)
}

// AddTable adds an unowned table, or keeps the one there is (no NLM_F_EXCL).
func (k *fakeKernel) AddTable(t *nftables.Table) *nftables.Table {
	k.queue = append(k.queue, func(k *fakeKernel) error {
		if k.table(t) == nil {
			k.addTable(t.Name, false)
		}
		return nil
	})
	return t
}

func (k *fakeKernel) DelTable(t *nftables.Table) {
	k.queue = append(k.queue, func(k *fakeKernel) error {
		ft := k.table(t)
		if ft == nil {
			return enoent("table " + t.Name)
		}
		k.tables = slices.DeleteFunc(k.tables, func(x *fakeTable) bool { return x == ft })
		return nil
	})
}

func (k *fakeKernel) AddSet(s *nftables.Set, vals []nftables.SetElement) error {
	k.queue = append(k.queue, func(k *fakeKernel) error {
		ft := k.table(s.Table)
		if ft == nil {
			return enoent("table " + s.Table.Name)
		}
		if !slices.ContainsFunc(ft.sets, func(x *nftables.Set) bool { return x.Name == s.Name }) {
			ft.sets = append(ft.sets, s)
		}
		ft.elems[s.Name] = append(ft.elems[s.Name], vals...)
		return nil
	})
	return nil
}

func (k *fakeKernel) AddChain(c *nftables.Chain) *nftables.Chain {
	k.queue = append(k.queue, func(k *fakeKernel) error {
		ft := k.table(c.Table)
		if ft == nil {
			return enoent("table " + c.Table.Name)
		}
		if !slices.ContainsFunc(ft.chains, func(x *nftables.Chain) bool { return x.Name == c.Name }) {
			ft.chains = append(ft.chains, c)
		}
		return nil
	})
	return c
}

func (k *fakeKernel) AddRule(r *nftables.Rule) *nftables.Rule {
	k.queue = append(k.queue, func(k *fakeKernel) error {
		ft := k.table(r.Table)
		if ft == nil || !slices.ContainsFunc(ft.chains, func(x *nftables.Chain) bool { return x.Name == r.Chain.Name }) {
			return enoent("chain " + r.Chain.Name)
		}
		// The kernel echoes counters with their values and set lookups by name only.
		exprs := slices.Clone(r.Exprs)
		for i, e := range exprs {
			switch e := e.(type) {
			case *expr.Counter:
				exprs[i] = &expr.Counter{Packets: 7, Bytes: 700}
			case *expr.Lookup:
				exprs[i] = &expr.Lookup{SourceRegister: e.SourceRegister, SetName: e.SetName}
			}
		}
		ft.rules[r.Chain.Name] = append(ft.rules[r.Chain.Name], &nftables.Rule{Table: r.Table, Chain: r.Chain, Exprs: exprs, UserData: r.UserData})
		return nil
	})
	return r
}

// Flush applies the queue to a copy and commits it only if every message succeeds.
func (k *fakeKernel) Flush() error {
	queue := k.queue
	k.queue = nil
	k.flushes++
	if err := k.flushErr; err != nil {
		k.flushErr = nil
		return fmt.Errorf("conn.Receive: %w", err)
	}
	next := &fakeKernel{}
	for _, ft := range k.tables {
		c := *ft
		c.sets, c.chains = slices.Clone(ft.sets), slices.Clone(ft.chains)
		c.elems, c.rules = map[string][]nftables.SetElement{}, map[string][]*nftables.Rule{}
		for n, e := range ft.elems {
			c.elems[n] = slices.Clone(e)
		}
		for n, r := range ft.rules {
			c.rules[n] = slices.Clone(r)
		}
		next.tables = append(next.tables, &c)
	}
	for _, op := range queue {
		if err := op(next); err != nil {
			return err
		}
	}
	k.tables = next.tables
	return nil
}

func (k *fakeKernel) ListTablesOfFamily(f nftables.TableFamily) ([]*nftables.Table, error) {
	var out []*nftables.Table
	for _, ft := range k.tables {
		if f == nftables.TableFamilyUnspecified || ft.t.Family == f {
			out = append(out, ft.t)
		}
	}
	return out, nil
}

func (k *fakeKernel) GetSets(t *nftables.Table) ([]*nftables.Set, error) {
	ft := k.table(t)
	if ft == nil {
		return nil, enoent("table " + t.Name)
	}
	return slices.Clone(ft.sets), nil
}

func (k *fakeKernel) GetSetElements(s *nftables.Set) ([]nftables.SetElement, error) {
	ft := k.table(s.Table)
	if ft == nil {
		return nil, enoent("table " + s.Table.Name)
	}
	return slices.Clone(ft.elems[s.Name]), nil
}

func (k *fakeKernel) GetRules(t *nftables.Table, c *nftables.Chain) ([]*nftables.Rule, error) {
	ft := k.table(t)
	if ft == nil {
		return nil, enoent("table " + t.Name)
	}
	return slices.Clone(ft.rules[c.Name]), nil
}

func (k *fakeKernel) CloseLasting() error { return nil }
