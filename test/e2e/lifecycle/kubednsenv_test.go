package lifecycle

import (
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// staleClusterIP is kube-dns's ClusterIP before it was recreated (what a pod's KUBE_DNS_SERVICE_HOST still
// says), since given to a rogue Service: kube-proxy DNATs it to rogueAddr.
const staleClusterIP = "10.96.0.66"

// TestKubeDNSEnvNeverRedirectsTheClusterIP: KUBE_DNS_SERVICE_HOST naming another address than the ClusterIP in
// -localip (stale after kube-dns was recreated and its old address given to a rogue Service, or set by a
// Service named kube-dns in the agent's namespace) is said in a warning and not taken: after a SIGKILL every
// query to the ClusterIP and to the link-local address is answered by kube-dns, none by the rogue. Before,
// the fallback covered the ClusterIP too and sent both to the variable's address.
func TestKubeDNSEnvNeverRedirectsTheClusterIP(t *testing.T) {
	testenv.RequireRoot(t)
	n := newNode(t)
	var rogue *harness.Upstream
	n.KubeDNS.Exec(t, "ip", "addr", "add", rogueAddr+"/24", "dev", "eth0")
	n.KubeDNS.Do(t, func() { rogue = harness.StartUpstream(t, rogueAddr+":53", harness.AnswerRogue) })
	testenv.NftApply(t, fmt.Sprintf(`table ip rogue-service {
	chain prerouting {
		type nat hook prerouting priority -100; policy accept;
		ip daddr %[1]s meta l4proto { tcp, udp } th dport 53 dnat to %[2]s:53
	}
	chain output {
		type nat hook output priority -100; policy accept;
		ip daddr %[1]s meta l4proto { tcp, udp } th dport 53 dnat to %[2]s:53
	}
}
`, staleClusterIP, rogueAddr))
	t.Cleanup(func() { _ = exec.Command("nft", "delete", "table", "ip", "rogue-service").Run() })
	if got := harness.Who(harness.Dig(n.Pod.Command("dig", "+short", "+tries=1", "+time=1", "@"+staleClusterIP, "x.cluster.local.", "A"))); got != "rogue" {
		t.Fatalf("the rogue does not hold the stale ClusterIP (a pod's query to it answered by %s): the test sees nothing", got)
	}
	for _, tc := range []struct{ name, env string }{
		{"a stale ClusterIP given to a rogue Service", staleClusterIP},
		{"a rogue pod's own address", rogueAddr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Start from a node without a fallback: one another case left would keep its own target.
			_ = exec.Command("nft", "delete", "table", "inet", fallbackTable).Run()
			n.env = []string{"KUBE_DNS_SERVICE_HOST=" + tc.env}
			defer func() { n.env = nil }()
			before := rogue.QueriesFor("failsafe.default.svc.cluster.local.")
			a := n.start()
			a.WaitReady()
			// The warning comes at start, before "ready".
			warned := false
			for _, l := range a.Lines() {
				if l.Level != "warn" || !strings.Contains(l.Msg, "KUBE_DNS_SERVICE_HOST names another kube-dns ClusterIP") {
					continue
				}
				warned = true
				if l.Raw["env"] != tc.env || l.Raw["taken"] != harness.ClusterIP || l.Raw["from"] != "-localip" {
					t.Errorf("the warning says env %v, taken %v from %v; want %s, %s from -localip", l.Raw["env"], l.Raw["taken"], l.Raw["from"], tc.env, harness.ClusterIP)
				}
			}
			if !warned {
				t.Errorf("no warning that KUBE_DNS_SERVICE_HOST=%s disagrees with -localip", tc.env)
			}
			harness.ExpectEverywhere(t, n.Pod, "serving", harness.All("agent"))
			if !covers(t, harness.LocalIP+" . 53") {
				t.Errorf("the fallback covers %v, want the link-local address alone", fallbackElements(t))
			}
			a.Signal(syscall.SIGKILL)
			a.Wait(5 * time.Second)
			got := harness.ExpectEverywhere(t, n.Pod, "after SIGKILL", harness.All("kube-dns"))
			testenv.Run(t, "ip", "link", "del", ifname) // what the SIGKILL left, for the next case
			q := rogue.QueriesFor("failsafe.default.svc.cluster.local.") - before
			if q != 0 {
				t.Errorf("the rogue got %d of the queries", q)
			}
			t.Logf("KUBE_DNS_SERVICE_HOST=%s, -localip %s,%s: after SIGKILL %v; queries the rogue got: %d",
				tc.env, harness.LocalIP, harness.ClusterIP, got, q)
		})
	}
}
