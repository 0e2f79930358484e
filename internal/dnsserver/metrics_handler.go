package dnsserver

import (
	"context"
	"sync"
	"time"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/metrics"
	"github.com/coredns/coredns/plugin/metrics/vars"
	"github.com/coredns/coredns/plugin/pkg/rcode"
	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodelocaldns/nodelocaldns/internal/dnsname"
	"github.com/nodelocaldns/nodelocaldns/internal/fastpath"
)

// metricsHandler is the `prometheus` directive's handler: upstream's (plugin/metrics/handler.go, which it
// embeds for its zones, name and Next) with the same series, labels and values, but what it reports per query
// is resolved once per label set. Upstream's vars.Report looks up five label sets per query (a hash of every
// label value and a lock each): 5% of the agent's CPU per forwarded query in bench/serve's miss workload.
// Here a query costs one map look-up under a read lock.
type metricsHandler struct {
	*metrics.Metrics
	reports reportSet
}

// Upstream returns the plugin it stands for: the fast path reads its zones (internal/fastpath's view).
func (h *metricsHandler) Upstream() *metrics.Metrics { return h.Metrics }

// ServeDNS is upstream's, reporting through h.reports.
func (h *metricsHandler) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	state := request.Request{W: w, Req: r}
	originalSize := r.Len() // before any plugin changes the request
	zone := dnsname.Longest(h.ZoneNames(), state.QName())
	if zone == "" {
		zone = "."
	}
	rw := metrics.NewRecorder(w)
	status, err := plugin.NextOrFailure(h.Name(), h.Next, ctx, rw, r)
	rc := rw.Rcode
	if !plugin.ClientWrite(status) {
		rc = status // no answer written: the server answers with the status as the rcode
	}
	k := reportKey{server: metrics.WithServer(ctx), zone: zone, view: metrics.WithView(ctx), proto: state.Proto(),
		family: "1", qtype: fastpath.QTypeLabel(state.QType()), rcode: rcode.ToString(rc), plugin: rw.Plugin, do: state.Do()}
	if state.Family() == 2 {
		k.family = "2"
	}
	reqSize := originalSize
	if reqSize <= 0 {
		reqSize = state.Len()
	}
	h.reports.get(k).report(rw.Len, reqSize, rw.Start)
	return status, err
}

// reportKey is every label value vars.Report gives one query.
type reportKey struct {
	server, zone, view, proto, family, qtype, rcode, plugin string
	do                                                      bool
}

// report is vars.Report's handles for one reportKey.
type report struct {
	requests, do, rcode     prometheus.Counter // do: nil without the DO bit
	duration, size, reqSize prometheus.Observer
}

func (r *report) report(size, reqSize int, start time.Time) {
	if r.do != nil {
		r.do.Inc()
	}
	r.requests.Inc()
	r.duration.Observe(time.Since(start).Seconds())
	r.size.Observe(float64(size))
	r.reqSize.Observe(float64(reqSize))
	r.rcode.Inc()
}

// reportSet holds the handles of every label set seen, as the vectors do: until a restart resets them
// (plugin/metrics keeps its series across reloads, and so does a handler made again by the reload).
type reportSet struct {
	mu sync.RWMutex
	m  map[reportKey]*report
}

func (s *reportSet) get(k reportKey) *report {
	s.mu.RLock()
	r := s.m[k]
	s.mu.RUnlock()
	if r != nil {
		return r
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r = s.m[k]; r != nil {
		return r
	}
	r = &report{
		requests: vars.RequestCount.WithLabelValues(k.server, k.zone, k.view, k.proto, k.family, k.qtype),
		duration: vars.RequestDuration.WithLabelValues(k.server, k.zone, k.view),
		size:     vars.ResponseSize.WithLabelValues(k.server, k.zone, k.view, k.proto),
		reqSize:  vars.RequestSize.WithLabelValues(k.server, k.zone, k.view, k.proto),
		rcode:    vars.ResponseRcode.WithLabelValues(k.server, k.zone, k.view, k.rcode, k.plugin),
	}
	if k.do {
		r.do = vars.RequestDo.WithLabelValues(k.server, k.zone, k.view)
	}
	if s.m == nil {
		s.m = map[reportKey]*report{}
	}
	s.m[k] = r
	return r
}
