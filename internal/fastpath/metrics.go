package fastpath

import (
	"sync"
	"time"

	"github.com/coredns/coredns/plugin/metrics/vars"
	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodelocaldns/nodelocaldns/internal/dnsname"
)

// What CoreDNS records for a cache hit, and what the fast path records for each answer, with the same labels:
//   - the prometheus plugin (vars.Report): coredns_dns_requests_total, coredns_dns_do_requests_total,
//     coredns_dns_request_duration_seconds, coredns_dns_request_size_bytes, coredns_dns_response_size_bytes and
//     coredns_dns_responses_total. Its response size is the length of the message the cache wrote, before the
//     server's scrubbing added the OPT record and compressed it (learn computes it), and its plugin label is the
//     plugin after prometheus in the chain (only the first plugin.NextOrFailure wrapper talks to its recorder);
//   - the cache plugin: coredns_cache_requests_total and coredns_cache_hits_total, which dnscache.Hit.Serve
//     counts itself.
// The handles are resolved once per label set, when an answer is learned, so that a hit only increments. The
// request size is the entry's, not the label set's: keyed by it, one name asked with padding of every length
// made a set of its own for each (799 for one name in the edges issue), kept until a reload.

// series are the handles one label set counts into; nil when the block has no prometheus plugin. The
// counters are CoreDNS's; the histograms the fast path's share of CoreDNS's (histogram.go).
type series struct {
	requests, do, rcode     prometheus.Counter // do: nil when no DO bit
	duration, reqSize, size *hist
}

// count adds n answers to the series' counters.
func (s *series) count(n int) {
	if s.do != nil {
		s.do.Add(float64(n))
	}
	s.requests.Add(float64(n))
	s.rcode.Add(float64(n))
}

// answered are the entries a reader answered from in one batch, recorded together once the batch is answered:
// every answer of a batch took the same time (from the receive, so the clock is read twice per batch, not
// twice per answer), and each series is added to once per run of answers from it.
type answered struct {
	entries [batchSize]*entry
	n       int
}

func (a *answered) add(e *entry) { a.entries[a.n] = e; a.n++ }

// record records the batch's answers, which took took, and empties it.
func (a *answered) record(took time.Duration) {
	secs := took.Seconds()
	for i := 0; i < a.n; {
		s := a.entries[i].series
		j := i + 1
		for j < a.n && a.entries[j].series == s {
			j++
		}
		if s != nil {
			s.count(j - i)
			s.duration.observe(s.duration.point(secs), j-i)
			s.size.observeEach(a.entries[i:j], sizeAt)
			s.reqSize.observeEach(a.entries[i:j], reqAt)
		}
		i = j
	}
	clear(a.entries[:a.n])
	a.n = 0
}

func sizeAt(e *entry) point { return e.sizeAt }
func reqAt(e *entry) point  { return e.reqAt }

// The families of CoreDNS's histograms (plugin/metrics/vars).
const (
	durationFamily = "coredns_dns_request_duration_seconds"
	sizeFamily     = "coredns_dns_response_size_bytes"
	reqSizeFamily  = "coredns_dns_request_size_bytes"
)

// seriesKey is everything the labels depend on.
type seriesKey struct {
	server, zone, family, qtype, rcode, plugin string
	do                                         bool
}

type seriesSet struct {
	hists *histSet // the process's (Metrics), which outlive the set
	mu    sync.Mutex
	m     map[seriesKey]*series
}

func newSeriesSet(hists *histSet) *seriesSet {
	return &seriesSet{hists: hists, m: map[seriesKey]*series{}}
}

func (ss *seriesSet) get(k seriesKey) *series {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if s := ss.m[k]; s != nil {
		return s
	}
	const view, proto = "", "udp"
	s := &series{
		requests: vars.RequestCount.WithLabelValues(k.server, k.zone, view, proto, k.family, k.qtype),
		duration: ss.hists.get(durationFamily, vars.RequestDuration.WithLabelValues(k.server, k.zone, view), durationKeys),
		size:     ss.hists.get(sizeFamily, vars.ResponseSize.WithLabelValues(k.server, k.zone, view, proto), sizeKeys),
		reqSize:  ss.hists.get(reqSizeFamily, vars.RequestSize.WithLabelValues(k.server, k.zone, view, proto), sizeKeys),
		rcode:    vars.ResponseRcode.WithLabelValues(k.server, k.zone, view, k.rcode, k.plugin),
	}
	if k.do {
		s.do = vars.RequestDo.WithLabelValues(k.server, k.zone, view)
	}
	ss.m[k] = s
	return s
}

// metricsZone is the zone label the prometheus plugin gives qname (plugin/metrics/handler.go).
func metricsZone(names []string, qname string) string {
	if z := dnsname.Longest(names, qname); z != "" {
		return z
	}
	return "."
}

// QTypeLabel is vars.qTypeString: the types CoreDNS monitors by name, "other" for the rest.
func QTypeLabel(qtype uint16) string {
	switch qtype {
	case dns.TypeAAAA, dns.TypeA, dns.TypeCNAME, dns.TypeDNSKEY, dns.TypeDS, dns.TypeMX, dns.TypeNSEC3,
		dns.TypeNSEC, dns.TypeNS, dns.TypePTR, dns.TypeRRSIG, dns.TypeSOA, dns.TypeSRV, dns.TypeTXT,
		dns.TypeHTTPS, dns.TypeSVCB, dns.TypeIXFR, dns.TypeAXFR, dns.TypeANY:
		return dns.Type(qtype).String()
	}
	return "other"
}
