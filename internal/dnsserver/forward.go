package dnsserver

import (
	"os"
	"sync"

	"github.com/coredns/coredns/core/dnsserver"
	"go.uber.org/zap"

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

// carryClientSubnet marks the upstreams of a configuration's forwards that are the cluster DNS as carrying the
// client's address (Options.ClientSubnetTo). It runs when the configuration is committed: the misses of the
// instant between its listeners opening and its commit go without it, as they go uncounted by the clients
// accounting. With it asked for and no forward sending to the cluster DNS (CoreDNS's forward asked for, or a
// Corefile that does not name the address), it says so at each configuration.
func (s *Server) carryClientSubnet(forwards []*forward.Forward) {
	if !s.clientSubnetTo.IsValid() {
		return
	}
	n := 0
	for _, f := range forwards {
		n += f.CarryClientSubnet(s.clientSubnetTo)
	}
	if n == 0 {
		s.log.Warn("no forward sends to the cluster DNS: its queries carry no client address",
			zap.Stringer("clusterdns", s.clientSubnetTo), zap.Bool("pipelined", pipelinedForward()))
		return
	}
	s.log.Debug("queries to the cluster DNS carry the client's address", zap.Stringer("clusterdns", s.clientSubnetTo), zap.Int("upstreams", n))
}
