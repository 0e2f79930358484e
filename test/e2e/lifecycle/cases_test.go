package lifecycle

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// The cases of two instances on one node that need more than a start and a signal.

// loopFailsStartUp: a Corefile that forwards to the agent's own address. CoreDNS's loop plugin would exit the
// process with our rules in place; ours refuses it before serving (the Corefile says it outright), and start-up
// fails through the orderly shutdown: nothing is left and the ClusterIP is served by kube-dns throughout.
func (m *matrix) loopFailsStartUp() {
	t := m.t
	m.phase("Corefile forwarding to itself: start-up fails", expectation{zero: []string{harness.ClusterIP}, allDirect: true})
	cf := strings.ReplaceAll(harness.StandardCorefile(harness.LocalIP, harness.ClusterIP, "cluster.local"), "__PILLAR__CLUSTER__DNS__", harness.LocalIP)
	a := m.n.startCorefile(harness.LocalIP+","+harness.ClusterIP, cf)
	if code := a.Wait(stopTimeout); code == 0 {
		t.Fatalf("an agent whose Corefile loops exited with 0")
	}
	a.WaitLog(time.Second, "loop detected", func(l harness.LogLine) bool { return l.Msg == "loop detected" })
	requireNothingLeft(t)
	time.Sleep(serveFor)
}

// loopInReloadIsRefused: a ConfigMap change that makes the Corefile forward to itself. The reload is refused
// before the new configuration serves (a forward to the block's own address), so no query may fail. Before,
// the reload applied and the `loop` directive's probe found it: on a busy machine the queries sent in between
// went round until the previous configuration was back, a second or more.
func (m *matrix) loopInReloadIsRefused(a *harness.Agent) {
	t := m.t
	m.phase("reload to a Corefile forwarding to itself", expectation{})
	cf := strings.ReplaceAll(harness.StandardCorefile(harness.LocalIP, harness.ClusterIP, "cluster.local"), "__PILLAR__CLUSTER__DNS__", harness.LocalIP)
	if err := os.WriteFile(filepath.Join(a.Dir, "coredns", "Corefile.base"), []byte(cf), 0o644); err != nil {
		t.Fatal(err)
	}
	a.WaitLog(10*time.Second, "reload refused", func(l harness.LogLine) bool { return strings.HasPrefix(l.Msg, "reload refused") })
	if v, ok := a.Metric(`nodelocaldns_corefile_reloads_total{result="loop"}`); !ok || v != 1 {
		t.Errorf("reloads refused for a loop = %v (%v), want 1", v, ok)
	}
	m.asked()
	m.serve()
}

// surgeAddsAnAddress: a rollout that adds an address to -localip. The new instance registers the address in
// its table before adding it to the interface, so the old one never removes it, and the old one's leaving
// removes nothing the new one needs.
func (m *matrix) surgeAddsAnAddress() {
	t := m.t
	old := m.start("surge adding an IP: old instance", true)
	m.serve()
	m.phase("surge adding an IP: new instance starts", expectation{zero: []string{harness.ClusterIP, harness.LocalIP}})
	next := m.n.startWith(harness.LocalIP+","+harness.ClusterIP+","+newIP, harness.ClusterIP+" "+newIP)
	next.WaitReady()
	testenv.Eventually(t, 5*time.Second, "/ready answers 200 with both instances serving", func() bool { c, _ := m.n.ready(); return c == 200 })
	m.phase("surge adding an IP: both serve", expectation{zero: []string{harness.ClusterIP, harness.LocalIP, newIP}})
	time.Sleep(serveFor)
	m.phase("surge adding an IP: old instance SIGTERM", expectation{zero: []string{harness.ClusterIP, harness.LocalIP, newIP}})
	m.stop(old)
	if out := testenv.Run(t, "ip", "-o", "addr", "show", "dev", ifname); !strings.Contains(out, newIP+"/32") || !strings.Contains(out, harness.LocalIP+"/32") {
		t.Fatalf("after the old instance left, %s lacks an address:\n%s", ifname, out)
	}
	m.phase("surge adding an IP: new instance alone", expectation{zero: []string{harness.ClusterIP, harness.LocalIP, newIP}})
	time.Sleep(serveFor)
	// The last instance out keeps the fallback as it was: the added address too.
	m.phase("surge adding an IP: new instance SIGTERM", expectation{zero: []string{harness.ClusterIP, newIP}})
	m.stop(next)
	requireNothingLeft(t)
}

// flushThenCrash: `nft flush ruleset` while an instance serves takes the fallback table with everything not
// owned (kube-proxy puts its own back on its next sync; here at once). The instance puts the fallback back on
// the flush's notification, so a crash right after still fails open on the link-local address.
func (m *matrix) flushThenCrash() {
	t := m.t
	a := m.start("start, then nft flush ruleset", true)
	m.requireSameTable()
	m.serve()
	m.phase("nft flush ruleset while serving", expectation{zero: []string{harness.ClusterIP}})
	testenv.Run(t, "nft", "flush", "ruleset")
	harness.ApplyKubeProxy(t)
	took := testenv.Eventually(t, 5*time.Second, "the fallback table is back after nft flush ruleset", func() bool {
		return strings.Contains(testenv.Run(t, "nft", "list", "tables"), "table inet "+fallbackTable)
	})
	m.load.note(fmt.Sprintf("nft flush ruleset while serving: the fallback table was back within %v", took.Round(time.Millisecond)))
	if ourTables(t) != 1 {
		t.Fatalf("nft flush ruleset removed an owned instance table")
	}
	time.Sleep(serveFor)
	m.phase("SIGKILL after the flush, 1 s without an agent", expectation{zero: []string{harness.ClusterIP}})
	m.kill(a)
	time.Sleep(serveFor)
}

// unprivilegedChangesNothing: a process without CAP_NET_ADMIN (uid 65534) holds the old lease name, tries to
// create and delete instance tables, and stays running; an agent starts, serves and stops as if it were not
// there.
func (m *matrix) unprivilegedChangesNothing() {
	t := m.t
	nobody := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(name, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		return cmd
	}
	squatter := nobody("/usr/bin/python3", "-c", `import socket, time
l = socket.socket(socket.AF_UNIX); l.bind("\0nodelocaldns/nodelocaldns"); l.listen()
time.sleep(120)`)
	if err := squatter.Start(); err != nil {
		t.Fatalf("start the unprivileged squatter: %v", err)
	}
	t.Cleanup(func() { squatter.Process.Kill(); squatter.Wait() })
	for _, args := range [][]string{{"add", "table", "inet", "nodelocaldns"}, {"add", "table", "inet", "nodelocaldns-1"}} {
		if out, err := nobody("nft", args...).CombinedOutput(); err == nil {
			t.Fatalf("nft %v as uid 65534 succeeded:\n%s", args, out)
		}
	}
	a := m.start("unprivileged squatter holds the old lease name", true)
	m.requireSameTable()
	if out, err := nobody("nft", "delete", "table", "inet", "nodelocaldns").CombinedOutput(); err == nil {
		t.Fatalf("nft delete table as uid 65534 succeeded:\n%s", out)
	}
	m.serve()
	m.phase("SIGTERM with the squatter still there", expectation{zero: []string{harness.ClusterIP}})
	m.stop(a)
	requireNothingLeft(t)
}

// teardown is `nodelocaldns -teardown` on a node no instance runs on, after -skipteardown kept the interface:
// the interface and the link-local fallback go, and no rule anywhere names one of our addresses.
func (m *matrix) teardown() {
	t := m.t
	if !strings.Contains(testenv.Run(t, "nft", "list", "tables"), "table inet "+fallbackTable) {
		t.Fatalf("no fallback table before -teardown: the last instance out must keep it")
	}
	out, err := exec.Command(harness.Binary(t), "-teardown", "-localip", harness.LocalIP+","+harness.ClusterIP).CombinedOutput()
	if err != nil {
		t.Fatalf("-teardown: %v\n%s", err, out)
	}
	if linkExists(t) {
		t.Errorf("-teardown left interface %s", ifname)
	}
	// kube-proxy's stand-in names our addresses on purpose; every other table must not.
	for _, line := range strings.Split(testenv.Run(t, "nft", "list", "tables"), "\n") {
		table := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "table "))
		if len(table) != 2 || table[0]+" "+table[1] == "ip kube-proxy" {
			continue
		}
		listing := testenv.Run(t, "nft", "list", "table", table[0], table[1])
		for _, ip := range []string{harness.LocalIP, harness.ClusterIP, newIP} {
			if strings.Contains(listing, ip) {
				t.Errorf("-teardown left a rule naming %s:\n%s", ip, listing)
			}
		}
		if strings.Contains(table[1], "nodelocaldns") {
			t.Errorf("-teardown left table %s %s", table[0], table[1])
		}
	}
}
