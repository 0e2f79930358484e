package lifecycle

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

const (
	stopTimeout = 25 * time.Second // the agent's own deadline is 20 s, under the pod's 30 s grace period
	serveFor    = time.Second      // a steady phase: long enough for 200 queries per target
	killGap     = 500 * time.Millisecond
	// starved is a sender stall that says the machine (2 cores in CI, shared) could not run the test on time:
	// then late answers are the machine's, not the agent's. Lost, refused, wrong or SERVFAIL answers always fail.
	starved = 100 * time.Millisecond
)

// expectation says which failed-query counts of a phase must be zero once its queries have all finished.
type expectation struct {
	phase     int
	zero      []string // targets that must see no failed query
	allAgent  bool     // every ClusterIP answer must come from the agent (our notrack rules steer it)
	allDirect bool     // every ClusterIP answer must come from kube-dns through the DNAT (our rules are gone)
}

// matrix runs the cases in order against one node; each case leaves the state the next one starts from.
type matrix struct {
	t      *testing.T
	n      *node
	load   *load
	expect []expectation
	ref    string // our table's listing after the first start: every later start must produce the same
}

func (m *matrix) phase(name string, e expectation) {
	m.load.begin(name)
	e.phase = m.load.current()
	m.expect = append(m.expect, e)
}

// TestLifecycleMatrix is issue 6's matrix: failed queries per case under a steady load, one copy of the table,
// nothing left after a graceful stop, both left with -skipteardown, and /ready in step with the kernel.
func TestLifecycleMatrix(t *testing.T) {
	testenv.RequireRoot(t)
	harness.Binary(t) // build before the clock starts
	n := newNode(t)
	m := &matrix{t: t, n: n, load: startLoad(t, n.pod.Name)}
	m.phase("no agent: kube-dns through the DNAT", expectation{zero: []string{clusterIP}, allDirect: true})
	time.Sleep(serveFor)

	a := m.start("start", true)
	m.ref = requireOneCopy(t)
	m.serve()

	m.phase("SIGTERM, no successor", expectation{zero: []string{clusterIP}})
	m.stop(a)
	requireNothingLeft(t)

	b := m.start("start again", true)
	m.requireSameTable()
	m.serve()

	m.phase("SIGKILL, 0.5 s without an agent", expectation{})
	b.Kill()
	time.Sleep(killGap)
	if ourTables(t) != 1 || !linkExists(t) {
		t.Fatalf("SIGKILL should leave table and interface behind: %d tables, link %v", ourTables(t), linkExists(t))
	}
	c := m.start("restart after SIGKILL, until ready", false)
	m.requireSameTable()
	m.serve()

	// The kubelet stops the old pod as soon as the new one is ready: no pause between the two here.
	m.phase("surge: new instance starts beside the old", expectation{zero: []string{clusterIP, localIP}})
	d := m.startStandby()
	m.phase("surge: old instance SIGTERM, new one takes over", expectation{zero: []string{clusterIP, localIP}})
	m.stop(c)
	d.WaitLog(5*time.Second, "took over", func(l harness.LogLine) bool { return strings.HasPrefix(l.Msg, "took over") })
	m.requireSameTable()
	if !linkExists(t) {
		t.Fatalf("interface %s gone after the handover", ifname)
	}
	requireReady(t)
	m.serve()

	// A rollout interrupted by deleting the DaemonSet: the leader sees a successor, the successor is leaving too.
	m.phase("surge: new instance starts beside the old", expectation{zero: []string{clusterIP, localIP}})
	d2 := m.startStandby()
	m.phase("surge: both instances SIGTERM at once", expectation{zero: []string{clusterIP}})
	d.Signal(syscall.SIGTERM)
	d2.Signal(syscall.SIGTERM)
	for _, a := range []*harness.Agent{d, d2} {
		if code := a.Wait(stopTimeout); code != 0 {
			t.Fatalf("agent exited with %d after SIGTERM", code)
		}
	}
	time.Sleep(serveFor)
	requireNothingLeft(t)

	e := m.start("start with -skipteardown", true, "-skipteardown")
	m.requireSameTable()
	m.serve()
	m.phase("SIGTERM with -skipteardown, no agent after", expectation{})
	m.stop(e)
	m.requireSameTable()
	if !linkExists(t) {
		t.Fatalf("-skipteardown: interface %s removed", ifname)
	}
	time.Sleep(serveFor)

	m.standbyReadiness()

	m.settleAndCheck()
}

// start runs an agent and waits for its "ready" line, polling /ready meanwhile: whenever /ready first says 200,
// the table must already be there. graceful says the case must not fail a ClusterIP query.
func (m *matrix) start(name string, graceful bool, extra ...string) *harness.Agent {
	m.t.Helper()
	e := expectation{}
	if graceful {
		e.zero = []string{clusterIP}
	}
	m.phase(name, e)
	a := m.n.start(extra...)
	seen := map[int]bool{}
	harness.Eventually(m.t, 30*time.Second, "/ready answers 200", func() bool {
		code, _ := ready()
		seen[code] = true
		if code == 200 && ourTables(m.t) != 1 {
			m.t.Fatalf("/ready said 200 before table %s was in place", table)
		}
		return code == 200
	})
	a.WaitReady()
	m.t.Logf("%s: /ready answered %v before 200 (0 = not listening yet)", name, keys(seen))
	return a
}

// serve is a steady phase with an agent ready: nothing fails and the agent answers the ClusterIP.
func (m *matrix) serve() {
	m.phase("serving", expectation{zero: []string{clusterIP, localIP}, allAgent: true})
	time.Sleep(serveFor)
	m.requireSameTable()
}

// startStandby starts a second instance beside a serving one and waits until it is ready as a standby.
func (m *matrix) startStandby() *harness.Agent {
	m.t.Helper()
	a := m.n.start()
	a.WaitLog(30*time.Second, "standby ready", func(l harness.LogLine) bool { return l.Msg == "ready" && l.Raw["leader"] == false })
	return a
}

func (m *matrix) stop(a *harness.Agent) {
	m.t.Helper()
	if code := a.Stop(stopTimeout); code != 0 {
		m.t.Fatalf("agent exited with %d after SIGTERM", code)
	}
	time.Sleep(serveFor)
}

func (m *matrix) requireSameTable() {
	m.t.Helper()
	if got := requireOneCopy(m.t); got != m.ref {
		m.t.Fatalf("table %s differs from the first start's:\n%s\nwant:\n%s", table, got, m.ref)
	}
}

func requireReady(t *testing.T) {
	t.Helper()
	if code, body := ready(); code != 200 {
		t.Fatalf("/ready = %d %q, want 200", code, body)
	}
}

// standbyReadiness: a standby whose table is missing says 503 and writes nothing; once the lease is free it
// takes over, restores the table and says 200. The test itself holds the lease, as a leader would.
func (m *matrix) standbyReadiness() {
	t := m.t
	lease := holdLease(t)
	harness.Run(t, "nft", "delete", "table", "inet", "nodelocaldns")
	m.phase("standby, table missing (lease held by the test)", expectation{zero: []string{clusterIP}, allDirect: true})
	f := m.n.start()
	f.WaitLog(30*time.Second, "standby ready", func(l harness.LogLine) bool { return l.Msg == "ready" && l.Raw["leader"] == false })
	code, body := ready()
	if code != 503 || !strings.Contains(body, "table") {
		t.Fatalf("standby with the table missing: /ready = %d %q, want 503 naming the table", code, body)
	}
	time.Sleep(serveFor)
	if n := ourTables(t); n != 0 {
		t.Fatalf("a standby wrote table %s", table)
	}
	m.phase("lease released: standby takes over", expectation{zero: []string{clusterIP, localIP}})
	lease.Close()
	f.WaitLog(5*time.Second, "took over", func(l harness.LogLine) bool { return strings.HasPrefix(l.Msg, "took over") })
	harness.Eventually(t, 5*time.Second, "/ready answers 200 after the takeover", func() bool { c, _ := ready(); return c == 200 })
	m.requireSameTable()
	m.serve()
	m.phase("SIGTERM, no successor", expectation{zero: []string{clusterIP}})
	m.stop(f)
	requireNothingLeft(t)
}

// settleAndCheck waits out the last queries, prints the table and checks every expectation.
func (m *matrix) settleAndCheck() {
	t := m.t
	m.load.begin("after the last case: no agent")
	m.load.settle()
	m.load.report(t)
	for _, e := range m.expect {
		name := m.load.names[e.phase]
		for _, target := range e.zero {
			c := m.load.get(e.phase, target)
			late := c.reasons["late"]
			switch {
			case c.sent == 0:
				t.Errorf("%s: no query sent to %s", name, target)
			case c.failed > late:
				t.Errorf("%s: %d of %d queries to %s failed (%s), want none", name, c.failed, c.sent, target, reasons(c.reasons))
			case late > 0 && m.load.stall(e.phase) < starved:
				t.Errorf("%s: %d of %d queries to %s answered late while the machine kept up (stall %v), want none",
					name, late, c.sent, target, m.load.stall(e.phase))
			case late > 0:
				t.Logf("%s: %d queries to %s answered late; not counted against the agent: the load generator itself stalled %v",
					name, late, target, m.load.stall(e.phase))
			}
		}
		c := m.load.get(e.phase, clusterIP)
		if e.allAgent && c.viaKubeDNS > 0 {
			t.Errorf("%s: %d ClusterIP queries bypassed the agent (answered by kube-dns through the DNAT)", name, c.viaKubeDNS)
		}
		if e.allDirect && c.viaAgent > 0 {
			t.Errorf("%s: %d ClusterIP queries reached the agent without our table", name, c.viaAgent)
		}
	}
}

func keys(m map[int]bool) []int {
	var out []int
	for k := range m {
		if k != 200 {
			out = append(out, k)
		}
	}
	return out
}
