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
// A client is a source address. Pods behind SNAT and host-network pods share the node's address, and so one
// share: they are one client here as they are to any upstream.
package fairshare
