package dnsserver

import (
	"os"
	"sync"

	"github.com/coredns/coredns/core/dnsserver"

	"github.com/nodelocaldns/nodelocaldns/internal/forward"
)

// Our forward (internal/forward over internal/upstream) runs by default: it spreads misses over every kube-dns
// pod, never waits on a dead one, and costs less CPU per miss than CoreDNS's (docs/performance.md). CoreDNS's
// forward stays compiled in, and forward.Env=coredns runs it instead (the way back); otherwise ours is
// registered as forwardDirective and the Corefile handed to caddy names it (translate.go).
const (
	forwardDirective = "forward_nodelocaldns"
	userForward      = "forward"
)

// pipelinedForward reads forward.Env once: the choice is the process's, as caddy's plugin registry is.
var pipelinedForward = sync.OnceValue(func() bool { return forward.Pipelined(os.Getenv) })

// coreDirectives is CoreDNS's directive list as caddy runs it, our internal names included.
func coreDirectives() []string { return dnsserver.Directives }
