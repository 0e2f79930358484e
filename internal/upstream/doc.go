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
// It never hangs on a dead pod: a dial is bounded by the upstream's smoothed round-trip time; a query that is
// late is sent again on another connection (a hedge) and the first answer wins; a connection is taken out at
// its first sign of death (a read error, EOF, a reset, or hedges that keep beating it while it stays silent) and
// what it held is retried at once elsewhere. Connections are renewed on a jittered schedule (the new one is
// opened first, the old one drains: no new queries, closed once its queries are answered), so a node reaches
// new pods after a scale-up and its load stays even.
package upstream
