package migration

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// Conventions: harness.NewNode's node, a pod and kube-dns behind kube-proxy's DNAT; node-cache ran with
// `-localip 169.254.20.10,10.96.0.10`, DNS port 53, health port 8080, and was SIGKILLed.
const (
	dnsPort    = "53"
	healthPort = "8080"
	skip       = "NodeLocal DNS Cache: skip conntrack"
	allow      = "NodeLocal DNS Cache: allow DNS traffic"
)

// nodeCacheRules are the twelve rules node-cache's initIptables inserts (-I) per listen IP, in its order
// (NODE-CACHE §1.7), as iptables arguments.
func nodeCacheRules(ip string) [][]string {
	var out [][]string
	for _, p := range []string{"tcp", "udp"} {
		out = append(out,
			[]string{"-t", "raw", "-I", "PREROUTING", "-p", p, "-d", ip, "--dport", dnsPort, "-j", "NOTRACK", "-m", "comment", "--comment", skip},
			[]string{"-t", "filter", "-I", "INPUT", "-p", p, "-d", ip, "--dport", dnsPort, "-j", "ACCEPT", "-m", "comment", "--comment", allow},
			[]string{"-t", "raw", "-I", "OUTPUT", "-p", p, "-s", ip, "--sport", dnsPort, "-j", "NOTRACK", "-m", "comment", "--comment", skip},
			[]string{"-t", "filter", "-I", "OUTPUT", "-p", p, "-s", ip, "--sport", dnsPort, "-j", "ACCEPT", "-m", "comment", "--comment", allow},
			[]string{"-t", "raw", "-I", "OUTPUT", "-p", p, "-d", ip, "--dport", dnsPort, "-j", "NOTRACK", "-m", "comment", "--comment", skip},
		)
	}
	return append(out,
		[]string{"-t", "raw", "-I", "OUTPUT", "-p", "tcp", "-d", ip, "--dport", healthPort, "-j", "NOTRACK", "-m", "comment", "--comment", skip},
		[]string{"-t", "raw", "-I", "OUTPUT", "-p", "tcp", "-s", ip, "--sport", healthPort, "-j", "NOTRACK", "-m", "comment", "--comment", skip},
	)
}

// lookalikes resemble node-cache's rules and are not: they must stay. The first is someone else's notrack of
// the ClusterIP's TCP queries, which the agent must report.
var lookalikes = [][]string{
	{"-t", "raw", "-I", "PREROUTING", "-p", "tcp", "-d", harness.ClusterIP, "--dport", dnsPort, "-j", "NOTRACK", "-m", "comment", "--comment", "not node-cache"},
	{"-t", "filter", "-I", "INPUT", "-p", "udp", "-d", harness.ClusterIP, "--dport", "5353", "-j", "ACCEPT", "-m", "comment", "--comment", allow},
	{"-t", "filter", "-I", "INPUT", "-p", "udp", "-s", "192.0.2.0/24", "-d", harness.LocalIP, "--dport", dnsPort, "-j", "ACCEPT", "-m", "comment", "--comment", allow},
}

// A stale notrack of the ClusterIP takes its queries from kube-proxy, and the link-local fallback, which leaves
// untracked queries alone and never covers the ClusterIP, does not help: with it (the first case) as without it
// (-linklocal-fallback=false) only the removal of node-cache's rules makes the ClusterIP fail open. The second
// agent removes the fallback table the first one left.
func TestSIGKILLNextToNodeCacheLeftovers(t *testing.T) {
	testenv.RequireRoot(t)
	pod := harness.NewNode(t).Pod
	var report []string
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"with the link-local fallback", nil},
		{"-linklocal-fallback=false", []string{"-linklocal-fallback=false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			report = append(report, tc.name+":")
			report = append(report, sigkillNextToLeftovers(t, pod, tc.args)...)
		})
	}
	t.Log(strings.Join(report, "\n"))
	if dir := os.Getenv("NODELOCALDNS_TEST_REPORTS"); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, "migration.txt"), []byte(strings.Join(report, "\n")+"\n"), 0o644); err != nil {
			t.Errorf("write report: %v", err)
		}
	}
}

func sigkillNextToLeftovers(t *testing.T, pod *testenv.Peer, extraArgs []string) []string {
	for _, table := range []string{"raw", "filter"} {
		testenv.Run(t, "iptables", "-t", table, "-F")
	}
	for _, ip := range []string{harness.LocalIP, harness.ClusterIP} {
		for _, r := range nodeCacheRules(ip) {
			testenv.Run(t, "iptables", r...)
		}
	}
	for _, r := range lookalikes {
		testenv.Run(t, "iptables", r...)
	}
	before := nodeCacheLines(t)
	if len(before) != 24+len(lookalikes) {
		t.Fatalf("iptables-save shows %d node-cache-like rules, want %d:\n%s", len(before), 24+len(lookalikes), strings.Join(before, "\n"))
	}
	withStale := ask(t, pod, harness.ClusterIP)

	a := harness.Start(t, harness.Config{
		Args:         append([]string{"-localip", harness.LocalIP + "," + harness.ClusterIP, "-upstreamsvc", "kube-dns-upstream", "-health-port", healthPort}, extraArgs...),
		BaseCorefile: harness.StandardCorefile(harness.LocalIP, harness.ClusterIP, "cluster.local"),
		Env:          []string{"KUBE_DNS_UPSTREAM_SERVICE_HOST=" + harness.UpstreamClusterIP, "KUBE_DNS_SERVICE_HOST=" + harness.ClusterIP},
	})
	t.Cleanup(func() { a.Stop(10 * time.Second) })
	a.WaitReady()
	serving := ask(t, pod, harness.ClusterIP)
	if serving != "answer from the agent" {
		t.Errorf("serving, clusterIP: the pod sees %q, want the agent", serving)
	}

	// Exactly node-cache's 24 rules went, each logged; the lookalikes stayed.
	left := nodeCacheLines(t)
	if len(left) != len(lookalikes) {
		t.Errorf("left after start-up:\n%s\nwant only the %d lookalikes", strings.Join(left, "\n"), len(lookalikes))
	}
	for _, l := range left {
		if !strings.Contains(l, "not node-cache") && !strings.Contains(l, "5353") && !strings.Contains(l, "192.0.2.0/24") {
			t.Errorf("a rule of node-cache's stayed: %s", l)
		}
	}
	if n := countLogs(a, "removed a rule node-cache left behind"); n != 24 {
		t.Errorf("%d removals logged, want 24", n)
	}
	if v, _ := a.Metric("nodelocaldns_nodecache_rules_removed_total"); v != 24 {
		t.Errorf("nodelocaldns_nodecache_rules_removed_total = %v, want 24", v)
	}
	// Someone else's notrack of the ClusterIP is reported, and nothing claims to fail open while it is there.
	if v, _ := a.Metric(`nodelocaldns_foreign_notrack_rules{chain="ip raw/PREROUTING"}`); v != 1 {
		t.Errorf(`nodelocaldns_foreign_notrack_rules{chain="ip raw/PREROUTING"} = %v, want 1`, v)
	}
	if v, ok := a.Metric(`nodelocaldns_fail_open{path="prerouting"}`); !ok || v != 0 {
		t.Errorf(`nodelocaldns_fail_open{path="prerouting"} = %v (present %v), want 0 while a foreign notrack exists`, v, ok)
	}

	a.Kill()
	// The pod's UDP query to the ClusterIP fails open to kube-dns (node-cache's ungated notrack is gone).
	var afterKill string
	testenv.Eventually(t, 3*time.Second, "kube-dns answering the ClusterIP after the SIGKILL", func() bool {
		afterKill = ask(t, pod, harness.ClusterIP)
		return afterKill == "answer from kube-dns"
	})
	return []string{
		"  pod's UDP query to the ClusterIP, node-cache's 24 stale rules (real iptables-nft) and 3 lookalikes:",
		"  before the agent (stale rules): " + withStale,
		"  agent serving:                  " + serving,
		"  after SIGKILL of the agent:     " + afterKill,
		"  rules left: " + strings.Join(left, "; "),
	}
}

// nodeCacheLines are the rules of iptables-save that name node-cache's comment or the lookalikes'.
func nodeCacheLines(t *testing.T) []string {
	var out []string
	for _, l := range strings.Split(testenv.Run(t, "iptables-save"), "\n") {
		if strings.Contains(l, "NodeLocal DNS Cache") || strings.Contains(l, "not node-cache") {
			out = append(out, l)
		}
	}
	return out
}

func countLogs(a *harness.Agent, msg string) int {
	n := 0
	for _, l := range a.Lines() {
		if l.Msg == msg {
			n++
		}
	}
	return n
}

// ask sends one UDP query from the pod and names the outcome.
func ask(t *testing.T, pod *testenv.Peer, server string) string {
	t.Helper()
	var got string
	pod.Do(t, func() {
		addr, err := harness.Lookup(net.JoinHostPort(server, dnsPort), "udp", "probe.cluster.local", time.Second)
		var ne net.Error
		switch {
		case err == nil && addr == harness.AnswerKubeDNS:
			got = "answer from kube-dns"
		case err == nil && addr == harness.AnswerAgent:
			got = "answer from the agent"
		case errors.Is(err, syscall.ECONNREFUSED):
			got = "refused"
		case errors.As(err, &ne) && ne.Timeout():
			got = "timeout"
		case err != nil:
			got = "error: " + err.Error()
		default:
			got = "answer " + addr
		}
	})
	return got
}
