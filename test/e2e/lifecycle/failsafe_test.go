package lifecycle

import (
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// What the agent leaves in the kernel must be harmless without it. Conventions as in fixture_test.go; besides
// the agent and kube-dns, a rogue server may take kube-dns-upstream's freed ClusterIP, and node-cache may come
// back. A query is asked with dig (an independent client) from the pod and from the node, over UDP and TCP, to
// both addresses; who answered is told apart by the answer.
const (
	rogueAddr = "198.51.100.66" // in the kube-dns namespace: whoever gets kube-dns-upstream's freed ClusterIP
	// shortLease is the fallback's first lease in TestUninstallWithoutHooks, renewed by -syncinterval 1s passes;
	// longestLease its last (see there).
	shortLease   = 4 * time.Second
	longestLease = 32 * time.Second
)

// fallbackElements is the fallback's covered pairs as nft lists them, "addr . port", sorted; none when there are
// none or there is no table.
func fallbackElements(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("nft", "list", "set", "inet", fallbackTable, "covered4").CombinedOutput()
	if err != nil {
		return nil
	}
	_, elems, ok := strings.Cut(string(out), "elements = {")
	if !ok {
		return nil
	}
	var pairs []string
	for _, e := range strings.Split(strings.Split(elems, "}")[0], ",") {
		if f := strings.Fields(e); len(f) >= 3 {
			pairs = append(pairs, strings.Join(f[:3], " "))
		}
	}
	slices.Sort(pairs)
	return pairs
}

// covers reports whether the fallback covers exactly pairs ("addr . port", sorted).
func covers(t *testing.T, pairs ...string) bool { return slices.Equal(fallbackElements(t), pairs) }

// TestUninstallWithoutHooks: the DaemonSet and kube-dns-upstream deleted together with no hook run (kubectl
// delete -k, an Argo CD deletion, helm --no-hooks), then a rogue Service given the freed ClusterIP. Nothing of
// ours points at that address: pods' and the node's queries go to kube-dns, never to the rogue, and once the
// lease has run out nothing of ours matches a packet: no instance table, no interface, no covered address.
//
// What holds within the lease must be asked within it: setting up and asking take longer on a busy machine,
// so an attempt that ran past its lease judges nothing and the next one doubles the lease.
func TestUninstallWithoutHooks(t *testing.T) {
	testenv.RequireRoot(t)
	for lease := shortLease; ; lease *= 2 {
		judged := false
		t.Run("lease "+lease.String(), func(t *testing.T) { judged = uninstallWithoutHooks(t, lease) })
		if judged || t.Failed() {
			return
		}
		if lease >= longestLease {
			t.Fatalf("no attempt asked within its lease, the longest %v: the machine is too slow to judge the lease", lease)
		}
	}
}

// uninstallWithoutHooks runs TestUninstallWithoutHooks with a fallback lease of lease, and reports false when
// it could not ask within the lease (its subtest then skips, saying so).
func uninstallWithoutHooks(t *testing.T, lease time.Duration) (judged bool) {
	n := newNode(t)
	// Every node has a default route: once the interface is gone, the node's own queries to the link-local
	// address take it, and the fallback's output rewrite sees them.
	testenv.Run(t, "ip", "route", "add", "default", "via", testenv.KubeDNSAddr)
	// A fallback an earlier test's agents left holds a longer lease, which this agent would let run (a lease
	// granted runs its course): start from a node that never had one.
	_ = exec.Command("nft", "delete", "table", "inet", fallbackTable).Run()
	a := n.start("-syncinterval", "1s", "-fallback-lease", lease.String())
	a.WaitReady()
	harness.ExpectEverywhere(t, n.Pod, "serving", harness.All("agent"))
	if code := a.Stop(stopTimeout); code != 0 {
		t.Fatalf("agent exited with %d after SIGTERM", code)
	}
	stopped := time.Now()
	tooSlow := func(what string) {
		t.Skipf("%s ended %v after the stop, past the %v lease: nothing to judge within it", what, time.Since(stopped).Round(time.Millisecond), lease)
	}
	// kube-dns-upstream is deleted and its ClusterIP handed to a rogue Service.
	var rogue *harness.Upstream
	n.KubeDNS.Exec(t, "ip", "addr", "add", rogueAddr+"/24", "dev", "eth0")
	n.KubeDNS.Do(t, func() { rogue = harness.StartUpstream(t, rogueAddr+":53", harness.AnswerRogue) })
	testenv.Run(t, "nft", "delete", "table", "ip", "kube-proxy")
	testenv.NftApply(t, fmt.Sprintf(`table ip kube-proxy {
	chain prerouting {
		type nat hook prerouting priority -100; policy accept;
		ip daddr %[1]s meta l4proto { tcp, udp } th dport 53 dnat to %[2]s:53
		ip daddr %[3]s meta l4proto { tcp, udp } th dport 53 dnat to %[4]s:53
	}
	chain output {
		type nat hook output priority -100; policy accept;
		ip daddr %[1]s meta l4proto { tcp, udp } th dport 53 dnat to %[2]s:53
		ip daddr %[3]s meta l4proto { tcp, udp } th dport 53 dnat to %[4]s:53
	}
}
`, harness.ClusterIP, testenv.KubeDNSAddr, harness.UpstreamClusterIP, rogueAddr))
	if got := harness.Who(harness.Dig(n.Pod.Command("dig", "+short", "+tries=1", "+time=1", "@"+harness.UpstreamClusterIP, "x.cluster.local.", "A"))); got != "rogue" {
		t.Fatalf("the rogue does not hold the freed ClusterIP (a pod's query to it answered by %s): the test sees nothing", got)
	}
	within := harness.AskEverywhere(n.Pod, "failsafe.default.svc.cluster.local.")
	covered := fallbackElements(t)
	if time.Since(stopped) >= lease {
		tooSlow("setting up and asking")
	}
	harness.Expect(t, "no agent, within the lease", within, harness.All("kube-dns"))
	requireNothingLeft(t)
	if !slices.Equal(covered, []string{harness.LocalIP + " . 53"}) {
		t.Errorf("within its lease the fallback covers %v, want the link-local address", covered)
	}
	time.Sleep(time.Until(stopped.Add(lease + time.Second)))
	wantAfter := func(k string) string {
		if strings.HasSuffix(k, "ClusterIP") {
			return "kube-dns" // kube-proxy's, as without any cache
		}
		return "none" // the link-local address answers nobody, as on a node that never had a cache
	}
	askedAfter := time.Since(stopped)
	after := harness.AskEverywhere(n.Pod, "failsafe.default.svc.cluster.local.")
	harness.Expect(t, "after the lease", after, wantAfter)
	if t.Failed() {
		diagnoseAfterLease(t, n, askedAfter)
	}
	if e := fallbackElements(t); len(e) > 0 {
		t.Errorf("after the lease, the fallback still covers %v", e)
	}
	requireNothingLeft(t)
	if q := rogue.QueriesFor("failsafe.default.svc.cluster.local."); q != 0 {
		t.Errorf("the rogue got %d of our queries", q)
	}
	t.Logf("uninstalled without hooks, kube-dns-upstream's ClusterIP given to a rogue: within the lease %v; after it %v; queries the rogue got: %d",
		within, after, rogue.QueriesFor("failsafe.default.svc.cluster.local."))
	return true
}

// diagnoseAfterLease logs what may have answered a query after the lease: the fallback table as the kernel
// holds it (each element with what is left of its lease), the node's conntrack entries of queries to the
// link-local address, and who answers the same queries asked again.
func diagnoseAfterLease(t *testing.T, n *node, askedAfter time.Duration) {
	t.Helper()
	table, _ := exec.Command("nft", "list", "table", "inet", fallbackTable).CombinedOutput()
	tracked, _ := exec.Command("conntrack", "-L", "--orig-dst", harness.LocalIP).CombinedOutput()
	again := harness.AskEverywhere(n.Pod, "failsafe.default.svc.cluster.local.")
	t.Logf("after the lease: asked %v after the stop; the fallback table:\n%s\nconntrack, to %s:\n%s\nasked again: %v",
		askedAfter.Round(time.Millisecond), table, harness.LocalIP, tracked, again)
}

// markWriter is another networking program's marks (Cilium ClusterMesh puts the cluster id in the mark's low
// byte, wg-quick restores the ct mark): every packet gets mark and ct mark cniMark before our chains (after
// conntrack, which a ct mark needs, and before our fallback at -150), and, with after, again between ours and
// kube-proxy's, on every hook; at the very end of postrouting a recorder counts the packets of a non-DNS flow by
// whether they still carry it.
const cniMark = "0x000000f3"

func markWriter(after bool) string {
	var b strings.Builder
	b.WriteString("table inet cni {\n")
	chains := []struct{ name, typ, hook, prio string }{
		{"pre-early", "filter", "prerouting", "-190"}, {"out-early", "route", "output", "-190"}, {"in-early", "filter", "input", "-190"},
	}
	if after {
		chains = append(chains, struct{ name, typ, hook, prio string }{"pre-late", "filter", "prerouting", "-140"},
			struct{ name, typ, hook, prio string }{"out-late", "route", "output", "-140"})
	}
	for _, c := range chains {
		fmt.Fprintf(&b, "\tchain %s {\n\t\ttype %s hook %s priority %s; policy accept;\n\t\tmeta mark set %s ct mark set %s\n\t}\n",
			c.name, c.typ, c.hook, c.prio, cniMark, cniMark)
	}
	b.WriteString(`	chain recorder {
		type filter hook postrouting priority 1000; policy accept;
		udp dport 9999 meta mark ` + cniMark + ` ct mark ` + cniMark + ` counter
		udp dport 9999 meta mark != ` + cniMark + ` counter
		udp dport 9999 ct mark != ` + cniMark + ` counter
	}
}
`)
	return b.String()
}

// TestForeignMarks: beside a program that writes the packet and connection marks before our hooks (and, in
// the second case, after them too), DNS to both addresses is answered by the agent while it runs and by
// kube-dns after a SIGKILL, and packets that are not DNS leave with exactly the marks that program gave them.
func TestForeignMarks(t *testing.T) {
	testenv.RequireRoot(t)
	n := newNode(t)
	for _, after := range []bool{false, true} {
		t.Run(map[bool]string{false: "before our hooks", true: "before and after our hooks"}[after], func(t *testing.T) {
			testenv.NftApply(t, markWriter(after))
			t.Cleanup(func() { _ = exec.Command("nft", "delete", "table", "inet", "cni").Run() })
			a := n.start()
			a.WaitReady()
			harness.ExpectEverywhere(t, n.Pod, "serving, foreign marks", harness.All("agent"))
			nonDNS(t, n, "serving")
			a.Signal(syscall.SIGKILL)
			a.Wait(5 * time.Second)
			harness.ExpectEverywhere(t, n.Pod, "after SIGKILL, foreign marks", harness.All("kube-dns"))
			nonDNS(t, n, "after SIGKILL")
			testenv.Run(t, "ip", "link", "del", ifname) // what the SIGKILL left, for the next case
		})
	}
}

// nonDNS sends datagrams that are not DNS from the pod (forwarded by the node) and from the node to kube-dns's
// namespace, and fails unless every one left the node with the foreign marks.
func nonDNS(t *testing.T, n *node, phase string) {
	t.Helper()
	testenv.Run(t, "nft", "reset", "counters", "table", "inet", "cni")
	send := func() {
		c, err := net.Dial("udp", net.JoinHostPort(testenv.KubeDNSAddr, "9999"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for range 5 {
			c.Write([]byte("x"))
			time.Sleep(10 * time.Millisecond)
		}
	}
	n.Pod.Do(t, send)
	send()
	out := testenv.Run(t, "nft", "list", "chain", "inet", "cni", "recorder")
	var kept, lost []string
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "udp dport 9999") {
			continue
		}
		if strings.Contains(line, "!=") {
			lost = append(lost, line)
		} else {
			kept = append(kept, line)
		}
	}
	if len(kept) != 1 || strings.Contains(kept[0], "packets 0 ") {
		t.Errorf("%s: no non-DNS packet left with the foreign marks (the recorder saw none):\n%s", phase, out)
	}
	for _, l := range lost {
		if !strings.Contains(l, "packets 0 ") {
			t.Errorf("%s: non-DNS packets left with other marks than the foreign program's: %s", phase, l)
		}
	}
	t.Logf("%s: non-DNS packets beside a foreign mark writer: %s", phase, strings.Join(append(kept, lost...), "; "))
}

const fallbackRepairs = `nodelocaldns_repairs_total{object="fallback"}`

// churn makes every agent look again, count times: a foreign table comes and goes, which each one's nftables
// watch reports.
func churn(t *testing.T, count int) {
	t.Helper()
	for range count {
		testenv.Run(t, "nft", "add", "table", "inet", "churn")
		testenv.Run(t, "nft", "delete", "table", "inet", "churn")
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // the passes those triggered
}

// TestInstancesOfOtherFlagsConverge: two instances of different configurations (a surge after a values
// change) keep one fallback table, the one their words decide, from the pass after the second registers; under
// churn neither writes it again; a rollout of -linklocal-fallback=false removes it from its first pod on,
// and the instance that still wants it does not put it back; with that pod gone it comes back.
func TestInstancesOfOtherFlagsConverge(t *testing.T) {
	testenv.RequireRoot(t)
	n := newNode(t)
	a := n.start()
	a.WaitReady()
	writes := func(ag *harness.Agent) float64 { v, _ := ag.Metric(fallbackRepairs); return v }
	testenv.Eventually(t, 2*time.Second, "the fallback covers the link-local address", func() bool {
		return covers(t, harness.LocalIP+" . 53")
	})
	b := n.startWith(harness.LocalIP+","+newIP+","+harness.ClusterIP, harness.ClusterIP)
	b.WaitReady()
	union := func() bool { return covers(t, harness.LocalIP+" . 53", newIP+" . 53") }
	testenv.Eventually(t, 2*time.Second, "the fallback covers the union of both instances' addresses", union)
	wa, wb := writes(a), writes(b)
	churn(t, 30)
	if !union() {
		t.Errorf("under churn the fallback changed: %v", fallbackElements(t))
	}
	if da, db := writes(a)-wa, writes(b)-wb; da != 0 || db != 0 {
		t.Errorf("under churn the instances wrote the fallback table %v and %v times, want none", da, db)
	}

	// The second instance is replaced by one with the fallback off.
	if code := b.Stop(stopTimeout); code != 0 {
		t.Fatalf("agent exited with %d after SIGTERM", code)
	}
	off := n.start("-linklocal-fallback=false")
	off.WaitReady()
	gone := func() bool {
		return !strings.Contains(testenv.Run(t, "nft", "list", "tables"), "table inet "+fallbackTable)
	}
	testenv.Eventually(t, 2*time.Second, "the fallback table is gone while an instance wants none", gone)
	wa = writes(a)
	churn(t, 30)
	if !gone() {
		t.Errorf("under churn the fallback table came back while an instance wants none:\n%s", testenv.Run(t, "nft", "list", "tables"))
	}
	if da := writes(a) - wa; da != 0 {
		t.Errorf("under churn the instance that wants the fallback wrote it %v times, want none", da)
	}
	harness.ExpectEverywhere(t, n.Pod, "both instances serving", harness.All("agent"))

	if code := off.Stop(stopTimeout); code != 0 {
		t.Fatalf("agent exited with %d after SIGTERM", code)
	}
	testenv.Eventually(t, 2*time.Second, "the fallback is back once no instance wants none", func() bool {
		return covers(t, harness.LocalIP+" . 53")
	})
	a.Stop(stopTimeout)
}
