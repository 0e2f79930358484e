package upstream

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// repeats is how many times the long tests repeat: 1, or $NLD_UPSTREAM_REPEATS (the bar is 20).
func repeats() int {
	if n, err := strconv.Atoi(os.Getenv("NLD_UPSTREAM_REPEATS")); err == nil && n > 0 {
		return n
	}
	return 1
}

// share is the largest part of the total any one pod had, and the total.
func share(before, after []int) (float64, int) {
	total, busiest := 0, 0
	for i := range after {
		d := after[i] - before[i]
		total += d
		busiest = max(busiest, d)
	}
	if total == 0 {
		return 0, 0
	}
	return float64(busiest) / float64(total), total
}

// TestSpreadOverPods: unique misses at 300/s after a fresh start, through the cache and, beside it, from the
// no-cache control. In every window the busiest pod's share of the cache's misses is at most 45%. A window is
// 7 s, or longer until it holds 1000 of the cache's misses (a busy machine sends fewer), so the verdict does not
// depend on the machine's speed; the control's share checks the DNAT spreads at all.
func TestSpreadOverPods(t *testing.T) {
	const (
		rate      = 300
		window    = 7 * time.Second
		minCount  = 1000
		maxWindow = 20 * time.Second
		bar       = 0.45
	)
	for r := range repeats() {
		t.Run(fmt.Sprintf("repeat%d", r), func(t *testing.T) {
			c := newCluster(t)
			c.startAgent()
			stop := make(chan struct{})
			cached := startLoad("c", localIP+":53", rate, stop)
			control := startLoad("n", clusterIP+":53", rate, stop)
			for w := range 2 {
				cb, nb := c.perPod("c"), c.perPod("n")
				start := time.Now()
				time.Sleep(window)
				for {
					if _, n := share(cb, c.perPod("c")); n >= minCount || time.Since(start) > maxWindow {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				cs, cn := share(cb, c.perPod("c"))
				ns, nn := share(nb, c.perPod("n"))
				t.Logf("repeat %d window %d (%v): cache busiest %.0f%% of %d %v; control busiest %.0f%% of %d %v",
					r, w, time.Since(start).Round(time.Second), 100*cs, cn, diff(cb, c.perPod("c")), 100*ns, nn, diff(nb, c.perPod("n")))
				if ns > bar {
					t.Fatalf("the control's busiest pod took %.0f%%: the DNAT fixture does not spread flows", 100*ns)
				}
				if cn < minCount/2 {
					t.Fatalf("only %d of the cache's misses reached the pods in %v", cn, time.Since(start))
				}
				if cs > bar {
					t.Errorf("repeat %d window %d: the busiest pod took %.0f%% of the cache's misses (control %.0f%%), want at most %.0f%%",
						r, w, 100*cs, 100*ns, 100*bar)
				}
			}
			close(stop)
			for _, l := range []*load{cached, control} {
				if s := summarize(l.wait()); s.failed > 0 {
					t.Logf("%s: %v", l.prefix, s)
				}
			}
			c.agent.Stop(10 * time.Second)
		})
	}
}

func diff(before, after []int) []int {
	out := make([]int, len(after))
	for i := range after {
		out[i] = after[i] - before[i]
	}
	return out
}
