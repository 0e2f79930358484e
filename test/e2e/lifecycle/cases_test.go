package lifecycle

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// The cases of issue 13 that need more than a start and a signal.

// loopFailsStartUp: a Corefile that forwards to the agent's own address. CoreDNS's loop plugin would exit the
// process with our rules in place; ours reports it, and start-up fails through the orderly shutdown: nothing is
// left and the ClusterIP is served by kube-dns throughout.
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

// loopInReloadIsRefused: a ConfigMap change that makes the Corefile forward to itself. The reload applies, the
// `loop` directive finds the loop, and the previous configuration is put back. Queries that reach the looping
// configuration in between fail; the case reports how many.
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
	testenv.Eventually(t, 5*time.Second, "/ready answers 200 with both instances serving", func() bool { c, _ := ready(); return c == 200 })
	m.phase("surge adding an IP: both serve", expectation{zero: []string{harness.ClusterIP, harness.LocalIP, newIP}})
	time.Sleep(serveFor)
	m.phase("surge adding an IP: old instance SIGTERM", expectation{zero: []string{harness.ClusterIP, harness.LocalIP, newIP}})
	m.stop(old)
	if out := testenv.Run(t, "ip", "-o", "addr", "show", "dev", ifname); !strings.Contains(out, newIP+"/32") || !strings.Contains(out, harness.LocalIP+"/32") {
		t.Fatalf("after the old instance left, %s lacks an address:\n%s", ifname, out)
	}
	m.phase("surge adding an IP: new instance alone", expectation{zero: []string{harness.ClusterIP, harness.LocalIP, newIP}})
	time.Sleep(serveFor)
	m.phase("surge adding an IP: new instance SIGTERM", expectation{zero: []string{harness.ClusterIP}})
	m.stop(next)
	requireNothingLeft(t)
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
