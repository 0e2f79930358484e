package lifecycle

import (
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// Slow misses across the last instance's SIGTERM. kube-dns-upstream answers each query after 300 to 800 ms, as
// upstreams do for external names, and the pod asks both addresses for names never asked before, so every
// query is a miss that the agent holds while it waits. Then the only instance is stopped: the queries it
// already holds must still be answered (from the addresses they were sent to, so the interface must stay until
// they are written), and the ones sent after it detached its listeners go to kube-dns (the ClusterIP through
// kube-proxy, the link-local address through the fallback). No query may be lost, and no answer may leave a
// conntrack entry behind.
func TestLastOutAnswersSlowMisses(t *testing.T) {
	n := newNode(t)
	a := n.start()
	a.WaitReady()
	n.Upstream.SetDelay(300*time.Millisecond, 800*time.Millisecond)

	dial := func(target string) (c *net.UDPConn, err error) {
		n.Pod.Do(t, func() { c, err = net.DialUDP("udp", nil, &net.UDPAddr{IP: net.ParseIP(target), Port: 53}) })
		return c, err
	}
	// 25 queries/s per address. A query counts as lost after 5 s, glibc's default timeout (resolv.conf's
	// timeout:5), as a pod's resolver would give up on it: not 3 s, which a miss can take here on a busy machine.
	// The upstream (miekg/dns, as CoreDNS serves) answers a TCP connection's queries one after the other, so a
	// query pipelined behind slow ones waits for them until a hedge goes elsewhere: beside a CPU hog the queries
	// in flight at the SIGTERM took up to 2.2 s to answer, and 1-7 of ~800 were counted lost at 3 s. The rate
	// keeps the pod's misses in flight (about 30, 110 at 2.2 s each) well under the 250 the block's fairshare
	// bound allows one client: at 100 a second per address, beside a CPU hog, the pod reached it and 9 of 802
	// were refused (REFUSED) before the SIGTERM, the machine's speed and not the drain.
	m := harness.StartMisses(t, dial, "default.svc.cluster.local", 40*time.Millisecond, 5*time.Second, harness.ClusterIP, harness.LocalIP)
	time.Sleep(1500 * time.Millisecond) // at least 0.8 s of misses sent, so some are in flight at the stop
	m.WaitAnswered(t, harness.MissCounts{}, harness.AnswerAgent, 1, 30*time.Second)
	stopped := time.Now()
	a.Signal(syscall.SIGTERM)
	code := a.Wait(30 * time.Second)
	took := time.Since(stopped)
	// After the agent: kube-dns alone. Waited for, not slept: a busy machine may send little in a fixed time.
	m.WaitAnswered(t, m.Counts(), harness.AnswerKubeDNS, 5, 30*time.Second)
	c := m.Stop()
	t.Logf("slow misses (300-800 ms upstream) across the last instance's SIGTERM: %v; the agent took %v to stop", c, took.Round(time.Millisecond))
	if code != 0 {
		t.Errorf("agent exited with code %d", code)
	}
	if c.Answers[harness.AnswerAgent] == 0 || c.Answers[harness.AnswerKubeDNS] == 0 {
		t.Errorf("want answers from the agent before the stop and from kube-dns after it: %v", c)
	}
	if c.Lost > 0 {
		t.Errorf("%d of %d slow misses lost across the SIGTERM (first sent %v before it): %v", c.Lost, c.Sent,
			stopped.Sub(c.Lost1st).Round(time.Millisecond), c)
	}
	if tracked := trackedReplies(t); len(tracked) > 0 {
		t.Errorf("%d answers written during the drain went through conntrack (each entry captures its client's next "+
			"query from that port):\n%s", len(tracked), strings.Join(tracked, "\n"))
	}
	requireNothingLeft(t)
}

// trackedReplies are the node's conntrack entries that one of our answers started: UDP from a local address's
// port 53 in the original direction. A reply to a query that conntrack saw belongs to the query's entry.
func trackedReplies(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, from := range []string{harness.LocalIP, harness.ClusterIP} {
		b, err := exec.Command("conntrack", "-L", "-p", "udp", "--orig-src", from, "--orig-port-src", "53").Output()
		if err != nil {
			t.Fatalf("conntrack -L: %v", err)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if l != "" {
				out = append(out, l)
			}
		}
	}
	return out
}
