package fairshare

import (
	"context"
	"errors"
	"net/netip"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"
	"github.com/nodelocaldns/nodelocaldns/internal/addr"
	"github.com/nodelocaldns/nodelocaldns/internal/chain"
	"github.com/prometheus/client_golang/prometheus"
)

// Fair is the directive's handler.
type Fair struct {
	Next    plugin.Handler
	lim     *limiter
	refused prometheus.Counter
}

// errShare is what a refused query's error says (the errors plugin logs it, as it logs forward's).
var errShare = errors.New("fairshare: the source holds its share of the upstream queries in flight")

// Name implements plugin.Handler.
func (f *Fair) Name() string { return Name }

// ServeDNS passes the query on once its source has a slot, or answers REFUSED as forward's max_concurrent does
// (not cached; a client with a second nameserver moves on at once).
func (f *Fair) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	src := sourceOf(w)
	if !f.lim.acquire(ctx, src) {
		f.refused.Inc()
		return dns.RcodeRefused, errShare
	}
	defer f.lim.release(src)
	return chain.Next(f.Name(), f.Next, ctx, w, r)
}

// sourceOf is the address a query came from, IPv4-mapped addresses as IPv4, read from the writer's net.Addr
// without the string request.Request.IP makes (an allocation per query); the zero Addr when the writer's
// address is none.
func sourceOf(w dns.ResponseWriter) netip.Addr {
	a := w.RemoteAddr()
	if ap, ok := addr.Client(a); ok {
		return ap.Addr().Unmap()
	}
	if a == nil {
		return netip.Addr{}
	}
	ip, _ := netip.ParseAddr((&request.Request{W: w}).IP())
	return ip.Unmap()
}

// Metrics are the directive's series. Whoever runs the directive makes them once with the registry it serves
// and hands them to every setup (Setup), so that the count carries on across reloads.
type Metrics struct{ refused prometheus.Counter }

// NewMetrics makes the series and registers them with reg, or takes the identical ones already registered
// there; nil registers them nowhere.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{refused: prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: Name, Name: "refused_total",
		Help: "Queries refused because their source held its share of the upstream queries in flight.",
	})}
	if reg == nil {
		return m
	}
	if err := reg.Register(m.refused); err != nil {
		if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
			if c, ok := are.ExistingCollector.(prometheus.Counter); ok {
				m.refused = c
			}
		}
	}
	return m
}
