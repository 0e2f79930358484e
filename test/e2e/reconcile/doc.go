// Package reconcile is the tamper matrix: the ways an admin, a firewall reload or a network manager can
// break what the agent keeps in the kernel, an observer that tells from the outside when the kernel is whole
// again, and the agent set-up both the end-to-end test (this package's tests) and the repair benchmark
// (bench/reconcile) share.
//
// Conventions (the IP plan): the agent listens on 169.254.20.10 (the link-local address node-local-dns uses)
// and 10.96.0.10 (the kube-dns ClusterIP) on interface "nodelocaldns"; its upstream, kube-dns-upstream, is a
// test DNS server on 127.0.0.53 answering 192.0.2.53 for every name. Everything lives in the throwaway network
// namespace of the test process (internal/testenv); the agent runs with -syncinterval 1h, so any repair seen
// within the test's bound was caused by an event, not by the periodic pass.
//
// The observer shares no code with the agent: it reads the table with google/nftables and the link with
// vishvananda/netlink, compares them with a baseline taken once the `nft` tool's listing was checked against
// `nodelocaldns -print-rules`, and wakes on the kernel's own nftables and rtnetlink notifications.
package reconcile
