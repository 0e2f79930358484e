package dnsserver

import (
	"os"
	"sync"

	"github.com/coredns/coredns/core/dnsserver"

	"github.com/nodelocaldns/nodelocaldns/internal/forward"
)

// Our forward (internal/forward over internal/upstream) is opted in with forward.Env: it spreads misses over
// every kube-dns pod and never waits on a dead one, but for now costs more CPU per miss than CoreDNS's (see
// docs/performance.md). CoreDNS's forward stays compiled in and is what a Corefile's `forward` runs by default;
// opted in, ours is registered as forwardDirective and the Corefile handed to caddy names it (translate.go).
const (
	forwardDirective = "forward_nodelocaldns"
	userForward      = "forward"
)

// pipelinedForward reads forward.Env once: the choice is the process's, as caddy's plugin registry is.
var pipelinedForward = sync.OnceValue(func() bool { return forward.Pipelined(os.Getenv) })

// coreDirectives is CoreDNS's directive list as caddy runs it, our internal names included.
func coreDirectives() []string { return dnsserver.Directives }
