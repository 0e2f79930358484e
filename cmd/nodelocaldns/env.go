package main

import (
	"fmt"
	"io"

	"github.com/nodelocaldns/nodelocaldns/internal/clients"
	"github.com/nodelocaldns/nodelocaldns/internal/fastpath"
	"github.com/nodelocaldns/nodelocaldns/internal/forward"
)

// envKnobs are the environment variables the agent reads, as `-h` lists them after the flags. Each is read once
// at start, where it is defined; this is only their usage text.
var envKnobs = []struct{ name, usage string }{
	{fastpath.Env, "off: CoreDNS answers every query itself, without the cache-hit fast path (default on)"},
	{clients.Env, "off: count nothing per client (no -top, no per-client metrics or log lines); default on, at most a few MiB (internal/clients)"},
	{tuningEnv, "off: leave the Go runtime's GC and memory-limit settings at Go's defaults (default on)"},
	{nodeNameEnv, "the node's name (the downward API's spec.nodeName), for -startup-taint and -pod-identity"},
	{forward.Env, "coredns: the Corefile's forward runs CoreDNS's own transport instead of ours (the way back); by default (pipelined) ours: several connections spread over every kube-dns pod, queries pipelined, hedged, never waiting on a dead pod"},
	{"<UPSTREAMSVC>_SERVICE_HOST", "the ClusterIP of the -upstreamsvc Service (KUBE_DNS_SERVICE_HOST for kube-dns), set by the kubelet; fills __PILLAR__CLUSTER__DNS__"},
	{"KUBE_DNS_SERVICE_HOST", "the kube-dns ClusterIP, set by the kubelet: where the link-local fallback sends queries when -kube-dns-ip is not given and -localip names no other ClusterIP of its family (a disagreement is a warning, and -localip's is taken)"},
}

func writeEnvUsage(w io.Writer) {
	fmt.Fprintln(w, "\nEnvironment:")
	for _, k := range envKnobs {
		fmt.Fprintf(w, "  %s\n    \t%s\n", k.name, k.usage)
	}
}
