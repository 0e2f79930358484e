// Command reconcile measures how fast the running agent repairs each tamper of issue 4's matrix (test/e2e/
// reconcile): it starts the real binary with -syncinterval 1h in a throwaway network namespace, breaks the
// table or the interface through netlink (so the damage time is known to within microseconds), and times
// until a second netlink reader, woken by the kernel's notifications, sees the table equal to its verified
// baseline and the link UP with every listen IP. Beside each row it prints node-cache's design figure: it
// re-checks every 60 s, so a repair waits for the next tick, uniformly 0..60 s: mean 30 s, p99 59.4 s, max
// 60 s (computed, not measured), or never for what its loop does not check.
//
// Run it as root: `go run ./bench/reconcile [-n 20]`.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	rec "github.com/nodelocaldns/nodelocaldns/test/e2e/reconcile"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// Benchmark knobs.
const (
	target        = 20 * time.Millisecond // issue 4: p99 under this for every tamper
	repairLimit   = 5 * time.Second       // a trial slower than this counts as not repaired
	quiet         = 50 * time.Millisecond // the agent is idle once its pass count stood still this long
	nodeCacheTick = 60 * time.Second      // node-cache's default -syncinterval
)

func main() { os.Exit(run()) }

func run() (code int) {
	if code, reexeced := testenv.Reexec(); reexeced {
		return code
	}
	n := flag.Int("n", 20, "trials per tamper")
	flag.Parse()
	if !testenv.IsRoot() || !testenv.InThrowawayNetNS() {
		fmt.Fprintln(os.Stderr, "bench/reconcile: needs root, to run in a throwaway network namespace")
		return 2
	}
	t := &tb{}
	defer t.close()
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(errFatal)
			if !ok {
				panic(r)
			}
			fmt.Fprintf(os.Stderr, "bench/reconcile: %s\n", f.msg)
			code = 1
		}
	}()
	rows, err := bench(t, *n)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench/reconcile: %v\n", err)
		return 1
	}
	print(rows, *n)
	for _, r := range rows {
		if r.failed > 0 || r.p(99) >= target {
			return 1
		}
	}
	return 0
}

// row is one tamper's results.
type row struct {
	tamper  rec.Tamper
	repair  durations
	passes  []float64 // passes the agent ran per trial
	failed  int       // trials not repaired within repairLimit
	lastErr error
}

func (r row) p(q float64) time.Duration { return r.repair.quantile(q) }

func bench(t *tb, n int) ([]row, error) {
	a := rec.StartAgent(t)
	want := rec.PrintRules(t)
	harness.Eventually(t, 5*time.Second, "the nft listing equals -print-rules", func() bool {
		got, ok := rec.ListTable()
		return ok && got == want
	})
	obs, err := rec.NewObserver(rec.LinkName, rec.LocalIPs())
	if err != nil {
		return nil, err
	}
	defer obs.Close()
	if err := obs.Baseline(); err != nil {
		return nil, err
	}
	if _, err := obs.WaitWhole(5 * time.Second); err != nil {
		return nil, fmt.Errorf("before any tamper: %w", err)
	}
	var rows []row
	for _, tm := range rec.Tampers() {
		r := row{tamper: tm}
		for range n {
			before, err := rec.Quiesce(a, quiet, 5*time.Second)
			if err != nil {
				return nil, err
			}
			if err := tm.Netlink(); err != nil {
				return nil, fmt.Errorf("%s: %w", tm.Name, err)
			}
			tampered := time.Now()
			done, err := obs.WaitWhole(repairLimit)
			if err != nil {
				r.failed++
				r.lastErr = err
				continue
			}
			r.repair = append(r.repair, done.Sub(tampered))
			after, err := rec.Quiesce(a, quiet, 5*time.Second)
			if err != nil {
				return nil, err
			}
			if after.Count(`result="repaired"`) == before.Count(`result="repaired"`) {
				return nil, fmt.Errorf("%s: whole again without a repairing pass: the tamper did not take", tm.Name)
			}
			r.passes = append(r.passes, after.Total-before.Total)
		}
		rows = append(rows, r)
	}
	if p, err := rec.Passes(a); err == nil && p.Count(`trigger="periodic"`) > 0 {
		return nil, errors.New("the periodic pass ran: the figures are not the event path's")
	}
	return rows, nil
}

func print(rows []row, n int) {
	fmt.Printf("time from tamper (netlink, committed) to repaired (seen by a second netlink reader), %d trials each;\n", n)
	fmt.Printf("agent: -syncinterval 1h, so every repair is event-driven. p99 is nearest-rank (= max below 100 trials).\n")
	fmt.Printf("node-cache: its design, computed, not measured: one check every %v, repair at the next tick.\n\n", nodeCacheTick)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "tamper\tp50\tp99\tmax\tpasses (max)\ttarget p99 < 20ms\tnode-cache mean\tnode-cache max\tp50 vs node-cache mean\t")
	for _, r := range rows {
		ok := "yes"
		if r.failed > 0 {
			ok = fmt.Sprintf("NO: %d/%d not repaired (%v)", r.failed, n, r.lastErr)
		} else if r.p(99) >= target {
			ok = "NO"
		}
		ncMean, ncMax, ratio := (nodeCacheTick / 2).String(), nodeCacheTick.String(), "-"
		if r.tamper.NodeCache != "" {
			ncMean, ncMax = r.tamper.NodeCache, "never"
		} else if p50 := r.p(50); p50 > 0 {
			ratio = fmt.Sprintf("%.0fx faster", float64(nodeCacheTick/2)/float64(p50))
		}
		fmt.Fprintf(w, "%s\t%v\t%v\t%v\t%.0f\t%s\t%s\t%s\t%s\t\n", r.tamper.Name, ms(r.p(50)), ms(r.p(99)), ms(r.repair.quantile(100)),
			maxOf(r.passes), ok, ncMean, ncMax, ratio)
	}
	w.Flush()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)) }

func maxOf(xs []float64) float64 {
	m := 0.0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}
