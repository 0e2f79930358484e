package fastpath

import (
	"errors"
	"sync"
	"time"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/metrics/vars"
	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// What CoreDNS records for a cache hit, and what the fast path records for each answer, with the same labels:
//   - the prometheus plugin (vars.Report): coredns_dns_requests_total, coredns_dns_do_requests_total,
//     coredns_dns_request_duration_seconds, coredns_dns_request_size_bytes, coredns_dns_response_size_bytes and
//     coredns_dns_responses_total. Its response size is the length of the message the cache wrote, before the
//     server's scrubbing added the OPT record and compressed it (learn computes it), and its plugin label is the
//     plugin after prometheus in the chain (only the first plugin.NextOrFailure wrapper talks to its recorder);
//   - the cache plugin: coredns_cache_requests_total and coredns_cache_hits_total.
// The handles are resolved once per label set, when an answer is learned, so that a hit only increments.

// series are the handles one learned answer counts into.
type series struct {
	requests, do, rcode     prometheus.Counter // nil when the block has no prometheus plugin (do: when no DO bit)
	duration, reqSize, size prometheus.Observer
	reqLen                  float64
	cacheRequests, hits     prometheus.Counter
}

func (s *series) record(start time.Time, size float64) {
	if s.requests != nil {
		if s.do != nil {
			s.do.Inc()
		}
		s.requests.Inc()
		s.duration.Observe(time.Since(start).Seconds())
		s.size.Observe(size)
		s.reqSize.Observe(s.reqLen)
		s.rcode.Inc()
	}
	s.cacheRequests.Inc()
	s.hits.Inc()
}

// seriesKey is everything the labels and the request size depend on.
type seriesKey struct {
	server, zone, family, qtype, rcode, plugin string
	do, metrics                                bool
	reqLen                                     int
	cacheZones, cacheView, hitType             string
}

type seriesSet struct {
	mu sync.Mutex
	m  map[seriesKey]*series
}

func newSeriesSet() *seriesSet { return &seriesSet{m: map[seriesKey]*series{}} }

func (ss *seriesSet) get(k seriesKey) *series {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if s := ss.m[k]; s != nil {
		return s
	}
	cm := cacheMetrics()
	s := &series{
		reqLen:        float64(k.reqLen),
		cacheRequests: cm.requests.WithLabelValues(k.server, k.cacheZones, k.cacheView),
		hits:          cm.hits.WithLabelValues(k.server, k.hitType, k.cacheZones, k.cacheView),
	}
	if k.metrics {
		const view, proto = "", "udp"
		s.requests = vars.RequestCount.WithLabelValues(k.server, k.zone, view, proto, k.family, k.qtype)
		if k.do {
			s.do = vars.RequestDo.WithLabelValues(k.server, k.zone, view)
		}
		s.duration = vars.RequestDuration.WithLabelValues(k.server, k.zone, view)
		s.size = vars.ResponseSize.WithLabelValues(k.server, k.zone, view, proto)
		s.reqSize = vars.RequestSize.WithLabelValues(k.server, k.zone, view, proto)
		s.rcode = vars.ResponseRcode.WithLabelValues(k.server, k.zone, view, k.rcode, k.plugin)
	}
	ss.m[k] = s
	return s
}

// metricsZone is the zone label the prometheus plugin gives qname (plugin/metrics/handler.go).
func metricsZone(names []string, qname string) string {
	if z := plugin.Zones(names).Matches(qname); z != "" {
		return z
	}
	return "."
}

// qtypeLabel is vars.qTypeString: the types CoreDNS monitors by name, "other" for the rest.
func qtypeLabel(qtype uint16) string {
	switch qtype {
	case dns.TypeAAAA, dns.TypeA, dns.TypeCNAME, dns.TypeDNSKEY, dns.TypeDS, dns.TypeMX, dns.TypeNSEC3,
		dns.TypeNSEC, dns.TypeNS, dns.TypePTR, dns.TypeRRSIG, dns.TypeSOA, dns.TypeSRV, dns.TypeTXT,
		dns.TypeHTTPS, dns.TypeSVCB, dns.TypeIXFR, dns.TypeAXFR, dns.TypeANY:
		return dns.Type(qtype).String()
	}
	return "other"
}

// The cache plugin's counters are unexported; registering identical ones returns the registered ones.
type cacheCounters struct{ requests, hits *prometheus.CounterVec }

var cacheMetrics = sync.OnceValue(func() cacheCounters {
	return cacheCounters{
		requests: existing(prometheus.CounterOpts{Namespace: plugin.Namespace, Subsystem: "cache", Name: "requests_total",
			Help: "The count of cache requests."}, "server", "zones", "view"),
		hits: existing(prometheus.CounterOpts{Namespace: plugin.Namespace, Subsystem: "cache", Name: "hits_total",
			Help: "The count of cache hits."}, "server", "type", "zones", "view"),
	}
})

func existing(opts prometheus.CounterOpts, labels ...string) *prometheus.CounterVec {
	cv := prometheus.NewCounterVec(opts, labels)
	var are prometheus.AlreadyRegisteredError
	if err := prometheus.DefaultRegisterer.Register(cv); errors.As(err, &are) {
		if ex, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
			return ex
		}
	}
	// Not the cache plugin's (it is always compiled in, so this does not happen): count into our own.
	return cv
}
