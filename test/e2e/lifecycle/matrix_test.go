package lifecycle

import (
	"fmt"
	"net"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

const (
	stopTimeout = 25 * time.Second // the agent's own deadline is 20 s, under the pod's 30 s grace period
	serveFor    = time.Second      // a steady phase: long enough for 200 queries per target
	killGap     = 500 * time.Millisecond
	crashGap    = 5 * time.Second // a crash loop's back-off: the node has no agent for this long
	// inflightSlack: a query the agent took but had not answered when SIGKILLed is lost whatever the rules;
	// on this loaded machine answers take up to tens of ms, so queries sent this long before the kill count
	// as possibly in flight.
	inflightSlack = 100 * time.Millisecond
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
	// inflightFrom..inflightUntil (offsets from the phase's start): queries sent in this window were delivered
	// to an agent that was SIGKILLed before it answered; nothing can answer them (a client retries). Their
	// failures are reported, not counted against the case; any failure outside the window is.
	inflightFrom, inflightUntil time.Duration
}

// matrix runs the cases in order against one node; each case leaves the state the next one starts from.
type matrix struct {
	t      *testing.T
	n      *node
	load   *load
	expect []expectation
	ref    string // our table's listing after the first start: every later start must produce the same
	// fallback are the targets the link-local fallback covers at the time: every phase expects them not to
	// fail, whether an instance listens or not.
	fallback []string
}

func (m *matrix) phase(name string, e expectation) {
	m.load.begin(name)
	e.phase = m.load.current()
	for _, ip := range m.fallback {
		if !slices.Contains(e.zero, ip) {
			e.zero = append(e.zero, ip)
		}
	}
	m.expect = append(m.expect, e)
}

// TestLifecycleMatrix is the lifecycle matrix, with the rows of two instances on one node: failed queries per case under a steady load,
// one instance table per instance, nothing left after a graceful stop, and the ClusterIP failing open to
// kube-dns whenever no instance listens (SIGKILL, a crash loop, -skipteardown).
func TestLifecycleMatrix(t *testing.T) {
	testenv.RequireRoot(t)
	harness.Binary(t) // build before the clock starts
	n := newNode(t)
	m := &matrix{t: t, n: n, load: startLoad(t, n.Pod.Name, targets...)}
	m.phase("no agent: kube-dns through the DNAT", expectation{zero: []string{harness.ClusterIP}, allDirect: true})
	time.Sleep(serveFor)

	a := m.start("start", true)
	m.ref = requireOneCopy(t)
	// From the first registration on, the link-local fallback sends queries to the link-local address to
	// kube-dns whenever no instance listens: every later phase must not fail one.
	m.fallback = []string{harness.LocalIP}
	m.serve()

	m.phase("SIGTERM, no successor", expectation{zero: []string{harness.ClusterIP}})
	m.stop(a)
	requireNothingLeft(t)

	b := m.start("start again", true)
	m.requireSameTable()
	m.serve()

	// The kernel removes a killed instance's table at once: the ClusterIP fails open, the interface stays.
	m.phase("SIGKILL, 0.5 s without an agent", expectation{zero: []string{harness.ClusterIP}})
	m.kill(b)
	time.Sleep(killGap)
	if ourTables(t) != 0 || !linkExists(t) {
		t.Fatalf("after SIGKILL: %d instance tables (want 0: the kernel removes it), link %v (want it kept)", ourTables(t), linkExists(t))
	}
	c := m.start("restart after SIGKILL, until ready", true)
	m.requireSameTable()
	m.serve()

	serving := hostQueries(crashGap / 5)
	m.phase("SIGKILL, no restart for 5 s (crash loop)", expectation{zero: []string{harness.ClusterIP}})
	m.kill(c)
	crashed := hostQueries(crashGap - inflightSlack)
	for _, target := range hostTargets {
		s, c := serving[target], crashed[target]
		m.load.note(fmt.Sprintf("host-network client (the node's namespace) to the %s, one query at a time: while serving %s; "+
			"during the 5 s after SIGKILL %s", target, hostSummary(s), hostSummary(c)))
		if s.viaAgent != s.sent || c.viaKubeDNS != c.sent {
			t.Errorf("host-network queries to the %s: serving %s, after SIGKILL %s; want all by the agent, then all by kube-dns",
				target, hostSummary(s), hostSummary(c))
		}
	}
	c = m.start("restart after 5 s, until ready", true)
	m.requireSameTable()
	m.serve()

	// The kubelet stops the old pod as soon as the new one is ready: no pause between the two here.
	m.phase("surge: new instance starts beside the old", expectation{zero: []string{harness.ClusterIP, harness.LocalIP}})
	d := m.startSecond()
	m.phase("surge: old instance SIGTERM, new one stays", expectation{zero: []string{harness.ClusterIP, harness.LocalIP}})
	m.stop(c)
	m.requireSameTable()
	if !linkExists(t) {
		t.Fatalf("interface %s gone after the old instance left", ifname)
	}
	m.requireReady()
	m.serve()

	// A rollout interrupted by deleting the DaemonSet: both leave at once, the last one out removes everything.
	m.phase("surge: new instance starts beside the old", expectation{zero: []string{harness.ClusterIP, harness.LocalIP}})
	d2 := m.startSecond()
	m.phase("surge: both instances SIGTERM at once", expectation{zero: []string{harness.ClusterIP}})
	d.Signal(syscall.SIGTERM)
	d2.Signal(syscall.SIGTERM)
	for _, a := range []*harness.Agent{d, d2} {
		if code := a.Wait(stopTimeout); code != 0 {
			t.Fatalf("agent exited with %d after SIGTERM", code)
		}
	}
	time.Sleep(serveFor)
	requireNothingLeft(t)

	m.loopFailsStartUp()
	m.surgeAddsAnAddress()
	m.unprivilegedChangesNothing()
	m.flushThenCrash()

	f := m.start("start, then SIGHUP", true)
	m.requireSameTable()
	m.serve()
	m.loopInReloadIsRefused(f)
	m.phase("SIGHUP, no successor", expectation{zero: []string{harness.ClusterIP}})
	f.Signal(syscall.SIGHUP)
	if code := f.Wait(stopTimeout); code != 0 {
		t.Fatalf("agent exited with %d after SIGHUP", code)
	}
	time.Sleep(serveFor)
	requireNothingLeft(t)

	e := m.start("start with -skipteardown", true, "-skipteardown")
	m.requireSameTable()
	m.serve()
	m.phase("SIGTERM with -skipteardown, no agent after", expectation{zero: []string{harness.ClusterIP}})
	m.stop(e)
	if ourTables(t) != 0 || !linkExists(t) {
		t.Fatalf("-skipteardown: %d instance tables (want 0), link %v (want it kept)", ourTables(t), linkExists(t))
	}
	time.Sleep(serveFor)
	m.fallback = nil // from here on nothing falls back
	m.phase("-teardown, no agent", expectation{zero: []string{harness.ClusterIP}})
	m.teardown()

	m.settleAndCheck()
}

// start runs an agent and waits for its "ready" line, polling /ready meanwhile: whenever /ready first says 200,
// the table must already be there. graceful says the case must not fail a ClusterIP query.
func (m *matrix) start(name string, graceful bool, extra ...string) *harness.Agent {
	m.t.Helper()
	e := expectation{}
	if graceful {
		e.zero = []string{m.n.fam.clusterIP}
	}
	m.phase(name, e)
	a := m.n.start(extra...)
	seen := map[int]bool{}
	testenv.Eventually(m.t, 30*time.Second, "/ready answers 200", func() bool {
		code, _ := m.n.ready()
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

// asked waits (bounded) until the current phase has had a query to each target it counts failures for, so that
// a case which ends at once (a reload refused before it applies) was still asked through: on a busy machine the
// load generator was held up for the whole of such a phase, which then had none to count.
func (m *matrix) asked() {
	m.t.Helper()
	e := m.expect[len(m.expect)-1]
	testenv.Eventually(m.t, 10*time.Second, "a query to every target of the phase", func() bool {
		for _, target := range e.zero {
			if m.load.get(e.phase, target).sent == 0 {
				return false
			}
		}
		return true
	})
}

// serve is a steady phase with an agent ready: nothing fails and the agent answers the ClusterIP.
func (m *matrix) serve() {
	m.phase("serving", expectation{zero: []string{m.n.fam.clusterIP, m.n.fam.local}, allAgent: true})
	time.Sleep(serveFor)
	m.requireSameTable()
}

// startSecond starts a second instance beside a serving one and waits until it says ready and /ready (both
// instances serving) answers 200.
func (m *matrix) startSecond() *harness.Agent {
	m.t.Helper()
	a := m.n.start()
	a.WaitReady()
	testenv.Eventually(m.t, 5*time.Second, "/ready answers 200 with both instances serving", func() bool { c, _ := m.n.ready(); return c == 200 })
	return a
}

// kill lets the phase run for inflightSlack, then SIGKILLs a and waits for the process to be gone (the kernel
// has then removed its table). Queries sent from inflightSlack before the kill until it was gone may have been
// taken by the killed agent: that window is recorded.
func (m *matrix) kill(a *harness.Agent) {
	e := &m.expect[len(m.expect)-1]
	time.Sleep(inflightSlack)
	e.inflightFrom = time.Since(m.load.starts[e.phase]) - inflightSlack
	a.Kill()
	e.inflightUntil = time.Since(m.load.starts[e.phase])
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

func (m *matrix) requireReady() {
	m.t.Helper()
	if code, body := m.n.ready(); code != 200 {
		m.t.Fatalf("/ready = %d %q, want 200", code, body)
	}
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
			case c.failed > late && e.inflightUntil > 0 && c.firstFail >= e.inflightFrom && c.lastFail <= e.inflightUntil:
				t.Logf("%s: %d of %d queries to %s were in flight to the killed agent (sent %v..%v, window %v..%v); not counted",
					name, c.failed, c.sent, target, c.firstFail.Round(time.Millisecond), c.lastFail.Round(time.Millisecond),
					e.inflightFrom.Round(time.Millisecond), e.inflightUntil.Round(time.Millisecond))
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
		c := m.load.get(e.phase, m.n.fam.clusterIP)
		if e.allAgent && c.viaKubeDNS > 0 {
			t.Errorf("%s: %d ClusterIP queries bypassed the agent (answered by kube-dns through the DNAT)", name, c.viaKubeDNS)
		}
		if e.allDirect && c.viaAgent > 0 {
			t.Errorf("%s: %d ClusterIP queries reached the agent without our table", name, c.viaAgent)
		}
	}
}

// hostSummary says what happened to a host-network client's queries.
func hostSummary(c counts) string {
	return fmt.Sprintf("%d sent, %d by the agent, %d by kube-dns, %d failed", c.sent, c.viaAgent, c.viaKubeDNS, c.failed)
}

// hostTargets are what a host-network client asks, one query at a time: the ClusterIP over UDP, the link-local
// address over UDP and TCP.
var hostTargets = []string{"clusterip/udp", "link-local/udp", "link-local/tcp"}

// hostQueries asks every hostTarget in turn from the node's own namespace (a host-network client) for d and
// counts who answered each.
func hostQueries(d time.Duration) map[string]counts {
	out := map[string]counts{}
	for _, target := range hostTargets {
		out[target] = counts{reasons: map[string]int{}}
	}
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		for _, target := range hostTargets {
			c := out[target]
			c.tally(hostQuery(target))
			out[target] = c
		}
	}
	return out
}

func hostQuery(target string) (string, error) {
	const name = "host.default.svc.cluster.local."
	switch target {
	case "link-local/tcp":
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		r, _, err := (&dns.Client{Net: "tcp", Timeout: queryTimeout}).Exchange(m, net.JoinHostPort(harness.LocalIP, "53"))
		if err != nil {
			return "", err
		}
		return answerOf(r)
	}
	ip := harness.ClusterIP
	if target == "link-local/udp" {
		ip = harness.LocalIP
	}
	conn, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: net.ParseIP(ip), Port: 53})
	if err != nil {
		return "", fmt.Errorf("dial: %w", err)
	}
	defer conn.Close()
	return query(conn, name)
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
