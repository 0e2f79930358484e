package reconcile

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// Bounds of the matrix. The repair bound is generous for a loaded 2-core CI machine; bench/reconcile measures
// the real figure. quiet is how long the pass counter must stand still before we call the agent idle.
const (
	repairBound = 2 * time.Second
	quiet       = 300 * time.Millisecond
)

// TestTamperMatrix tampers with the agent's table and interface in each way of the tamper matrix, with the admin's tools
// and through netlink. The table is owned by the agent's socket, so the kernel refuses each tamper of it
// (checkRefused). Each tamper of the interface must be repaired within repairBound by an event (the periodic pass is an
// hour away), that the result is exactly what -print-rules prints and what the flags ask of the link, that
// DNS is served again on both listen IPs, and that the repair cost one pass plus at most one confirming pass
// (our own writes must not trigger more).
func TestTamperMatrix(t *testing.T) {
	testenv.RequireRoot(t)
	a := StartAgent(t)
	want := PrintRules(t)
	testenv.Eventually(t, 5*time.Second, "the nft listing equals -print-rules", func() bool {
		got, ok := ListTable()
		return ok && got == want
	})
	obs, err := NewObserver(LinkName, LocalIPs())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(obs.Close)
	if err := obs.Baseline(); err != nil {
		t.Fatal(err)
	}
	if _, err := obs.WaitWhole(5 * time.Second); err != nil {
		t.Fatalf("before any tamper: %v", err)
	}
	checkLink(t)
	checkDNS(t)

	for _, tm := range Tampers() {
		for _, way := range []struct {
			name string
			do   func() error
		}{{"cli", tm.CLI}, {"netlink", tm.Netlink}} {
			t.Run(tm.Name+"/"+way.name, func(t *testing.T) {
				before, err := Quiesce(a, quiet, 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				if tm.Owned {
					checkRefused(t, a, tm.Name, way.do(), before, want)
					return
				}
				if err := way.do(); err != nil {
					t.Fatalf("tamper: %v", err)
				}
				// The bound runs from the tool's exit: nft's own start-up on a loaded machine is not the agent's.
				tampered := time.Now()
				done, err := obs.WaitWhole(repairBound)
				if err != nil {
					t.Fatalf("%s: %v", tm.Name, err)
				}
				t.Logf("%s (%s): tamper took %v, repaired %v after it", tm.Name, way.name,
					tampered.Sub(start).Round(time.Microsecond), done.Sub(tampered).Round(time.Microsecond))

				if got, ok := ListTable(); !ok || got != want {
					t.Errorf("after repair, nft list table inet %s:\n%s\nwant (-print-rules):\n%s", TableName, got, want)
				}
				checkLink(t)
				after, err := AfterRepair(a, before, quiet, 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				repaired := after.Count(`result="repaired"`) - before.Count(`result="repaired"`)
				total := after.Total - before.Total
				// Our own nftables transaction triggers nothing: one pass. A link repair may trigger one
				// confirming pass (see Tamper.Link). A loop or a storm would fail Quiesce above.
				maxPasses := 1.0
				if tm.Link {
					maxPasses = 2
				}
				t.Logf("passes: %v (%v repairing)", total, repaired)
				if total > maxPasses {
					t.Errorf("%v passes for one tamper, want at most %v (before %v, after %v)", total, maxPasses, before, after)
				}
				if n := after.Count(`trigger="periodic"`); n > 0 {
					t.Errorf("%v periodic passes with -syncinterval 1h", n)
				}
				checkDNS(t)
			})
		}
	}
}

// checkRefused checks a tamper of our owned table changed nothing: the kernel refused it with EPERM (`nft flush
// ruleset` succeeds but skips the table), the listing is still -print-rules', no pass repaired anything, and
// DNS is served.
func checkRefused(t *testing.T, a *harness.Agent, name string, err error, before PassStats, want string) {
	t.Helper()
	switch {
	case name == "nft flush ruleset":
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	case err == nil:
		t.Errorf("%s succeeded on an owned table", name)
	case !errors.Is(err, unix.EPERM) && !strings.Contains(err.Error(), "Operation not permitted"):
		t.Errorf("%s failed with %v, want EPERM", name, err)
	}
	if got, ok := ListTable(); !ok || got != want {
		t.Errorf("after %s, nft list table inet %s:\n%s\nwant (-print-rules):\n%s", name, TableName, got, want)
	}
	checkLink(t)
	time.Sleep(quiet)
	after, err := Passes(a)
	if err != nil {
		t.Fatal(err)
	}
	// A flush takes the link-local fallback with everything not owned: one pass puts it back. Nothing else a
	// tamper of the owned table does is ours to repair.
	wantRepairs := 0
	if name == "nft flush ruleset" {
		wantRepairs = 1
		if out, err := exec.Command("nft", "list", "table", "inet", "nodelocaldns-fallback").CombinedOutput(); err != nil {
			t.Errorf("after %s, the fallback table is not back: %v\n%s", name, err, out)
		}
	}
	if n := after.Count(`result="repaired"`) - before.Count(`result="repaired"`); n != float64(wantRepairs) {
		t.Errorf("%v repairing passes after %s, want %d", n, name, wantRepairs)
	}
	checkDNS(t)
}

// TestIdle leaves a settled agent alone: the kernel's notifications of its own writes (table, sets, link,
// addresses) must ask for no pass. A loop of them would show within a few of the runner's 5 ms between passes;
// 2 s is hundreds of those. The timers, which the real binary cannot step, are the supervisor's
// TestIdleHourOnTheClock: the foreign recheck once a minute, and nothing else.
func TestIdle(t *testing.T) {
	testenv.RequireRoot(t)
	a := StartAgent(t)
	before, err := Quiesce(a, quiet, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	after, err := Passes(a)
	if err != nil {
		t.Fatal(err)
	}
	if after.Total != before.Total {
		t.Errorf("passes while idle: before %v, after %v", before, after)
	}
	if after.Total < 1 || after.Count(`trigger="start"`) < 1 {
		t.Errorf("no pass counted at all (%v): the metric is not what this test reads", after)
	}
}

// checkLink asks iproute2 whether the link is UP and carries exactly the listen IPs as /32.
func checkLink(t *testing.T) {
	t.Helper()
	out, err := exec.Command("ip", "-j", "addr", "show", "dev", LinkName).Output()
	if err != nil {
		t.Errorf("ip -j addr show dev %s: %v", LinkName, err)
		return
	}
	var links []struct {
		Flags    []string `json:"flags"`
		AddrInfo []struct {
			Family    string `json:"family"`
			Local     string `json:"local"`
			Prefixlen int    `json:"prefixlen"`
		} `json:"addr_info"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		t.Errorf("ip -j addr: %v: %s", err, out)
		return
	}
	var addrs []string
	for _, a := range links[0].AddrInfo {
		if a.Family == "inet" {
			addrs = append(addrs, fmt.Sprintf("%s/%d", a.Local, a.Prefixlen))
		}
	}
	slices.Sort(addrs)
	if !slices.Contains(links[0].Flags, "UP") || !slices.Equal(addrs, []string{ClusterIP + "/32", LocalIP + "/32"}) {
		t.Errorf("ip -j addr: flags %v, IPv4 addresses %v; want UP with %s/32 and %s/32", links[0].Flags, addrs, LocalIP, ClusterIP)
	}
}

// checkDNS resolves a fresh name (so the cache cannot answer) on each listen IP over UDP and TCP.
func checkDNS(t *testing.T) {
	t.Helper()
	for i, ip := range []string{LocalIP, ClusterIP} {
		for j, netw := range []string{"udp", "tcp"} {
			name := fmt.Sprintf("q%d-%d%d.%s", time.Now().UnixNano(), i, j, Domain)
			got, err := harness.Lookup(ip+":53", netw, name, 2*time.Second)
			if err != nil || got != UpstreamReply {
				t.Errorf("lookup %s at %s over %s: %q, %v; want %s", name, ip, netw, got, err, UpstreamReply)
			}
		}
	}
}
