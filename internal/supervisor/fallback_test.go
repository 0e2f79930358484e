package supervisor

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap/zaptest"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelocaldns/nodelocaldns/internal/desired"
	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
	"github.com/nodelocaldns/nodelocaldns/internal/nft"
)

// fakeFallbackTable is the kernel's one unowned fallback table, which anybody may change: it holds the
// listing of what was applied ("" when there is no table), and counts writes.
type fakeFallbackTable struct {
	listing string
	stamp   nft.FallbackStamp // what the table says of its writer
	covered []netip.AddrPort  // its covered pairs
	writes  int
	stopped bool          // Stop ran since the table was last written
	left    time.Duration // what is left of the lease (the test lets time pass by lowering it)
	// deletedLive counts deletions of a table still redirecting: the queries it redirected last lose their
	// replies' rewrite (removeFallback must stop it first).
	deletedLive int
}

func (k *fakeFallbackTable) Apply(f *nft.Fallback) error {
	k.listing, k.stopped, k.left = f.String(), false, f.Sets[0].Timeout
	k.stamp, k.covered = f.Stamp, f.Covered()
	k.writes++
	return nil
}

func (k *fakeFallbackTable) Stamp() (nft.FallbackStamp, bool, error) {
	return k.stamp, k.listing != "", nil
}

func (k *fakeFallbackTable) Covers(f *nft.Fallback) (bool, error) {
	return k.listing != "" && slices.Equal(k.covered, f.Covered()), nil
}

func (k *fakeFallbackTable) InSync(f *nft.Fallback) (bool, error) {
	return k.listing == f.String(), nil
}

func (k *fakeFallbackTable) Lease() (time.Duration, bool, error) {
	return k.left, k.listing != "" && strings.Contains(k.listing, "elements"), nil
}

// Stop empties the rewrite chains: the fake keeps a stopped table's listing, marked.
func (k *fakeFallbackTable) Stop() (bool, error) {
	if k.listing == "" {
		return false, nil
	}
	k.stopped = true
	return true, nil
}

func (k *fakeFallbackTable) Delete() (bool, error) {
	had := k.listing != ""
	if had && !k.stopped {
		k.deletedLive++
	}
	k.stopped = false
	if had {
		k.writes++
	}
	k.listing = ""
	return had, nil
}

const testLease = 15 * time.Minute

func newTestFallback(t *testing.T, k *fakeFallbackTable, vote string) (*fallback, *metrics.Metrics) {
	t.Helper()
	m, err := metrics.New(prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	st := desired.State{NFT: nft.Spec{Fallbacks: votes(vote)}, Fallback: desired.Fallback{Why: "test", Lease: testLease}}
	return newFallback(zaptest.NewLogger(t), m, k, st, clock.RealClock{}), m
}

func failOpenLinkLocal(m *metrics.Metrics) float64 {
	var out dto.Metric
	if err := m.FailOpen.WithLabelValues("link-local").Write(&out); err != nil {
		return -1
	}
	return out.GetGauge().GetValue()
}

// instance is a live instance's table as Instances lists it: its addresses and its word on the fallback
// (comma-separated; "" says none; "-" says it has no say).
func instanceTable(table, vote string, ips ...string) nft.Instance {
	in := nft.Instance{Table: table, IPs: addrs(ips...), Voted: vote != "-"}
	if vote != "-" {
		in.Fallbacks = votes(vote)
	}
	return in
}

// votes reads a comma-separated vote ("10.96.0.10:53,[fd00:96::a]:53"); "" is none.
func votes(s string) []netip.AddrPort {
	var out []netip.AddrPort
	for _, v := range strings.Split(s, ",") {
		if v != "" {
			out = append(out, netip.MustParseAddrPort(v))
		}
	}
	return out
}

// TestFallbackKeepsTheDecision: the table is written only when it differs from what the kernel holds (two
// instances deciding alike never fight), comes back after anybody else changed or deleted it, has its lease
// renewed once half of it is gone, and goes (stopped first) while an instance wants none.
func TestFallbackKeepsTheDecision(t *testing.T) {
	k := &fakeFallbackTable{}
	f, m := newTestFallback(t, k, "10.96.0.10:53")
	self := instanceTable("nodelocaldns", "10.96.0.10:53", "169.254.20.10", "10.96.0.10")
	step := func(what string, ins []nft.Instance, wantWrite, wantChange bool) {
		t.Helper()
		before := k.writes
		changed, err := f.ensure(ins)
		if err != nil {
			t.Fatalf("%s: ensure: %v", what, err)
		}
		if wrote := k.writes > before; wrote != wantWrite || (changed != "") != wantChange {
			t.Errorf("%s: wrote %v (change %q), want a write: %v, a change: %v", what, wrote, changed, wantWrite, wantChange)
		}
	}
	step("first pass", []nft.Instance{self}, true, true)
	if !strings.Contains(k.listing, "elements = { 169.254.20.10 . 53 timeout 15m }") || !strings.Contains(k.listing, "ip daddr set 10.96.0.10") {
		t.Fatalf("the table does not send the link-local address to kube-dns:\n%s", k.listing)
	}
	if v := failOpenLinkLocal(m); v != 1 {
		t.Errorf("fail_open{path=link-local} = %v, want 1", v)
	}
	step("in sync", []nft.Instance{self}, false, false)
	k.left = testLease/2 + time.Second
	step("lease more than half left", []nft.Instance{self}, false, false)
	k.left = testLease/2 - time.Second
	step("lease less than half left: renewed, no change to report", []nft.Instance{self}, true, false)
	if k.left != testLease {
		t.Errorf("renewal left %v of the lease, want %v", k.left, testLease)
	}
	surge := []nft.Instance{self, instanceTable("nodelocaldns-1", "10.96.0.10:53", "169.254.20.11")}
	step("a surge adds an address", surge, true, true)
	k.listing = "" // nft flush ruleset
	step("after a flush", surge, true, true)
	k.listing = strings.Replace(k.listing, "10.96.0.10", "10.96.0.99", 1) // someone edits a rule
	step("after an edit", surge, true, true)
	off := []nft.Instance{self, instanceTable("nodelocaldns-1", "", "169.254.20.10")}
	step("a new instance wants none", off, true, true)
	if k.listing != "" || k.deletedLive != 0 {
		t.Fatalf("table %q, %d deleted while redirecting; want it stopped, then deleted", k.listing, k.deletedLive)
	}
	if v := failOpenLinkLocal(m); v != 0 {
		t.Errorf("with no table, fail_open{path=link-local} = %v, want 0", v)
	}
	step("it stays deleted", off, false, false)
	step("an IPv6 address beside an IPv4 ClusterIP", []nft.Instance{instanceTable("nodelocaldns", "10.96.0.10:53", "169.254.20.10", "fd00::a")}, true, true)
	if v := failOpenLinkLocal(m); v != 0 {
		t.Errorf("with an uncovered local IP, fail_open{path=link-local} = %v, want 0", v)
	}
}

// TestFallbackStandsBackForALaterVersion: a table a later version wrote for the same decision (other rules, a
// higher generation in its stamp, the same targets and pairs) is left to it, renewed only once a quarter of
// the lease is left (that version, while it runs, renews it at half); an earlier version's table, or a later
// one's for another decision, is replaced at once.
func TestFallbackStandsBackForALaterVersion(t *testing.T) {
	k := &fakeFallbackTable{}
	f, _ := newTestFallback(t, k, "10.96.0.10:53")
	self := []nft.Instance{instanceTable("nodelocaldns", "10.96.0.10:53", "169.254.20.10", "10.96.0.10")}
	step := func(what string, wantWrite bool) {
		t.Helper()
		before := k.writes
		if _, err := f.ensure(self); err != nil {
			t.Fatalf("%s: ensure: %v", what, err)
		}
		if wrote := k.writes > before; wrote != wantWrite {
			t.Errorf("%s: wrote %v, want %v", what, wrote, wantWrite)
		}
	}
	step("first pass", true)
	ours := k.stamp
	later := func(targets ...string) {
		k.listing += "# a later version's rules\n"
		k.stamp = nft.FallbackStamp{Generation: ours.Generation + 1, Targets: addrs(targets...)}
	}
	later("10.96.0.10")
	step("a later version's table for the same decision", false)
	step("again, under churn", false)
	k.left = testLease/2 - time.Second
	step("half the lease gone: the later version renews it, not this one", false)
	k.left = testLease/4 - time.Second
	step("a quarter left: the later version is gone, this one takes it back", true)
	if k.stamp.Generation != ours.Generation {
		t.Errorf("the table is of generation %d, want ours, %d", k.stamp.Generation, ours.Generation)
	}
	later("10.96.0.20")
	step("a later version's table towards another target", true)
	later("10.96.0.10")
	k.covered = nil
	step("a later version's table covering other pairs", true)
	k.listing += "# an earlier version's rules\n"
	k.stamp.Generation = ours.Generation - 1
	step("an earlier version's table", true)
}

// The fallback's drain, between stopping its rewrite and deleting it, waits on the clock it is given.
func TestRemoveFallbackDrainsOnTheClock(t *testing.T) {
	k := &fakeFallbackTable{listing: "table inet nodelocaldns-fallback {}"}
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	had, err := removeFallback(k, time.Hour, clk)
	if !had || err != nil || k.listing != "" {
		t.Fatalf("removeFallback = %v, %v, listing %q; want the table removed", had, err, k.listing)
	}
	if got := clk.Since(time.Unix(1000, 0)); got != time.Hour {
		t.Errorf("the drain took %v on the clock, want the hour it was given", got)
	}
}
