package main

import "os"

// What the suite expects of the agent where its behaviour is about to change: one place to switch.
//
// expectFailOpenOnSIGKILL: after the agent's container is killed with SIGKILL, queries to the kube-dns ClusterIP
// keep being answered (by kube-dns through kube-proxy) until the restarted container takes over, instead of
// being steered to a dead listener: the agent's table is owned by its netlink socket and goes with the process,
// and its interception is gated on a live listener anyway. Off, the suite only reports the SIGKILL figures (for
// an agent without fail-open); CLUSTER_EXPECT_FAIL_OPEN=1 switches it on for one run.
const expectFailOpenOnSIGKILL = true

func failOpenExpected() bool {
	return expectFailOpenOnSIGKILL || os.Getenv("CLUSTER_EXPECT_FAIL_OPEN") == "1"
}

// Names the suite looks for on the node. Tables are matched by prefix: an agent instance may own `nodelocaldns`
// or `nodelocaldns-<n>` (two instances on one node); the interface is `nodelocaldns` (dummy, or ifb where the kernel lacks dummy).
const (
	ourTablePrefix = "nodelocaldns"
	ourLinkPrefix  = "nodelocaldns"
)

// The addresses of the test cluster (test/cluster/machine.sh sets the same).
const (
	kubeDNSIP     = "10.96.0.10"
	localDNSIP    = "169.254.20.10"
	localDNS6IP   = "fd00::a"
	kubeDNS6IP    = "fd00:10:96::a"
	kubernetesIP  = "10.96.0.1"
	clusterDomain = "cluster.local"
	upstreamA     = "192.0.2.53" // what node-1's upstream stub answers (node.sh: stub-upstream)
	upstream2A    = "192.0.2.55" // what node-2's answers: kube-dns (on node-2) resolved the name
	stubDomainA   = "192.0.2.54" // what the stub-domain server answers (node.sh: stub-domain)
	stubDomainIP  = "10.250.0.54"
)
