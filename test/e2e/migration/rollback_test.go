package migration

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// TestRollbackToNodeCache goes back to node-cache as docs/migration.md says, with our link-local fallback left
// behind: our DaemonSet's pod stops, node-cache comes back with its own interface (same name, not created by
// us), its iptables rules and its listener on both addresses. node-cache then takes every query, pods' and the
// node's, UDP and TCP: the fallback leaves what node-cache's NOTRACK took. `-teardown` afterwards leaves
// node-cache's interface alone, says so, and node-cache still takes everything.
func TestRollbackToNodeCache(t *testing.T) {
	testenv.RequireRoot(t)
	n := harness.NewNode(t)
	for _, table := range []string{"raw", "filter"} {
		testenv.Run(t, "iptables", "-t", table, "-F")
	}
	localips := harness.LocalIP + "," + harness.ClusterIP
	a := harness.Start(t, harness.Config{
		Args:         []string{"-localip", localips, "-upstreamsvc", "kube-dns-upstream", "-health-port", healthPort},
		BaseCorefile: harness.StandardCorefile(harness.LocalIP, harness.ClusterIP, "cluster.local"),
		Env:          []string{"KUBE_DNS_UPSTREAM_SERVICE_HOST=" + harness.UpstreamClusterIP, "KUBE_DNS_SERVICE_HOST=" + harness.ClusterIP},
	})
	a.WaitReady()
	harness.ExpectEverywhere(t, n.Pod, "our agent serving", harness.All("agent"))
	if code := a.Stop(10 * time.Second); code != 0 {
		t.Fatalf("agent exited with %d after SIGTERM", code)
	}
	if out := testenv.Run(t, "nft", "list", "tables"); !strings.Contains(out, "table inet nodelocaldns-fallback") {
		t.Fatalf("no fallback table left behind: the test would not see it:\n%s", out)
	}

	// node-cache's start-up: its interface (a dummy in production; this kernel may lack the kind), its rules
	// as its initIptables inserts them, its listener.
	kind := "dummy"
	if exec.Command("ip", "link", "add", "nodelocaldns", "type", kind).Run() != nil {
		kind = "ifb"
		testenv.Run(t, "ip", "link", "add", "nodelocaldns", "type", kind)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", "nodelocaldns").Run() })
	for _, ip := range []string{harness.LocalIP, harness.ClusterIP} {
		testenv.Run(t, "ip", "addr", "add", ip+"/32", "dev", "nodelocaldns")
		for _, r := range nodeCacheRules(ip) {
			testenv.Run(t, "iptables", r...)
		}
	}
	testenv.Run(t, "ip", "link", "set", "nodelocaldns", "up")
	for _, ip := range []string{harness.LocalIP, harness.ClusterIP} {
		harness.StartUpstream(t, ip+":53", harness.AnswerNodeCache)
	}
	harness.ExpectEverywhere(t, n.Pod, "node-cache back, our fallback left behind", harness.All("node-cache"))

	out, code := harness.RunBinary(t, harness.Binary(t), "-teardown", "-localip", localips)
	if code != 0 {
		t.Fatalf("-teardown exited with %d:\n%s", code, out)
	}
	if !strings.Contains(out, "we did not create it") {
		t.Errorf("-teardown does not say it left node-cache's interface, and why:\n%s", out)
	}
	if l := testenv.Run(t, "ip", "-o", "addr", "show", "dev", "nodelocaldns"); !strings.Contains(l, harness.LocalIP) || !strings.Contains(l, harness.ClusterIP) {
		t.Errorf("-teardown changed node-cache's %s interface:\n%s", kind, l)
	}
	harness.ExpectEverywhere(t, n.Pod, "after -teardown", harness.All("node-cache"))
}
