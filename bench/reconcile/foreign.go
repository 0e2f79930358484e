package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	rec "github.com/nodelocaldns/nodelocaldns/test/e2e/reconcile"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
	"github.com/vishvananda/netlink"
)

// The foreign-churn table: what a transaction on a table that is not ours costs the agent, beside
// what it costs the writer, and how fast the agent still repairs its interface while such transactions run
// back to back. The foreign table is kube-proxy-like: a base chain on prerouting that jumps to a chain of
// size rules; a rewrite re-declares both chains and replaces every rule in one `nft -f` transaction, as
// kube-proxy's full resync does (flush, then add), leaving our table and every base chain's policy alone.
const (
	foreignTable = "big-proxy"
	// settle is how long after the transaction's commit the agent's CPU is still counted: it covers the
	// notifications' delivery and a pass, had one been triggered (passes take a few ms).
	settle = 150 * time.Millisecond
)

// foreignCase is one row: size is the table's rule count; oneRule adds a single rule to a table of size
// rules instead of rewriting it.
type foreignCase struct {
	name    string
	size    int
	oneRule bool
}

func foreignCases() []foreignCase {
	return []foreignCase{
		{"add one rule (10k-rule table)", 10_000, true},
		{"rewrite 1k-rule table", 1_000, false},
		{"rewrite 10k-rule table", 10_000, false},
		{"rewrite 50k-rule table", 50_000, false},
	}
}

type foreignRow struct {
	c                      foreignCase
	agent, idle            durations // agent CPU per window with a transaction, and per idle window
	net                    durations // agent - idle, pair by pair
	agentTicks, idleTicks  int64     // utime+stime, clock ticks, summed over all windows (a cross-check)
	nftCPU, nftWall        durations // the writer's own CPU (rusage) and wall time
	repair                 durations // interface repair while the transactions run back to back
	passesBefore, passesAt float64
}

// runForeign starts its own agent (after the tamper table's is gone) and measures every foreign case.
func runForeign(n int) error {
	t := harness.NewProgram("bench-reconcile-foreign")
	var rows []foreignRow
	err := t.Run(func() error {
		a := rec.StartAgent(t)
		pid := a.Cmd.Process.Pid
		dir := t.TempDir()
		for _, c := range foreignCases() {
			r, err := foreignRun(a, pid, dir, c, n)
			if err != nil {
				lines := a.Lines()
				for _, l := range lines {
					fmt.Fprintf(os.Stderr, "agent: %s %s %v\n", l.Level, l.Msg, l.Raw)
				}
				return fmt.Errorf("%s: %w", c.name, err)
			}
			rows = append(rows, r)
		}
		return nil
	})
	if err != nil {
		return err
	}
	printForeign(rows, n)
	return nil
}

func foreignRun(a *harness.Agent, pid int, dir string, c foreignCase, n int) (foreignRow, error) {
	r := foreignRow{c: c}
	full := filepath.Join(dir, fmt.Sprintf("rewrite-%d.nft", c.size))
	if err := os.WriteFile(full, []byte(rewriteText(c.size)), 0o644); err != nil {
		return r, err
	}
	if _, _, err := nftFile(full); err != nil { // the table as it stands before the measured transactions
		return r, err
	}
	tx := func(i int) (time.Duration, time.Duration, error) {
		if !c.oneRule {
			return nftFile(full)
		}
		one := filepath.Join(dir, "one.nft")
		text := fmt.Sprintf("add rule ip %s services ip daddr 10.201.%d.%d tcp dport 80 counter accept\n", foreignTable, i/250, i%250)
		if err := os.WriteFile(one, []byte(text), 0o644); err != nil {
			return 0, 0, err
		}
		return nftFile(one)
	}
	if _, err := rec.Quiesce(a, quiet, 10*time.Second); err != nil {
		return r, err
	}
	p, err := rec.Passes(a)
	if err != nil {
		return r, err
	}
	r.passesBefore = p.Total
	for i := range n {
		var cpu, wall time.Duration
		busy, busyTicks, err := agentCPU(pid, func() (err error) { cpu, wall, err = tx(i); return err })
		if err != nil {
			return r, err
		}
		// An idle window as long, without a transaction: the agent's background (Go runtime, timers) is the floor.
		idle, idleTicks, err := agentCPU(pid, func() error { time.Sleep(wall); return nil })
		if err != nil {
			return r, err
		}
		r.idle, r.agent, r.net = append(r.idle, idle), append(r.agent, busy), append(r.net, busy-idle)
		r.idleTicks += idleTicks
		r.agentTicks += busyTicks
		r.nftCPU, r.nftWall = append(r.nftCPU, cpu), append(r.nftWall, wall)
	}
	if p, err = rec.Passes(a); err != nil {
		return r, err
	}
	r.passesAt = p.Total
	r.repair, err = repairUnderChurn(func() error { _, _, err := tx(n); return err }, n)
	return r, err
}

// agentCPU runs fn and returns the agent's CPU time from just before fn until settle after it: the sum over
// its threads of the scheduler's on-CPU nanoseconds (/proc/<pid>/task/*/schedstat), and, as a coarse
// cross-check, utime+stime in clock ticks from /proc/<pid>/stat.
func agentCPU(pid int, fn func() error) (time.Duration, int64, error) {
	ns0, t0, err := cpuOf(pid)
	if err != nil {
		return 0, 0, err
	}
	if err := fn(); err != nil {
		return 0, 0, err
	}
	time.Sleep(settle)
	ns1, t1, err := cpuOf(pid)
	return time.Duration(ns1 - ns0), t1 - t0, err
}

func cpuOf(pid int) (ns, ticks int64, err error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		return 0, 0, fmt.Errorf("agent %d: no schedstat (%v)", pid, err)
	}
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // a thread that just exited
		}
		v, _ := strconv.ParseInt(strings.Fields(string(b))[0], 10, 64)
		ns += v
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// Fields after the command name (which may hold spaces): utime and stime are fields 14 and 15.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return ns, ut + st, nil
}

// nftFile applies a file with `nft -f` and returns the process's CPU (user+system) and wall time.
func nftFile(path string) (cpu, wall time.Duration, err error) {
	cmd := exec.Command("nft", "-f", path)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	wall = time.Since(start)
	if err != nil {
		return 0, 0, fmt.Errorf("nft -f %s: %w: %s", path, err, out)
	}
	return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), wall, nil
}

// rewriteText is one kube-proxy-like full resync of a table of size rules.
func rewriteText(size int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "add table ip %[1]s\nflush table ip %[1]s\n", foreignTable)
	fmt.Fprintf(&b, "add chain ip %s prerouting { type filter hook prerouting priority -100; policy accept; }\n", foreignTable)
	fmt.Fprintf(&b, "add chain ip %s services\n", foreignTable)
	fmt.Fprintf(&b, "add rule ip %s prerouting ip daddr 10.200.0.0/16 jump services\n", foreignTable)
	for i := range size - 1 {
		fmt.Fprintf(&b, "add rule ip %s services ip daddr 10.200.%d.%d tcp dport %d counter accept\n", foreignTable, i/250, i%250, 80+i%1000)
	}
	return b.String()
}

// repairUnderChurn runs tx back to back in the background and meanwhile, trials times, deletes one of the
// agent's addresses and times until the kernel announces it again.
func repairUnderChurn(tx func() error, trials int) (durations, error) {
	stop, churnErr := make(chan struct{}), make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				churnErr <- nil
				return
			default:
			}
			if err := tx(); err != nil {
				churnErr <- err
				return
			}
		}
	}()
	var out durations
	var err error
	for range trials {
		var d time.Duration
		if d, err = repairAddress(); err != nil {
			break
		}
		out = append(out, d)
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	return out, errors.Join(err, <-churnErr)
}

// repairAddress deletes rec.ClusterIP from the agent's interface and waits for the agent to add it back.
func repairAddress() (time.Duration, error) {
	ch, done := make(chan netlink.AddrUpdate, 64), make(chan struct{})
	defer close(done)
	if err := netlink.AddrSubscribe(ch, done); err != nil {
		return 0, fmt.Errorf("subscribe to addresses: %w", err)
	}
	l, err := netlink.LinkByName(rec.LinkName)
	if err != nil {
		return 0, err
	}
	ip := net.ParseIP(rec.ClusterIP)
	if err := netlink.AddrDel(l, &netlink.Addr{IPNet: netlink.NewIPNet(ip)}); err != nil {
		return 0, fmt.Errorf("delete %s: %w", ip, err)
	}
	start := time.Now()
	timeout := time.After(repairLimit)
	for {
		select {
		case u := <-ch:
			if u.NewAddr && u.LinkAddress.IP.Equal(ip) {
				return time.Since(start), nil
			}
		case <-timeout:
			return 0, fmt.Errorf("address %s not repaired within %v", ip, repairLimit)
		}
	}
}

func printForeign(rows []foreignRow, n int) {
	fmt.Printf("\nagent CPU per foreign transaction (nft -f; the table's base chain re-declared, policies unchanged), %d each.\n", n)
	fmt.Printf("agent CPU: its threads' on-CPU time (schedstat) from the transaction's start to %v after its commit;\n", settle)
	fmt.Printf("  idle: as long a window right after, without a transaction; net: median of (agent - idle) pair by pair;\n")
	fmt.Printf("  ticks: utime+stime summed over all %d windows (10 ms clock ticks, a cross-check). nft: the writer's own\n", n)
	fmt.Printf("  CPU and wall time. The idle column is the noise floor: the agent's background over a window as long.\n")
	fmt.Printf("passes: the agent's reconcile passes during the %d transactions. repair: an address deleted from the agent's\n", n)
	fmt.Printf("  interface, until it is back, %d trials while the same transaction runs back to back.\n\n", n)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "transaction\tagent p50\tidle p50\tnet p50\tagent max\tticks (busy/idle)\tnft CPU p50\tnft wall p50\tagent/nft\tpasses\trepair p50\trepair p99\tnet < 1ms\t")
	for _, r := range rows {
		net := r.net.quantile(50)
		ok := "yes"
		if net >= time.Millisecond {
			ok = "NO"
		}
		ratio := "-"
		if nc := r.nftCPU.quantile(50); nc > 0 {
			ratio = fmt.Sprintf("%.3f", float64(net)/float64(nc))
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\t%.0f\t%s\t%s\t%s\t\n", r.c.name,
			ms(r.agent.quantile(50)), ms(r.idle.quantile(50)), ms(net), ms(r.agent.quantile(100)), r.agentTicks, r.idleTicks,
			ms(r.nftCPU.quantile(50)), ms(r.nftWall.quantile(50)), ratio, r.passesAt-r.passesBefore,
			ms(r.repair.quantile(50)), ms(r.repair.quantile(99)), ok)
	}
	w.Flush()
}
