// Package connlimit caps the TCP connections the embedded CoreDNS holds on its listeners, per source address
// and in all, so that no pod can hold enough of them to take the agent past its memory limit (each idle one
// costs about 7.5 KiB of the agent's RSS, and more in the kernel, charged to the same cgroup: 40k from one pod
// exceeded the 512Mi limit).
//
// Where the fast path serves an address (internal/fastpath's tcp.go), the per-source cap is enforced where
// connections are accepted: the kernel steers every connection to the fast path's listeners (Linux 6.1 and
// later), opened through internal/listenlimit with these caps, which resets a source's connection beyond
// them at accept. This package is the cap everywhere else, and the net under that: CoreDNS's listeners where
// the fast path is off or steps aside, their share of connections on older kernels, and the total over all
// listeners on an address.
//
// CoreDNS's server accepts every connection (miekg/dns: one goroutine each) and gives an embedder no handle on
// its listeners or connections, so the cap cannot sit in its accept loop. It sits just beside it, and runs
// only when a connection arrives:
//
//   - wake (wake.go): each listening socket is set O_ASYNC, owned by this process, so the kernel sends SIGIO
//     when a connection joins its accept queue. An idle agent runs no pass at all (it polled every 100 ms
//     before: 10 scans of /proc/self/fd and hundreds of getsockopt a second, issue 39).
//   - list (diag.go): a pass asks the kernel's socket table (NETLINK_SOCK_DIAG) for the established TCP
//     connections on the listeners' ports, filtered in the kernel by state and port: one dump, accepted
//     connections and those still queued alike. Only when a source holds more than PerSource, or all together
//     more than Total, does it read the descriptor table, to count only ours (a listener's address is shared
//     with another instance's during a rollout, through SO_REUSEPORT; queued connections, not yet anyone's,
//     count as ours).
//   - close: the idlest over the cap (per source; then, while more than Total remain, the idlest of the source
//     holding the most) are reset by SOCK_DESTROY (CONFIG_INET_DIAG_DESTROY, CAP_NET_ADMIN), at once and in
//     the kernel: the client gets a reset, CoreDNS's read fails and it closes its side. Where the kernel
//     refuses SOCK_DESTROY, the socket's reading side is shut through its descriptor with SO_LINGER 0 instead,
//     which reaches only accepted connections: a queued one waits for the pass after CoreDNS accepts it (a
//     pass that sees a listener's queue not empty asks for another, 20 ms later).
//
// Passes are at least 2 ms apart and recount everything; a burst of signals is one pending pass. After a
// flood, what is left is within the caps (test/e2e/outage TestTCPConnectionFlood: 100-102 of 15,000 held
// 500 ms after). During it, the bound is what CoreDNS accepts between the signal and the pass's resets, and
// that is not small: the pass is one goroutine among the flood's (CoreDNS starts one per connection, each
// `go` statement queued ahead of a woken goroutine), so under a one-source flood of 7,000-9,000 connections a
// second on two busy cores one source held up to 522-825 open at once in four runs (818 in one run of the
// 100 ms polling it replaced: no better beyond noise), and 797, 1323 and 1509 in three runs beside a CPU
// benchmark on the same cores; with the fast path accepting, 101 in each of three runs. Two ways to bound it
// at accept that do not fit CoreDNS's reload: CoreDNS's listener taken out of its reuseport group by
// shutdown(2) (CoreDNS's accept loop then ends and miekg/dns closes the listener, which caddy hands to the
// next instance on reload: every reload fails), and dnsserver.Config.ProxyProtoConnPolicy, which CoreDNS
// calls in its accept loop (its listener wrappers have no File, so caddy hands no listener over on reload,
// UDP's neither). CoreDNS's own timeouts still close a connection that stays
// idle: 3 s before its first query, 10 s between queries (its defaults; the `timeouts` directive changes
// them).
//
// Touches: the listening sockets' file flags (O_ASYNC and owner), the kernel's socket table of this network
// namespace (dump; destroy of connections on our listeners' addresses only), and this process's descriptor
// table (read, and shutdown of connections CoreDNS accepted; ShutListeners, called at the agent's stop, shuts
// down this process's listeners on CoreDNS's addresses).
//
// May touch: the TCP sockets on CoreDNS's listener addresses, found over sock_diag netlink or /proc/self/fd.
package connlimit
