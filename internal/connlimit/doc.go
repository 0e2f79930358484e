// Package connlimit caps the TCP connections the embedded CoreDNS holds on its listeners, per source address
// and in all, so that no pod can hold enough of them to take the agent past its memory limit (each idle one
// costs about 7.5 KiB of the agent's RSS, and more in the kernel, charged to the same cgroup: 40k from one pod
// exceeded the 512Mi limit).
//
// CoreDNS's server accepts every connection (miekg/dns: one goroutine each) and gives an embedder no handle on
// its listeners or connections, so the cap cannot sit at accept. It is kept the way the fast path finds
// CoreDNS's UDP sockets: in the process's own fd table. A pass lists our TCP sockets connected on a listener's
// address, and when a source holds more than PerSource, or all together more than Total, closes the idlest
// (the source holding the most first, for the total): it shuts the socket's reading side, so CoreDNS's read
// ends and CoreDNS closes it, with a reset (SO_LINGER 0) that frees the kernel's side at once. Passes run every
// 100 ms (a pass over a hundred descriptors costs about 0.3 ms), and every 20 ms while they find something to
// close, so a flood overshoots the cap by what it opens in 100 ms, then in 20 ms. CoreDNS's own timeouts still close a connection that stays idle: 3 s before its first query,
// 10 s between queries (its defaults; the `timeouts` directive changes them).
//
// Only reads of the fd table and of our own sockets, and shutdown of ones CoreDNS accepted.
package connlimit
