package outage

import (
	"path/filepath"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// The node of the tests with two pods (fair_test.go, tcpflood_test.go): the agent on fairLocal (on the node's
// loopback, -setupinterface=false), two pods hanging off the node by veth, each its own network namespace and
// source address, and kube-dns-upstream (and, for external names, the kube-dns ConfigMap's
// upstreamNameservers) on 127.0.0.53:
//
//	flood pod   192.0.2.2   (node side 192.0.2.1)   the one asking far more than its share
//	victim pod  198.18.0.2  (node side 198.18.0.1)  a few queries of its own
const fairLocal = "169.254.20.10"

// twoPods makes the flood and victim pods and puts fairLocal on the node's loopback, until the test ends.
func twoPods(t *testing.T) (flooder, victim *testenv.Peer) {
	flooder = testenv.AddPeer(t, "flood", "192.0.2.1", "192.0.2.2")
	victim = testenv.AddPeer(t, "victim", "198.18.0.1", "198.18.0.2")
	testenv.Run(t, "ip", "addr", "add", fairLocal+"/32", "dev", "lo")
	t.Cleanup(func() { testenv.Run(t, "ip", "addr", "del", fairLocal+"/32", "dev", "lo") })
	return flooder, victim
}

// startOnLoopback starts the agent on fairLocal with the standard Corefile, kube-dns-upstream on upstream and
// the kube-dns ConfigMap's data kubeDNS, and waits until it is ready.
func startOnLoopback(t *testing.T, kubeDNS map[string]string) *harness.Agent {
	dir := t.TempDir()
	vol := harness.NewConfigMapVolume(t, filepath.Join(dir, "kube-dns"), kubeDNS)
	a := harness.Start(t, harness.Config{
		Dir:          dir,
		BaseCorefile: harness.StandardCorefile(fairLocal, "", "cluster.local"),
		Args: []string{"-localip", fairLocal, "-setupinterface=false", "-setupiptables=false",
			"-upstreamsvc", "kube-dns-upstream", "-kubednscm", vol.Dir},
		Env: []string{"KUBE_DNS_UPSTREAM_SERVICE_HOST=" + upstream},
	})
	a.WaitReady()
	return a
}
