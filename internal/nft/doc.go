// Package nft is the desired state of each nodelocaldns instance's nftables table, `inet nodelocaldns`
// (`nodelocaldns-<n>` for a second instance on the node), and of the link-local fallback's, as plain values.
//
// [Build] turns a [Spec] (listen IPs, DNS port, health port) into a [Ruleset], which prints as nft syntax
// ([Ruleset.Text]) and encodes into google/nftables objects (encode.go) from the same statements (stmt.go), so
// the text a golden file pins is the bytecode the kernel gets. [Registration] is the first step of an
// instance: the sets only; [Listening] adds the raw-output chain once its listeners are bound; [Draining] is
// what a leaving instance keeps. [DecideFallback] adds the live instances' words ([Instance], as the kernel
// lists them) up to one [FallbackSpec], and [BuildFallback] turns that into the fallback's table. Every name we
// create is in names.go; the kernel's errors have their predicates in errors.go.
//
// nft/nftconn programs these values over the owning socket (the table is owned, NFT_TABLE_F_OWNER: it goes
// with that socket, and nobody else can change it); nft/foreign reads other tables; nft/nftwatch says when to
// look again. Nothing here does I/O.
//
// May touch: nothing.
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
// The link-local fallback is a second, unowned table, `inet nodelocaldns-fallback` ([BuildFallback]); it sits
// at -150 in prerouting and output, after conntrack and before kube-proxy's DNAT, and sends every query to a covered address that nothing took (still tracked: no notrack of ours or
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
