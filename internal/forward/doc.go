// Package forward is our implementation of CoreDNS 1.15's `forward` directive: the same syntax, error texts,
// semantics and coredns_forward_* / coredns_proxy_* series, proven by a differential test against CoreDNS's
// plugin (differential_test.go). Plain DNS upstreams go over internal/upstream, the pipelined transport that
// spreads a node's misses over every kube-dns pod and takes a dead one out at its first sign; tls://, https://,
// quic:// upstreams and source_address go over CoreDNS's plugin/pkg/proxy, which also runs every upstream's
// health checks. NODELOCALDNS_FORWARD=coredns runs CoreDNS's own forward instead (the way back).
//
// May touch: the sockets it dials to upstreams through upstream or CoreDNS's proxy.
package forward
