package forward

import (
	"math/rand/v2"
	"sync/atomic"
)

// policy orders a forward's upstreams for one query, as CoreDNS's `policy` option does.
type policy interface {
	list(ps []*upstreamProxy) []*upstreamProxy
	String() string
}

// random tries the upstreams in a random order (the default).
type random struct{}

func (random) String() string { return "random" }

func (random) list(ps []*upstreamProxy) []*upstreamProxy {
	switch len(ps) {
	case 1:
		return ps
	case 2:
		if rand.IntN(2) == 0 {
			return []*upstreamProxy{ps[1], ps[0]}
		}
		return ps
	}
	out := make([]*upstreamProxy, len(ps))
	for i, j := range rand.Perm(len(ps)) {
		out[i] = ps[j]
	}
	return out
}

// roundRobin starts each query at the next upstream and goes on in order.
type roundRobin struct{ robin atomic.Uint32 }

func (*roundRobin) String() string { return "round_robin" }

func (r *roundRobin) list(ps []*upstreamProxy) []*upstreamProxy {
	i := int(r.robin.Add(1) % uint32(len(ps)))
	out := make([]*upstreamProxy, 0, len(ps))
	out = append(out, ps[i])
	out = append(out, ps[:i]...)
	return append(out, ps[i+1:]...)
}

// sequential always tries the upstreams in the order given.
type sequential struct{}

func (sequential) String() string { return "sequential" }

func (sequential) list(ps []*upstreamProxy) []*upstreamProxy { return ps }
