package lifecycle

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// TestIPv6OnlyLifecycle is the lifecycle matrix's rows that an IPv6-only cluster (EKS IPv6, a dual-stack cluster
// with an IPv6 primary) meets on every rollout and crash, with the pod, the node and kube-dns on IPv6 only: the
// agent on a ULA node-local address and the IPv6 kube-dns ClusterIP, forwarding to an IPv6 kube-dns-upstream.
// No query to either address fails: while no instance listens, the ClusterIP fails open through kube-proxy's
// DNAT and the node-local address through the IPv6 link-local fallback.
func TestIPv6OnlyLifecycle(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireIPv6(t)
	harness.Binary(t)
	n := newNode6(t)
	m := &matrix{t: t, n: n, load: startLoad(t, n.Pod.Name, harness.ClusterIP6, harness.LocalIP6)}
	m.load.name = "lifecycle matrix ipv6"
	m.phase("no agent: kube-dns through the DNAT", expectation{zero: []string{harness.ClusterIP6}, allDirect: true})
	time.Sleep(serveFor)

	a := m.start("start", true)
	m.ref = requireOneCopy(t)
	if l := testenv.Run(t, "nft", "list", "table", "inet", fallbackTable); !containsAll(l, "covered6", harness.LocalIP6+" . 53", "ip6 daddr set "+harness.ClusterIP6) {
		t.Fatalf("the fallback table does not cover %s towards %s:\n%s", harness.LocalIP6, harness.ClusterIP6, l)
	}
	m.fallback = []string{harness.LocalIP6}
	m.serve()

	m.phase("SIGTERM, no successor", expectation{zero: []string{harness.ClusterIP6}})
	m.stop(a)
	requireNothingLeft(t)

	b := m.start("start again", true)
	m.requireSameTable()
	m.serve()

	m.phase("SIGKILL, 0.5 s without an agent", expectation{zero: []string{harness.ClusterIP6}})
	m.kill(b)
	time.Sleep(killGap)
	c := m.start("restart after SIGKILL, until ready", true)
	m.requireSameTable()
	m.serve()

	m.phase("surge: new instance starts beside the old", expectation{zero: []string{harness.ClusterIP6, harness.LocalIP6}})
	d := m.startSecond()
	m.phase("surge: old instance SIGTERM, new one stays", expectation{zero: []string{harness.ClusterIP6, harness.LocalIP6}})
	m.stop(c)
	m.requireSameTable()
	m.requireReady()
	m.serve()

	m.phase("SIGHUP, no successor", expectation{zero: []string{harness.ClusterIP6}})
	d.Signal(syscall.SIGHUP)
	if code := d.Wait(stopTimeout); code != 0 {
		t.Fatalf("agent exited with %d after SIGHUP", code)
	}
	time.Sleep(serveFor)
	requireNothingLeft(t)
	m.settleAndCheck()
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
