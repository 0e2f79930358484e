// Package listeners tests what pods on the node can do to the agent's TCP listeners, with the real binary
// started from the args of deploy/base's DaemonSet and probed the way its probes say, as the kubelet does:
//   - a pod flooding the health port and the metrics port with idle connections fails none of the kubelet's
//     probes (the shipped ones, and the standard manifest's HTTP probe of the health port) and no scrape;
//   - during a surge (two instances on one node), each pod's probes reach that pod's own process;
//   - a port the agent binds, held by another process, fails the start with an error naming the port and the
//     process.
//
// Conventions: the node is harness.NewNode's (the pod at 192.0.2.2, kube-dns behind kube-proxy's DNAT); the agent
// listens on harness.LocalIP and harness.ClusterIP; the manifest's /run/nodelocaldns (its run volume) is each
// agent's own directory.
package listeners
