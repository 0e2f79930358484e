// Package foreign reads the nftables tables that are not ours, for what they do to pods' DNS: the base chains
// on the DNS path (dnspath.go), what a chain's rules do to one of our packets (the packet model, packet.go),
// whether a foreign firewall drops our traffic or covers an address we would intercept (cover.go), and
// node-cache's leftover rules in iptables-nft's raw and filter tables, which it removes (nodecache.go) — the
// one write. Each call runs on a short-lived netlink socket of its own (socket.go); xtables.go reads which
// legacy iptables tables the kernel holds.
//
// May touch: nftables over short-lived sockets of its own (read-only but for node-cache's leftover rules), with /proc/net's iptables table names.
package foreign
