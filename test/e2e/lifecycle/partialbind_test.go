package lifecycle

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// A reload whose `bind` drops the ClusterIP hands the ClusterIP to kube-dns, for pods and
// for host-network clients, over UDP and TCP, and nodelocaldns_unbound_local_ip says so; a reload that binds it
// again takes it back. Before, the host-network rules kept covering it: the node's own queries were refused.
func TestReloadDroppingABindHandsTheAddressToKubeDNS(t *testing.T) {
	n := newNode(t)
	a := n.start()
	a.WaitReady()
	const unbound = `nodelocaldns_unbound_local_ip{ip="` + harness.ClusterIP + `"}`
	expectClusterIP(t, n, harness.AnswerAgent)

	both := harness.StandardCorefile(harness.LocalIP, harness.ClusterIP, "cluster.local")
	only := strings.ReplaceAll(both, "bind "+harness.LocalIP+" "+harness.ClusterIP, "bind "+harness.LocalIP)
	if only == both {
		t.Fatal("the standard Corefile has no `bind LOCAL CLUSTERIP` line to drop the ClusterIP from")
	}
	writeBase(t, a, only)
	testenv.Eventually(t, 10*time.Second, unbound+" 1", func() bool { v, _ := a.Metric(unbound); return v == 1 })
	expectClusterIP(t, n, harness.AnswerKubeDNS)
	if got, err := harness.Lookup(harness.LocalIP+":53", "udp", "ll.cluster.local", 2*time.Second); err != nil || got != harness.AnswerAgent {
		t.Errorf("the link-local address, still bound: %q, %v; want the agent's %s", got, err, harness.AnswerAgent)
	}

	writeBase(t, a, both)
	testenv.Eventually(t, 10*time.Second, unbound+" 0", func() bool { v, _ := a.Metric(unbound); return v == 0 })
	expectClusterIP(t, n, harness.AnswerAgent)
}

// expectClusterIP queries the ClusterIP from the pod and from the node (host network), over UDP and TCP, until
// each is answered by want (a reload's rules take a moment), then once more.
func expectClusterIP(t *testing.T, n *node, want string) {
	t.Helper()
	for _, from := range []string{"pod", "host"} {
		for _, netw := range []string{"udp", "tcp"} {
			var got string
			var err error
			lookup := func() {
				name := fmt.Sprintf("q%d.cluster.local", time.Now().UnixNano())
				got, err = harness.Lookup(harness.ClusterIP+":53", netw, name, time.Second)
			}
			ask := lookup
			if from == "pod" {
				ask = func() { n.Pod.Do(t, lookup) }
			}
			testenv.Eventually(t, 5*time.Second, fmt.Sprintf("%s %s query to the ClusterIP answered by %s", from, netw, want), func() bool {
				ask()
				return err == nil && got == want
			})
		}
	}
}

// writeBase replaces the agent's Corefile.base, as the kubelet updates the ConfigMap's volume.
func writeBase(t *testing.T, a *harness.Agent, corefile string) {
	t.Helper()
	path := filepath.Join(a.Dir, "coredns", "Corefile.base")
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(corefile), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
