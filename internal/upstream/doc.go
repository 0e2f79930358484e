// Package upstream is the transport between the node cache and its upstreams (kube-dns's Service, or the
// resolvers of /etc/resolv.conf): what CoreDNS's plugin/pkg/proxy does under `forward`, shaped for a cache that
// sits one hop from a Service that kube-proxy spreads over several pods.
//
// Per upstream address it holds a few connections of each kind (TCP streams, connected UDP sockets), each its
// own flow, so kube-proxy's per-connection DNAT places each on a pod of its own. On each connection several
// queries are in flight at once (RFC 7766 section 6.2.1.1 for TCP); every query gets an ID unique on its
// connection, and answers are matched by ID (and, over UDP, by question) by one reader goroutine per
// connection. A query goes to the least-loaded live connection.
//
// It never hangs on a dead pod: a dial is bounded by the p99 of the upstream's recent round trips; a query that
// is late by them is sent again on another connection (a hedge) and the first answer wins; a connection is taken
// out at its first sign of death (a read error, EOF, a reset, or hedges that keep beating it while it stays
// silent) and what it held is retried at once elsewhere. A pool renews one connection per few queries it carries
// (the new one is opened first, the old one drains: no new queries, closed once its queries are answered), so a
// node's misses are spread over many placements, and reach new pods after a scale-up. Nothing runs while nothing
// is asked: renewal is done on the query path, and expiry by timers that queries arm.
//
// May touch: the sockets it dials to one upstream.
package upstream
