package fairshare

import (
	"context"
	"errors"
	"sync"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// Fair is the directive's handler.
type Fair struct {
	Next plugin.Handler
	lim  *limiter
}

// errShare is what a refused query's error says (the errors plugin logs it, as it logs forward's).
var errShare = errors.New("fairshare: the source holds its share of the upstream queries in flight")

// Name implements plugin.Handler.
func (f *Fair) Name() string { return Name }

// ServeDNS passes the query on once its source has a slot, or answers REFUSED as forward's max_concurrent does
// (not cached; a client with a second nameserver moves on at once).
func (f *Fair) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	state := request.Request{W: w, Req: r}
	src := state.IP()
	if !f.lim.acquire(ctx, src) {
		refused.Inc()
		return dns.RcodeRefused, errShare
	}
	defer f.lim.release(src)
	return plugin.NextOrFailure(f.Name(), f.Next, ctx, w, r)
}

var refused = prometheus.NewCounter(prometheus.CounterOpts{
	Namespace: plugin.Namespace, Subsystem: Name, Name: "refused_total",
	Help: "Queries refused because their source held its share of the upstream queries in flight.",
})

// registerMetrics registers the counter with the default registry, as CoreDNS's plugins do, once per process.
var registerMetrics = sync.OnceFunc(func() { prometheus.MustRegister(refused) })
