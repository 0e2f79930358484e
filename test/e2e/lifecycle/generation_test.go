package lifecycle

import (
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

var (
	nextOnce sync.Once
	nextBin  string
	nextErr  error
)

// nextBinary is the agent built with the next generation of the fallback's rules (internal/nft's
// fallback_generation_next.go, build tag nldfallbacknext: one more counter in the masquerade rules), as a
// release changing them would be; $NODELOCALDNS_NEXT_BIN overrides it.
func nextBinary(t *testing.T) string {
	t.Helper()
	nextOnce.Do(func() {
		if p := os.Getenv("NODELOCALDNS_NEXT_BIN"); p != "" {
			nextBin = p
			return
		}
		nextBin, nextErr = harness.BuildAgent("nodelocaldns-next", []string{"CGO_ENABLED=0"}, "-tags", "nldfallbacknext")
	})
	if nextErr != nil {
		t.Fatal(nextErr)
	}
	return nextBin
}

// masqueradeCounted reports whether the fallback's masquerade rules are the next version's (with a counter).
func masqueradeCounted(t *testing.T) bool {
	out, err := exec.Command("nft", "list", "chain", "inet", fallbackTable, "host-masquerade").CombinedOutput()
	return err == nil && strings.Contains(string(out), "counter packets")
}

// TestFallbackGenerationsConverge: two versions whose fallback rules differ (the next one counts in its
// masquerade rules) during a surge: the next version's table stands from its first pass, the earlier version
// writes it no more, and neither does under churn; once the next version is gone (a rollback), the earlier one
// takes the table back before its lease runs out, and the link-local address stays covered throughout. Before,
// each rewrote the other's table on every pass the other's write triggered.
func TestFallbackGenerationsConverge(t *testing.T) {
	testenv.RequireRoot(t)
	n := newNode(t)
	_ = exec.Command("nft", "delete", "table", "inet", fallbackTable).Run()
	const lease = 8 * time.Second
	flags := []string{"-syncinterval", "1s", "-fallback-lease", lease.String()}
	writes := func(ag *harness.Agent) float64 { v, _ := ag.Metric(fallbackRepairs); return v }
	a := n.start(flags...)
	a.WaitReady()
	testenv.Eventually(t, 2*time.Second, "the fallback covers the link-local address", func() bool {
		return covers(t, harness.LocalIP+" . 53")
	})
	n.bin = nextBinary(t)
	b := n.start(flags...)
	n.bin = ""
	b.WaitReady()
	testenv.Eventually(t, 2*time.Second, "the next version's table stands", func() bool { return masqueradeCounted(t) })
	wa, wb := writes(a), writes(b)
	churn(t, 30)
	time.Sleep(3 * time.Second) // three periodic passes of each, and a renewal of the lease
	da, db := writes(a)-wa, writes(b)-wb
	// On an idle machine neither writes. On a starved one the next version's renewal (at half the lease) can come
	// late enough that the earlier one's backup renewal (at a quarter) comes first, and the next takes the table
	// back in its next pass: one write each, by design, so that the address never goes uncovered. Flapping wrote
	// on every pass of each (435 writes each in 3.7 minutes, a few in these 3 s).
	if da > 1 || db > 1 {
		t.Errorf("under churn the earlier version wrote the fallback table %v times and the next %v, want at most one each (a late renewal)", da, db)
	}
	if !masqueradeCounted(t) || !covers(t, harness.LocalIP+" . 53") {
		t.Errorf("under churn the table changed: next version's rules %v, covers %v", masqueradeCounted(t), fallbackElements(t))
	}
	t.Logf("two versions of other fallback rules, 30 foreign table changes and 3 s of periodic passes: writes %v (earlier version) and %v (next)", da, db)

	// The rollback: the next version leaves; the earlier one takes the table back, never letting it lapse.
	if code := b.Stop(stopTimeout); code != 0 {
		t.Fatalf("agent exited with %d after SIGTERM", code)
	}
	deadline := time.Now().Add(2 * lease)
	for masqueradeCounted(t) && time.Now().Before(deadline) {
		if !covers(t, harness.LocalIP+" . 53") {
			t.Fatalf("the link-local address is no longer covered after the next version left: %v", fallbackElements(t))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if masqueradeCounted(t) {
		t.Fatalf("the earlier version did not take the table back within %v of the next version leaving", 2*lease)
	}
	if !covers(t, harness.LocalIP+" . 53") {
		t.Errorf("after the rollback the fallback covers %v", fallbackElements(t))
	}
	a.Stop(stopTimeout)
}

// TestPassOnceSubscribed: an agent takes a pass as soon as its nftables watch has subscribed, so a change made
// between its start-up's passes and the subscription (which sends it nothing) is seen then, not at the periodic
// pass (-syncinterval, an hour here).
func TestPassOnceSubscribed(t *testing.T) {
	testenv.RequireRoot(t)
	n := newNode(t)
	a := n.start("-syncinterval", "1h")
	a.WaitReady()
	nftPasses := func() float64 {
		var sum float64
		for _, result := range []string{"in_sync", "repaired"} {
			v, _ := a.Metric(`nodelocaldns_reconcile_passes_total{result="` + result + `",trigger="nft"}`)
			sum += v
		}
		return sum
	}
	testenv.Eventually(t, 5*time.Second, "a pass once the nftables watch has subscribed", func() bool { return nftPasses() >= 1 })
	a.Stop(stopTimeout)
}
