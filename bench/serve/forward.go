package main

import "github.com/nodelocaldns/nodelocaldns/internal/forward"

// The forward rows (-forward-rows): the defaults with CoreDNS's forward under the `forward` directive instead of
// ours (forward.Env), on the standard and the resilient Corefile, in the miss workload, so that a miss over
// either transport is measured in the same rounds as unbound's.
const (
	corednsForwardName = "coredns forward"
	corednsForwardHint = forward.Env + "=" + forward.CoreDNS + ": CoreDNS's forward (plugin/pkg/proxy) under the forward directive, the defaults otherwise"
)

func forwardVariants() []variant {
	std := variant{name: corednsForwardName, miss: true, env: []string{forward.Env + "=" + forward.CoreDNS}, hint: corednsForwardHint}
	res := std
	res.name += resilientSuffix
	res.corefile = resilientCorefile
	res.resilient = true
	res.hint += "; Corefile with prefetch and serve_stale prefer_positive in every block"
	return []variant{std, res}
}
