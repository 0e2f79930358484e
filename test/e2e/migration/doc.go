// Package migration proves that a node migrated from a node-cache that was killed without teardown (OOM kill,
// SIGKILL) fails open like any other: node-cache's stale iptables rules, written by the real iptables-nft exactly
// as its initIptables writes them, are removed by the agent, and after the agent itself is SIGKILLed a pod's
// query to the kube-dns ClusterIP is answered by kube-dns through kube-proxy's DNAT. Rules that only resemble
// node-cache's stay, and a notrack of someone else's is reported (fail_open{path="prerouting"} 0).
package migration
