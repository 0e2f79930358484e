// Package nft owns each nodelocaldns instance's nftables table, `inet nodelocaldns` (`nodelocaldns-<n>` for a
// second instance on the node).
//
// The table is owned (NFT_TABLE_F_OWNER): [Conn] creates it on its lasting netlink socket, the kernel deletes
// it the moment that socket closes (exit, crash, SIGKILL), and no other process, root included, can change or
// delete it; `nft flush ruleset` skips it. [Conn.Instances] lists every instance's table: their sets say which
// addresses each needs on the shared interface, their chains that it serves.
//
// The desired table is a pure value: [Build] turns a [Spec] (listen IPs, DNS port, health port) into a
// [Ruleset], which prints as nft syntax ([Ruleset.Text]) and is programmed by [Conn.Apply] in one netlink
// batch (remove the contents, add the new ones, one commit), so packets see the old table or the new one, never
// a gap. [Registration] is the first step of an instance: the sets only; [Listening] adds the raw-output chain once
// its listeners are bound. Nothing reads
// the table back to compare: it is owned, so nobody else can change it. The fallback table is not owned, so
// [FallbackTable.InSync] reads it back. [Conn.Teardown] deletes it in one call over the
// owning socket.
//
// Hooks and priorities, and why they coexist with kube-proxy and iptables-nft:
//
//	prerouting  -300 raw-prerouting   notrack  tcp/udp to @local4/@local6, DNS port, only while a socket is
//	                                           bound to that address and port ([Gate]): else kube-proxy's DNAT
//	                                           takes the query to kube-dns (fail open)
//	            -200 (conntrack)      kube-proxy's DNAT of the kube-dns ClusterIP needs a conntrack entry
//	            -100 (dstnat)         table ip kube-proxy / iptables-nft's nat PREROUTING
//	input          0 filter-input     accept   tcp/udp to the local IPs, DNS port
//	output      -300 raw-output       notrack  replies from the local IPs (DNS and health port), host-network
//	                                           clients' queries to them, health checks to them
//	output         0 filter-output    accept   replies from the local IPs, DNS port
//
// The link-local fallback is a second, unowned table, `inet nodelocaldns-fallback` ([BuildFallback],
// [FallbackTable.Apply]); it sits at -150 in prerouting and output, after conntrack and before kube-proxy's DNAT,
// and sends every query to a covered address that nothing took (still tracked: no notrack of ours or
// node-cache's) to the kube-dns ClusterIP. No chain of ours reads or writes a mark. fallback.go draws its chains
// and says why. google/nftables cannot decode the reply rules' `ct original`: nft/nlsock reads rules itself.
//
// A packet marked notrack at -300 gets no conntrack entry, and NAT only acts on tracked packets, so a query to
// the kube-dns ClusterIP (also bound on the node-local interface) skips kube-proxy's DNAT whatever it is
// written in (nftables mode, iptables-nft, iptables-legacy) and is delivered to the local cache. Deleting our
// table (or our process ending) is enough to hand the ClusterIP back to kube-proxy: there is nothing else to undo.
//
// Our accept rules keep node-cache's intent and count packets, but an nftables accept only ends its own base
// chain: a drop in another table on the same hook still wins. Reading other tables is nft/foreign's, on
// sockets of its own: the drop policies and rules to warn about, the local IPs a drop certainly stops (the
// instance then steps aside for them: [Spec.StepAside]), the notracks that would keep kube-proxy from taking
// our queries, and the one write into tables we do not own, node-cache's own teardown of the iptables rules a
// killed node-cache left. The notifications that say when to look are nft/nftwatch's.
// See https://github.com/kubernetes-sigs/knftables/blob/main/docs/iptables-porting.md for the doctrine.
package nft
