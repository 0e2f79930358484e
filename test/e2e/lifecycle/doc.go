// Package lifecycle holds the end-to-end lifecycle matrix: the real agent in a "node" namespace, a
// "pod" namespace sending a steady DNS load over a veth to the link-local IP and to the kube-dns ClusterIP, and a
// "kube-dns" namespace serving the ClusterIP through a kube-proxy-like nftables DNAT. Across start, SIGTERM,
// restart, SIGKILL and restart, a surge rollout (two overlapping instances) and -skipteardown, it counts failed
// queries per address, checks that our table never exists twice and that a graceful stop leaves nothing behind,
// and checks /ready against the kernel state. Everything runs in throwaway network namespaces (internal/testenv).
package lifecycle
