// Package foreign proves with traffic what a pod's DNS query meets when another table drops on the path of
// DNS traffic: a host firewall's `iptables -P INPUT DROP` (iptables-nft) and an inet table that
// rejects udp dport 53 on input, each without and with the agent, and that the foreign-drop check names each.
//
// Without the agent a pod's query to the kube-dns ClusterIP is DNATed by kube-proxy and forwarded to kube-dns:
// it crosses the forward hook, never input, so an input firewall does not touch it. With the agent the query is
// notracked and delivered locally, through input, where another table's drop wins over our accept (an
// nftables accept ends only its own base chain). The test records both, so that the trade is visible and
// stays true; only detection, not an override, is possible without writing into tables we do not own.
package foreign
