package main

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/nftables"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/nft/foreign"
	"github.com/nodelocaldns/nodelocaldns/internal/nft/nftconn"
)

// The per-call table: what one look at the instance tables (what /ready read per request
// before it answered from memory, and what every pass reads), one Apply and one foreign-drop check cost next to
// N chains of a foreign table, against the real kernel. "before" is the old way, kept here as the baseline and
// run in the same process, call for call alternating with "after" (nftconn.Conn): the old Instances dumped every
// chain of every table to learn which instance tables had chains; the old Apply dumped them all to find its own
// before the batch (here: one full dump, then the same Apply). The foreign-drop check must see other tables'
// base chains, so it still dumps them (internal/nft/foreign), but it is no longer on /ready's or a link
// repair's path.

// perCallSizes are the foreign chain counts: none, a mid-sized node, kube-proxy's nftables mode with ~6k Services.
var perCallSizes = []int{0, 5_000, 25_000}

type perCallRow struct {
	chains                    int
	oldIns, newIns            durations
	oldApply, newApply, drops durations
}

// runPerCall measures every size, n calls of each kind, and prints the table.
func runPerCall(n int) error {
	var rows []perCallRow
	for _, size := range perCallSizes {
		r, err := perCall(size, n)
		if err != nil {
			return fmt.Errorf("%d chains: %w", size, err)
		}
		rows = append(rows, r)
	}
	printPerCall(rows, n)
	return nil
}

func perCall(size, n int) (perCallRow, error) {
	r := perCallRow{chains: size}
	if out, err := exec.Command("nft", "flush", "ruleset").CombinedOutput(); err != nil {
		return r, fmt.Errorf("nft flush ruleset: %v: %s", err, out)
	}
	if err := foreignChains(size); err != nil {
		return r, err
	}
	c, err := nftconn.Open()
	if err != nil {
		return r, err
	}
	defer c.Close()
	spec := nft.Spec{LocalIPs: []netip.Addr{netip.MustParseAddr("169.254.20.10"), netip.MustParseAddr("10.96.0.10")},
		DNSPort: 53, HealthPort: 8080}
	rs := nft.Build(spec)
	if err := c.Apply(rs); err != nil {
		return r, err
	}
	raw, err := nftables.New(nftables.AsLasting()) // one socket, as nftconn.Conn has
	if err != nil {
		return r, err
	}
	defer raw.CloseLasting()
	for range n {
		if err := timed(&r.oldIns, func() error { _, err := oldInstances(raw); return err }); err != nil {
			return r, fmt.Errorf("old instances: %w", err)
		}
		if err := timed(&r.newIns, func() error { _, err := c.Instances(); return err }); err != nil {
			return r, fmt.Errorf("instances: %w", err)
		}
		if err := timed(&r.oldApply, func() error {
			if _, err := raw.ListChains(); err != nil {
				return err
			}
			return c.Apply(rs)
		}); err != nil {
			return r, fmt.Errorf("old apply: %w", err)
		}
		if err := timed(&r.newApply, func() error { return c.Apply(rs) }); err != nil {
			return r, fmt.Errorf("apply: %w", err)
		}
		if err := timed(&r.drops, func() error { _, err := foreign.ScanDrops(53, c.Table()); return err }); err != nil {
			return r, fmt.Errorf("foreign drops: %w", err)
		}
	}
	return r, nil
}

// foreignChains adds size regular chains to one foreign table in a single nft -f transaction.
func foreignChains(size int) error {
	if size == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("add table ip big-node\n")
	for i := range size {
		fmt.Fprintf(&b, "add chain ip big-node svc-%d\n", i)
	}
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(b.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft -f (%d chains): %v: %s", size, err, out)
	}
	return nil
}

// oldInstances is Instances as it was before listing.go: every table, every chain of every table, then the
// instance tables' sets and elements.
func oldInstances(c *nftables.Conn) (int, error) {
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return 0, err
	}
	chains, err := c.ListChains()
	if err != nil {
		return 0, err
	}
	withChains := map[string]bool{}
	for _, ch := range chains {
		if ch.Table != nil && ch.Table.Family == nftables.TableFamilyINet && ch.Name != nft.ChainRawOutput {
			withChains[ch.Table.Name] = true
		}
	}
	found := 0
	for _, t := range tables {
		if !strings.HasPrefix(t.Name, nft.TableName) {
			continue
		}
		sets, err := c.GetSets(t)
		if err != nil {
			return 0, err
		}
		for _, s := range sets {
			if _, err := c.GetSetElements(s); err != nil {
				return 0, err
			}
		}
		if withChains[t.Name] {
			found++
		}
	}
	return found, nil
}

func timed(d *durations, f func() error) error {
	start := time.Now()
	if err := f(); err != nil {
		return err
	}
	*d = append(*d, time.Since(start))
	return nil
}

func printPerCall(rows []perCallRow, n int) {
	fmt.Printf("\nper-call cost next to N foreign chains (one ip table, N regular chains), real kernel, median of %d calls;\n", n)
	fmt.Printf("before = the old full chain dump (kept here as the baseline), after = nftconn.Conn today, alternating call for call.\n")
	fmt.Printf("Instances is what every pass reads (and what /ready read per request; it now answers from the last pass's look).\n\n")
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "foreign chains\tInstances before\tInstances after\tratio\tApply before\tApply after\tratio\tforeign-drop check (unchanged)\t")
	for _, r := range rows {
		oi, ni, oa, na := r.oldIns.quantile(50), r.newIns.quantile(50), r.oldApply.quantile(50), r.newApply.quantile(50)
		fmt.Fprintf(w, "%d\t%s\t%s\t%.1fx\t%s\t%s\t%.1fx\t%s\t\n", r.chains, ms(oi), ms(ni), float64(oi)/float64(ni),
			ms(oa), ms(na), float64(oa)/float64(na), ms(r.drops.quantile(50)))
	}
	w.Flush()
}
