// Command nft measures programming and removing the node-local DNS rules for two listen IPs, our way (one
// nftables table, one netlink transaction) against node-cache's way (one iptables process per check and per
// change), alternating in one run, and prints the medians and their ratio. Run it as root:
// `go run ./bench/nft`; it re-executes itself in a throwaway network namespace and touches nothing else.
package main

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/nft/nftconn"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

func main() { os.Exit(run()) }

func run() int {
	if code, reexeced := testenv.Reexec(); reexeced {
		return code
	}
	rounds := flag.Int("rounds", 30, "rounds of each way")
	flag.Parse()
	if !testenv.IsRoot() || !testenv.InThrowawayNetNS() {
		fmt.Fprintln(os.Stderr, "bench/nft: needs root, to run in a throwaway network namespace")
		return 2
	}
	if err := bench(*rounds); err != nil {
		fmt.Fprintf(os.Stderr, "bench/nft: %v\n", err)
		return 1
	}
	return 0
}

// samples holds the durations of one operation, both ways.
type samples struct{ ours, nodeCache []time.Duration }

func bench(rounds int) error {
	ips := []netip.Addr{netip.MustParseAddr("169.254.20.10"), netip.MustParseAddr("10.96.0.10")}
	spec := nft.Spec{LocalIPs: ips, DNSPort: 53, HealthPort: 8080}
	rs := nft.Build(spec)
	rules := nodeCacheRules(ips, spec.DNSPort, spec.HealthPort)
	c, err := nftconn.Open()
	if err != nil {
		return err
	}
	defer c.Close()

	var apply, resync, teardown samples
	var setupExecs, resyncExecs, teardownExecs int
	ours := func() error {
		if err := clean(); err != nil {
			return err
		}
		d, err := timed(func() error { return c.Apply(rs) })
		if err != nil {
			return err
		}
		apply.ours = append(apply.ours, d)
		// Our table is owned: nothing else can change it, so there is no periodic check to run. What a sync
		// costs us when something did change is one more Apply, replacing the contents in one batch.
		d, err = timed(func() error { return c.Apply(rs) })
		if err != nil {
			return fmt.Errorf("re-apply: %w", err)
		}
		if got := sh("nft", "-s", "list", "table", "inet", c.Table()); strings.Count(got, " counter ") != ruleCount(rs) {
			return fmt.Errorf("after re-apply, nft lists:\n%s\nwant %d rules", got, ruleCount(rs))
		}
		resync.ours = append(resync.ours, d)
		d, err = timed(c.Teardown)
		teardown.ours = append(teardown.ours, d)
		return err
	}
	nodeCache := func() error {
		if err := clean(); err != nil {
			return err
		}
		x := &iptables{}
		d, err := timed(func() error { return x.setup(rules) })
		if err != nil {
			return err
		}
		apply.nodeCache, setupExecs = append(apply.nodeCache, d), x.execs
		x.execs = 0
		// node-cache's periodic sync when nothing changed: EnsureRule again, i.e. one -C per rule.
		d, err = timed(func() error { return x.setup(rules) })
		if err != nil {
			return err
		}
		resync.nodeCache, resyncExecs = append(resync.nodeCache, d), x.execs
		if n := countRules(); n != len(rules) {
			return fmt.Errorf("after node-cache setup: %d rules listed, want %d", n, len(rules))
		}
		x.execs = 0
		d, err = timed(func() error { return x.teardown(rules) })
		teardown.nodeCache, teardownExecs = append(teardown.nodeCache, d), x.execs
		if n := countRules(); err == nil && n != 0 {
			return fmt.Errorf("after node-cache teardown: %d rules left", n)
		}
		return err
	}
	for i := range rounds {
		first, second := ours, nodeCache
		if i%2 == 1 { // alternate who goes first, so neither always runs on a warm cache
			first, second = second, first
		}
		if err := first(); err != nil {
			return fmt.Errorf("round %d: %w", i+1, err)
		}
		if err := second(); err != nil {
			return fmt.Errorf("round %d: %w", i+1, err)
		}
	}

	fmt.Printf("nft bench: %d listen IPs, %d rounds each way, alternating; ours = table inet %s (%d rules) in one netlink batch,\n",
		len(ips), rounds, nft.TableName, ruleCount(rs))
	fmt.Printf("node-cache = %d iptables rules via `iptables -w 5` (%d processes to set up, %d to re-check, %d to tear down)\n",
		len(rules), setupExecs, resyncExecs, teardownExecs)
	fmt.Printf("re-sync: ours = Apply again (our owned table needs no periodic check), node-cache = its periodic EnsureRule pass\n\n")
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "operation\tmedian ours\tmedian node-cache\tratio\t")
	for _, row := range []struct {
		name string
		s    samples
	}{{"apply (clean state)", apply}, {"re-sync", resync}, {"teardown", teardown}} {
		o, n := median(row.s.ours), median(row.s.nodeCache)
		fmt.Fprintf(w, "%s\t%v\t%v\t%.0fx\t\n", row.name, o.Round(time.Microsecond), n.Round(time.Microsecond), float64(n)/float64(o))
	}
	return w.Flush()
}

// clean empties the namespace's ruleset (iptables-nft's tables included), untimed.
func clean() error {
	if out, err := exec.Command("nft", "flush", "ruleset").CombinedOutput(); err != nil {
		return fmt.Errorf("nft flush ruleset: %v: %s", err, out)
	}
	return nil
}

// sh runs a command untimed and returns its output; an error shows in the output.
func sh(name string, args ...string) string {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%s: %v: %s", name, err, out)
	}
	return string(out)
}

// countRules counts node-cache's rules as iptables-save shows them.
func countRules() int {
	out, _ := exec.Command("iptables-save").Output()
	return strings.Count(string(out), "NodeLocal DNS Cache")
}

func ruleCount(rs *nft.Ruleset) int {
	n := 0
	for _, c := range rs.Chains {
		n += len(c.Rules)
	}
	return n
}

func timed(f func() error) (time.Duration, error) {
	start := time.Now()
	err := f()
	return time.Since(start), err
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
