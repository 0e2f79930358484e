package forward

import (
	"errors"

	"github.com/coredns/coredns/plugin"
	"github.com/prometheus/client_golang/prometheus"
)

// The series CoreDNS's forward and proxy export, under the same names, help and labels, so that dashboards and
// alerts written for them keep working. The coredns_proxy_* ones are registered by CoreDNS's plugin/pkg/proxy
// (linked in: it carries the health checks and the encrypted transports); registering an identical collector
// returns that one, so both transports count into the same series.
type Metrics struct {
	healthcheckBroken prometheus.Counter       // coredns_forward_healthcheck_broken_total
	maxConcurrent     prometheus.Counter       // coredns_forward_max_concurrent_rejects_total
	requestDuration   *prometheus.HistogramVec // coredns_proxy_request_duration_seconds{proxy_name,to,rcode}
	connCacheHits     *prometheus.CounterVec   // coredns_proxy_conn_cache_hits_total{proxy_name,to,proto}
	connCacheMisses   *prometheus.CounterVec   // coredns_proxy_conn_cache_misses_total{proxy_name,to,proto}
}

// NewMetrics registers the series with reg (the registry the embedding server serves; nil registers them
// nowhere). CoreDNS's proxy package registers the coredns_proxy_* ones with the default registry at init: where
// reg is that registry, its collectors are the ones counted into.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	return &Metrics{
		healthcheckBroken: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: plugin.Namespace, Subsystem: "forward", Name: "healthcheck_broken_total",
			Help: "Counter of the number of complete failures of the healthchecks.",
		})),
		maxConcurrent: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: plugin.Namespace, Subsystem: "forward", Name: "max_concurrent_rejects_total",
			Help: "Counter of the number of queries rejected because the concurrent queries were at maximum.",
		})),
		requestDuration: register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: plugin.Namespace, Subsystem: "proxy", Name: "request_duration_seconds",
			Buckets: plugin.TimeBuckets, NativeHistogramBucketFactor: plugin.NativeHistogramBucketFactor,
			Help: "Histogram of the time each request took.",
		}, []string{"proxy_name", "to", "rcode"})),
		connCacheHits: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: plugin.Namespace, Subsystem: "proxy", Name: "conn_cache_hits_total",
			Help: "Counter of connection cache hits per upstream and protocol.",
		}, []string{"proxy_name", "to", "proto"})),
		connCacheMisses: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: plugin.Namespace, Subsystem: "proxy", Name: "conn_cache_misses_total",
			Help: "Counter of connection cache misses per upstream and protocol.",
		}, []string{"proxy_name", "to", "proto"})),
	}
}

// register registers c with reg, or returns the identical collector already registered.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if ex, ok := are.ExistingCollector.(C); ok {
			return ex
		}
	}
	return c
}
