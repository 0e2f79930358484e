// Package fairshare is the `fairshare` directive: a bound on the queries one server block sends on to its
// forwards, shared fairly between the clients asking, so that one pod flooding unique names at a slow upstream
// cannot have every other pod's misses refused.
//
//	fairshare LIMIT
//
// It runs just before forward (dnsserver puts it there in the directive order), after cache, so only misses
// count, over every transport: UDP handed over by the fast path, UDP CoreDNS reads itself, and TCP. The agent
// writes it next to the max_concurrent it gives an unbounded forward (corefile.BoundForwards), with the same
// LIMIT, so forward's own bound is never what refuses a query while fairshare runs. limiter.go has the rules.
//
// The bound is shared in two levels: between source prefixes (a /24 for IPv4, a /64 for IPv6), then between
// the addresses of a prefix. Many addresses, whether many pods or one pod sending UDP from addresses it makes
// up (CAP_NET_RAW, on a CNI that does not check sources), weigh as the few prefixes they are in. Pods behind
// SNAT and host-network pods share the node's address, and so one share: they are one client here as they
// are to any upstream. What a source-address rule cannot do: a spoofing pod that spreads its sources over as
// many prefixes as the bound has slots (250 /24s) brings every prefix's share, the victim's too, down to one
// slot; and the pods of one node usually share one /24, where addresses share per address as before.
//
// May touch: nothing.
package fairshare
